import { describe, expect, it } from "vitest";
import { encodeGrpcMessage } from "../../src/server/grpc-message.js";

// The gRPC spec's Percent-Encoded grpc-message, as src/server/grpc-message.ts writes it; the
// real-client side is test/server/interop.test.ts.
describe("encodeGrpcMessage", () => {
  it("keeps printable ASCII, and encodes %, control characters and UTF-8 bytes", () => {
    expect(encodeGrpcMessage("session_id: must be (A-Z without I, L, O, U) ; a=b?")).toBe(
      "session_id: must be (A-Z without I, L, O, U) ; a=b?",
    );
    expect(encodeGrpcMessage("100% naïve\n")).toBe("100%25 na%C3%AFve%0A");
  });

  // A review, 2026-12-03: a field value may not start or end with whitespace in HTTP/2 (RFC 9113
  // §8.2.1); a strict peer resets such a stream, and its caller sees INTERNAL instead of the error.
  it("encodes a space at either end, and keeps the ones inside", () => {
    expect(encodeGrpcMessage(" a b ")).toBe("%20a b%20");
    expect(encodeGrpcMessage(" ")).toBe("%20");
    expect(decodeURIComponent(encodeGrpcMessage(" a b "))).toBe(" a b ");
  });
});
