import { clone } from "@bufbuild/protobuf";
import type { Kysely } from "kysely";
import { SessionSchema, type Session } from "../../gen/ledger/v1/session_pb.js";
import type { DB } from "./schema.js";
import { getVersionedSessionRow, rowToSession } from "./session-store.js";

/**
 * A session as this process last wrote or read it, with the row version (`xmin` as text) of
 * that state and its `last_seq`. A write planned against it sends the version along, and the
 * statement that carries the write out refuses it when the row changed since (another replica
 * wrote it, or a transaction of this process that evicted the entry): the cache only saves the
 * read before the write, never decides what is stored.
 */
export interface KnownSession {
  /** The session (a copy: change it freely). */
  session: Session;
  version: string;
  lastSeq: number;
}

/** Entries kept per database; the least recently used go first. */
const MAX_ENTRIES = 10_000;

/**
 * The sessions this process knows, per database handle (docs/design.md "Write path"): written
 * through by the one-statement writes (`writeSessionOnce`), evicted by the transaction writes
 * (`writeSession`), deletions and hints from other replicas.
 */
export class SessionCache {
  readonly #entries = new Map<string, KnownSession>();

  /** The known state of `sessionId` (a copy), or undefined. */
  get(sessionId: string): KnownSession | undefined {
    const entry = this.#entries.get(sessionId);
    if (!entry) return undefined;
    this.#entries.delete(sessionId);
    this.#entries.set(sessionId, entry);
    return { ...entry, session: clone(SessionSchema, entry.session) };
  }

  /** Records `known` (copied) as the state of its session. */
  put(known: KnownSession): void {
    const id = known.session.id;
    this.#entries.delete(id);
    this.#entries.set(id, { ...known, session: clone(SessionSchema, known.session) });
    if (this.#entries.size > MAX_ENTRIES) this.#entries.delete(this.#entries.keys().next().value!);
  }

  /**
   * After a write that changed only counters (no `expectVersion`): moves the entry to the new
   * version when it described the row just before that write (`lastSeq` = `previousLastSeq`),
   * else drops it (another write came between).
   */
  advance(sessionId: string, previousLastSeq: number, next: { version: string; lastSeq: number; messageCount: number }): void {
    const entry = this.#entries.get(sessionId);
    if (!entry) return;
    if (entry.lastSeq !== previousLastSeq) {
      this.#entries.delete(sessionId);
      return;
    }
    entry.version = next.version;
    entry.lastSeq = next.lastSeq;
    entry.session.messageCount = next.messageCount;
  }

  /** Forgets `sessionId`: the next write reads it first. */
  evict(sessionId: string): void {
    this.#entries.delete(sessionId);
  }
}

const caches = new WeakMap<Kysely<DB>, SessionCache>();

/** The `SessionCache` of a database handle (one per handle, made on first use). */
export function sessionCache(db: Kysely<DB>): SessionCache {
  let cache = caches.get(db);
  if (!cache) {
    cache = new SessionCache();
    caches.set(db, cache);
  }
  return cache;
}

/**
 * The known state of `sessionId`: from the cache, else read (one query) and cached. Undefined
 * when the session does not exist.
 */
export async function knownSession(db: Kysely<DB>, sessionId: string): Promise<KnownSession | undefined> {
  const cache = sessionCache(db);
  const cached = cache.get(sessionId);
  if (cached) return cached;
  return readKnownSession(db, sessionId);
}

/** Reads `sessionId` and caches it (replacing what was known), or undefined when it does not exist (then evicted). */
export async function readKnownSession(db: Kysely<DB>, sessionId: string): Promise<KnownSession | undefined> {
  const cache = sessionCache(db);
  const read = await getVersionedSessionRow(db, sessionId);
  if (!read) {
    cache.evict(sessionId);
    return undefined;
  }
  const known = { session: rowToSession(read.row), version: read.version, lastSeq: Number(read.row.last_seq) };
  cache.put(known);
  return { ...known, session: clone(SessionSchema, known.session) };
}
