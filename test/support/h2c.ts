import http2 from "node:http2";

/**
 * Posts `body` (already gRPC-framed) to `procedure` of the ledger at `url` over plaintext HTTP/2
 * (h2c) with `content-type: application/grpc`, reads the whole response, and returns its
 * `grpc-status` (from the trailers, or from the headers of a trailers-only response).
 */
export async function grpcStatusOverH2c(url: string, procedure: string, body: Buffer): Promise<string | undefined> {
  const session = http2.connect(url);
  try {
    return await new Promise<string | undefined>((resolve, reject) => {
      const req = session.request({ ":method": "POST", ":path": `/ledger.v1.SessionService/${procedure}`, "content-type": "application/grpc", te: "trailers" });
      let grpcStatus: string | undefined;
      req.on("response", (headers) => (grpcStatus ??= headers["grpc-status"] as string | undefined));
      req.on("trailers", (trailers) => (grpcStatus = trailers["grpc-status"] as string | undefined));
      req.on("end", () => resolve(grpcStatus));
      req.on("error", reject);
      req.resume();
      req.end(body);
    });
  } finally {
    session.close();
  }
}
