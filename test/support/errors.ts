import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";

// The one place tests wait for an expected failure: of a call, a stream, or any promise.

/** Awaits `promise`, which must reject, and returns what it rejected with (fails the test if it resolved). */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => expect.unreachable("expected a rejection"),
    (error: unknown) => error,
  );
}

/** Awaits `promise`, which must reject with an `Error`, and returns it. */
export async function errorOf(promise: Promise<unknown>): Promise<Error> {
  const error = await rejection(promise);
  expect(error).toBeInstanceOf(Error);
  return error as Error;
}

/**
 * Awaits a call that must fail, or the first step of a stream that must fail, and returns its
 * error, which must be a `ConnectError` (fails the test if it succeeded or the stream yielded).
 */
export async function connectError(call: Promise<unknown> | AsyncIterable<unknown>): Promise<ConnectError> {
  let error: unknown;
  try {
    if (!(Symbol.asyncIterator in call)) await call;
    else for await (const _ of call) break;
  } catch (e) {
    error = e;
  }
  if (error === undefined) expect.unreachable("expected the call to fail");
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

/**
 * Awaits a call (or a stream's first step) that must fail with `code`, and with a message (`rawMessage`,
 * without the "[code]" prefix) equal to or matching `message` when given; returns the error.
 */
export async function expectConnectError(
  call: Promise<unknown> | AsyncIterable<unknown>,
  code: Code,
  message?: string | RegExp,
): Promise<ConnectError> {
  const error = await connectError(call);
  expect(Code[error.code], error.rawMessage).toBe(Code[code]);
  if (typeof message === "string") expect(error.rawMessage).toBe(message);
  else if (message) expect(error.rawMessage).toMatch(message);
  return error;
}

/** The code of a failed call, or undefined when it succeeded (or failed with something other than a ConnectError). */
export async function codeOf(promise: Promise<unknown>): Promise<Code | undefined> {
  return promise.then(
    () => undefined,
    (e: unknown) => (e instanceof ConnectError ? e.code : undefined),
  );
}

/** The code and `ErrorInfo.reason` / field of a failed call (undefined when it succeeded). */
export async function failure(promise: Promise<unknown>): Promise<{ code: Code; reason?: string; field?: string } | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    if (!(error instanceof ConnectError)) throw error;
    const info = error.findDetails(ErrorInfoSchema)[0];
    return { code: error.code, reason: info?.reason, field: info?.metadata.field };
  }
}
