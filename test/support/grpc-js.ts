import path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const ROOT = path.resolve(import.meta.dirname, "../..");

/** A unary method of a grpc-js client: plain-object request, Node-style callback. */
export type GrpcUnaryMethod = (
  request: object,
  callback: (error: grpc.ServiceError | null, response: unknown) => void,
) => grpc.ClientUnaryCall;

/** A `@grpc/grpc-js` client of `ledger.v1.SessionService`, methods by lowerCamel name. */
export type GrpcLedger = grpc.Client & Record<string, GrpcUnaryMethod>;

/**
 * A `@grpc/grpc-js` client of the ledger at `url` (an `http://host:port` base URL), built at run
 * time from `proto/` with `@grpc/proto-loader` as a foreign runtime would (plain objects, enums
 * and 64-bit ints as strings, oneofs named). Plaintext HTTP/2. Close it with `client.close()`.
 */
export function grpcLedgerClient(url: string): GrpcLedger {
  const definition = protoLoader.loadSync(path.join(ROOT, "proto/ledger/v1/service.proto"), {
    includeDirs: [path.join(ROOT, "proto"), path.join(ROOT, "proto-vendor")],
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as { ledger: { v1: { SessionService: grpc.ServiceClientConstructor } } };
  return new loaded.ledger.v1.SessionService(new URL(url).host, grpc.credentials.createInsecure()) as unknown as GrpcLedger;
}
