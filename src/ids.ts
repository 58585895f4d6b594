import { randomFillSync } from "node:crypto";
import { monotonicFactory } from "ulid";

/** Prefixes of server ids: sessions, messages, parts, permission requests. */
export type IdPrefix = "ses" | "msg" | "prt" | "per";

/** A session id: `ses_` + a 26-character ULID. */
export type SessionId = `ses_${string}`;
/** A message id: `msg_` + a 26-character ULID. */
export type MessageId = `msg_${string}`;
/** A part id: `prt_` + a 26-character ULID. */
export type PartId = `prt_${string}`;
/** A permission request id: `per_` + a 26-character ULID. */
export type PermissionId = `per_${string}`;

type IdOf<P extends IdPrefix> = P extends "ses" ? SessionId : P extends "msg" ? MessageId : P extends "prt" ? PartId : PermissionId;

/** Random bytes drawn from the OS in blocks, handed out one at a time. */
const pool = new Uint8Array(4096);
let next = pool.length;

/**
 * The ULID generator's source of randomness: one cryptographically random byte as a fraction in
 * [0, 1) (a multiple of 1/256; the ULID alphabet has 32 characters, so each is equally likely).
 * ulid's default calls `crypto.getRandomValues` once per character (16 per id); measured in a
 * CPU profile of noReply prompts, those calls took ~2.5 % of the process's time (~1.9 ms of CPU
 * per prompt on the loaded bench machine). Here one `randomFillSync` serves 256 ids.
 */
function pooledRandom(): number {
  if (next === pool.length) {
    randomFillSync(pool);
    next = 0;
  }
  return pool[next++]! / 256;
}

const ulid = monotonicFactory(pooledRandom);

/**
 * A bare ULID (26 Crockford base32 characters, time-ordered, monotonic within this process) from
 * the pooled randomness above: request ids and anything else that needs one without a prefix.
 */
export function newUlid(): string {
  return ulid();
}
const ULID = /^[0-9A-HJKMNP-TV-Z]{26}$/;

/**
 * Makes a new id with `prefix`: `prefix_` + ULID. ULIDs are time-ordered (48-bit millisecond
 * time, which does not wrap before year 10889) and monotonic within a millisecond in this
 * process, so ids made here ascend. Ids only identify; ordering in the ledger uses positions.
 * Follows OpenCode `Identifier.ascending` without its 48-bit counter wrap.
 */
export function newId<P extends IdPrefix>(prefix: P): IdOf<P> {
  return `${prefix}_${ulid()}` as IdOf<P>;
}

/** How each kind of id is written, in words for error messages ("ses_ followed by 26 Crockford base32 characters"). */
export const ID_FORMAT: Readonly<Record<IdPrefix, string>> = {
  ses: "ses_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
  msg: "msg_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
  prt: "prt_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
  per: "per_ followed by 26 Crockford base32 characters (0-9 and A-Z without I, L, O, U)",
};

/** True when `value` is `prefix_` + a valid ULID. */
export function isId<P extends IdPrefix>(prefix: P, value: string): value is IdOf<P> {
  return value.startsWith(`${prefix}_`) && ULID.test(value.slice(prefix.length + 1));
}
