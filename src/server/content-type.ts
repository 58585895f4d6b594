import type http from "node:http";
import type http2 from "node:http2";
import type { UniversalHandler } from "@connectrpc/connect/protocol";

/**
 * What the server answers a request to a procedure that no protocol accepts: HTTP 405 for an HTTP
 * method the procedure does not take ({@link checkMethod}), and for a content type: HTTP 415 (as
 * connect-es does, and the Connect and gRPC protocols ask) with a Connect error body
 * `{"code":"invalid_argument","message":...}` saying what to send, where connect-es sends an
 * empty body. The request is the client's mistake, so its code is `invalid_argument`: a Connect
 * client reads the code from the body (without one, the protocols' HTTP → code tables make a 415
 * `unknown`, which tells an operator nothing), and `/metrics` and the log count it so.
 */
export interface RejectedRequest {
  /** 415 Unsupported Media Type, or 405 Method Not Allowed (see {@link checkMethod}). */
  status: 415 | 405;
  /** `content-type: application/json` and `accept-post` listing the accepted types (405: `allow`). */
  headers: Record<string, string>;
  /** The Connect error JSON (code `invalid_argument`). */
  body: string;
}

/** Content types of every protocol the server speaks, for the `accept-post` header. */
const ACCEPTED = {
  unary: ["application/json", "application/proto"],
  streaming: ["application/connect+json", "application/connect+proto"],
  grpc: [
    "application/grpc",
    "application/grpc+proto",
    "application/grpc+json",
    "application/grpc-web",
    "application/grpc-web+proto",
    "application/grpc-web+json",
  ],
};

/**
 * Checks a POST to `handler`'s procedure: undefined when its `content-type` is one the handler
 * accepts (or the request is not a POST: Connect GET requests carry none), else the 415 answer,
 * whose message names the content type received (or says there was none) and the ones expected
 * for this procedure: `application/json` or `application/proto` for a Connect unary method,
 * `application/connect+json`/`+proto` for a streaming one, `application/grpc[+proto|+json]`,
 * `application/grpc-web[+proto|+json]`.
 */
export function checkContentType(
  handler: UniversalHandler,
  method: string | undefined,
  contentType: string | undefined,
): RejectedRequest | undefined {
  if (method !== "POST" || handler.supportedContentType(contentType ?? "")) return undefined;
  const unary = handler.method.methodKind === "unary";
  const connect = unary ? ACCEPTED.unary : ACCEPTED.streaming;
  const got = contentType ? `unsupported content-type ${JSON.stringify(contentType)}` : "missing content-type";
  const message =
    `${got}: ${handler.requestPath} expects ${connect.join(" or ")} (Connect${unary ? "" : " streaming"}), ` +
    `application/grpc[+proto|+json] (gRPC) or application/grpc-web[+proto|+json] (gRPC-Web)`;
  return {
    status: 415,
    headers: { "content-type": "application/json", "accept-post": [...connect, ...ACCEPTED.grpc].join(", ") },
    body: JSON.stringify({ code: "invalid_argument", message }),
  };
}

/**
 * Checks the HTTP method of a request to `handler`'s procedure: undefined for one it takes (POST,
 * and GET for a method that allows Connect GET requests), else HTTP 405 with an `allow` header
 * and a Connect error body (code `invalid_argument`, like the 415 above: connect-es answers a
 * bare 405, which the log and `/metrics` count as `unknown`) saying the procedure takes POST.
 *
 * @param handler - the procedure's handler (its `allowedMethods`, its `requestPath` for the message).
 * @param method - the request's HTTP method, e.g. `GET`.
 * @returns undefined when the method is taken, else the 405 answer (send it with `sendRejection`).
 */
export function checkMethod(handler: UniversalHandler, method: string | undefined): RejectedRequest | undefined {
  if (method === "POST" || (method !== undefined && handler.allowedMethods.includes(method))) return undefined;
  const allow = ["POST", ...handler.allowedMethods.filter((m) => m !== "POST")];
  const message = `HTTP method ${method ?? "(none)"} is not allowed: ${handler.requestPath} takes ${allow.join(" or ")} (Connect, gRPC and gRPC-Web)`;
  return {
    status: 405,
    headers: { "content-type": "application/json", allow: allow.join(", ") },
    body: JSON.stringify({ code: "invalid_argument", message }),
  };
}

/** Writes `answer` to `res`. */
export function sendRejection(res: http.ServerResponse | http2.Http2ServerResponse, answer: RejectedRequest): void {
  res.writeHead(answer.status, { ...answer.headers, "content-length": String(Buffer.byteLength(answer.body)) });
  res.end(answer.body);
}
