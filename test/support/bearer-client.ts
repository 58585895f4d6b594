import { create, type DescMethod } from "@bufbuild/protobuf";
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";

/** The three protocols a ledger speaks on one port. */
export type Protocol = "connect" | "grpc" | "grpc-web";

/**
 * A SessionService client of the server at `url` over `protocol` (Connect and gRPC-Web over
 * HTTP/1.1, gRPC over h2c) that sends `authorization: Bearer <bearer>` on every call (nothing
 * when `bearer` is undefined).
 */
export function bearerClient(url: string, bearer: string | undefined, protocol: Protocol = "connect"): Client<typeof SessionService> {
  const interceptors: Interceptor[] = [
    (next) => (req) => {
      if (bearer !== undefined) req.header.set("authorization", `Bearer ${bearer}`);
      return next(req);
    },
  ];
  const transport =
    protocol === "grpc"
      ? createGrpcTransport({ baseUrl: url, interceptors })
      : protocol === "grpc-web"
        ? createGrpcWebTransport({ baseUrl: url, httpVersion: "1.1", interceptors })
        : createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors });
  return createClient(SessionService, transport);
}

type AnyClient = Record<string, (input: object, options?: object) => Promise<unknown> | AsyncIterable<unknown>>;

/**
 * Calls any method of the service (from its descriptor) with a request made of `fields`, taking
 * the first message of a server stream; resolves with the `ConnectError`, or undefined when the
 * call succeeded. Times out after 5 s.
 */
export async function callMethod(
  client: Client<typeof SessionService>,
  method: DescMethod,
  fields: object = {},
): Promise<ConnectError | undefined> {
  const fn = (client as unknown as AnyClient)[method.localName]!;
  try {
    const result = fn(create(method.input, fields as never), { timeoutMs: 5000 });
    if (method.methodKind === "server_streaming") {
      for await (const _ of result as AsyncIterable<unknown>) break;
    } else {
      await result;
    }
    return undefined;
  } catch (error) {
    return ConnectError.from(error);
  }
}
