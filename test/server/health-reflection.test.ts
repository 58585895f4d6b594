import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { create, createFileRegistry, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, FileDescriptorSetSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import {
  ServerReflection,
  type ServerReflectionRequestSchema,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ServerReflectionV1Alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const BUF = path.join(ROOT, "node_modules/.bin/buf");
const TOKEN = "health-reflection-token-0123456789";
const run = promisify(execFile);

let t: TestLedger;
let sessionManager: Http2SessionManager;

beforeAll(async () => {
  t = await startTestLedger({}, { transport: "http" });
  sessionManager = new Http2SessionManager(t.ledger.url);
});

afterAll(async () => {
  sessionManager?.abort();
  await t?.close();
});

// ---- grpc-js with proto-loader, from the vendored health.proto ----

interface HealthReply {
  status: string;
}
type HealthCallback = (error: grpc.ServiceError | null, response?: HealthReply) => void;
interface GrpcHealth extends grpc.Client {
  check(request: { service: string }, options: grpc.CallOptions, callback: HealthCallback): grpc.ClientUnaryCall;
  watch(request: { service: string }): grpc.ClientReadableStream<HealthReply>;
}

function grpcHealth(url: string): GrpcHealth {
  const definition = protoLoader.loadSync(path.join(ROOT, "proto-vendor/grpc/health/v1/health.proto"), {
    includeDirs: [path.join(ROOT, "proto-vendor")],
    enums: String,
    defaults: true,
  });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  return new loaded.grpc.health.v1.Health(new URL(url).host, grpc.credentials.createInsecure()) as unknown as GrpcHealth;
}

function check(client: GrpcHealth, service: string): Promise<HealthReply> {
  return new Promise((resolve, reject) => {
    client.check({ service }, { deadline: Date.now() + 5000 }, (error, response) => (error ? reject(error) : resolve(response!)));
  });
}

function checkError(client: GrpcHealth, service: string): Promise<grpc.ServiceError> {
  return check(client, service).then(
    (reply) => {
      throw new Error(`expected an error, got ${JSON.stringify(reply)}`);
    },
    (error: unknown) => error as grpc.ServiceError,
  );
}

describe("grpc.health.v1.Health (grpc-js over h2c)", () => {
  it("Check is SERVING for the server and for ledger.v1.SessionService", async () => {
    const client = grpcHealth(t.ledger.url);
    try {
      expect(await check(client, "")).toEqual({ status: "SERVING" });
      expect(await check(client, "ledger.v1.SessionService")).toEqual({ status: "SERVING" });
    } finally {
      client.close();
    }
  });

  it("Check of an unknown service is NOT_FOUND", async () => {
    const client = grpcHealth(t.ledger.url);
    try {
      const error = await checkError(client, "no.such.Service");
      expect(error.code).toBe(grpc.status.NOT_FOUND);
    } finally {
      client.close();
    }
  });

  it("Watch sends SERVING first and ends when the client cancels", async () => {
    const client = grpcHealth(t.ledger.url);
    try {
      const call = client.watch({ service: "" });
      const first = await new Promise<HealthReply>((resolve, reject) => {
        call.once("data", resolve);
        call.once("error", reject);
      });
      expect(first).toEqual({ status: "SERVING" });
      const ended = new Promise<grpc.ServiceError | undefined>((resolve) => {
        call.on("error", (error: grpc.ServiceError) => resolve(error));
        call.on("end", () => resolve(undefined));
      });
      call.cancel();
      expect((await ended)?.code).toBe(grpc.status.CANCELLED);
      // The connection still serves: a cancelled Watch leaves nothing stuck.
      expect(await check(client, "")).toEqual({ status: "SERVING" });
    } finally {
      client.close();
    }
  });

  it("Watch of an unknown service sends SERVICE_UNKNOWN and stays open", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.ledger.url, sessionManager }));
    const abort = new AbortController();
    const stream = health.watch({ service: "no.such.Service" }, { signal: abort.signal })[Symbol.asyncIterator]();
    expect((await stream.next()).value?.status).toBe(ServingStatus.SERVICE_UNKNOWN);
    const next = stream.next().then(
      () => "message or end",
      (error: unknown) => ConnectError.from(error).code,
    );
    const early = await Promise.race([next, new Promise((resolve) => setTimeout(() => resolve("still open"), 300))]);
    expect(early).toBe("still open");
    abort.abort();
    expect(await next).toBe(Code.Canceled);
  });

  it("List reports both services", async () => {
    const health = createClient(Health, createGrpcTransport({ baseUrl: t.ledger.url, sessionManager }));
    const { statuses } = await health.list({});
    expect(Object.keys(statuses).sort()).toEqual(["", "ledger.v1.SessionService"]);
    expect(Object.values(statuses).map((s) => s.status)).toEqual([ServingStatus.SERVING, ServingStatus.SERVING]);
  });
});

describe("health with a token configured and a database that goes away", () => {
  let d: TestLedger;
  beforeAll(async () => {
    d = await startTestLedger({ auth: { token: TOKEN } }, { transport: "http" });
  });
  afterAll(async () => {
    await d?.close();
  });

  it("needs no token, while reflection does", async () => {
    const client = grpcHealth(d.ledger.url);
    try {
      expect(await check(client, "")).toEqual({ status: "SERVING" });
    } finally {
      client.close();
    }
    const manager = new Http2SessionManager(d.ledger.url);
    try {
      const reflection = createClient(ServerReflection, createGrpcTransport({ baseUrl: d.ledger.url, sessionManager: manager }));
      const error = await reflect(reflection, [{ messageRequest: { case: "listServices", value: "" } }]).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(error?.code).toBe(Code.Unauthenticated);
    } finally {
      manager.abort();
    }
  });

  it("Watch turns NOT_SERVING and Check says NOT_SERVING once the database is closed", async () => {
    const manager = new Http2SessionManager(d.ledger.url);
    const abort = new AbortController();
    try {
      const health = createClient(Health, createGrpcTransport({ baseUrl: d.ledger.url, sessionManager: manager }));
      const stream = health.watch({ service: "ledger.v1.SessionService" }, { signal: abort.signal })[Symbol.asyncIterator]();
      expect((await stream.next()).value?.status).toBe(ServingStatus.SERVING);

      await d.ledger.database.close();

      const started = Date.now();
      expect((await stream.next()).value?.status).toBe(ServingStatus.NOT_SERVING);
      expect(Date.now() - started).toBeLessThan(8000);
      expect((await health.check({ service: "" })).status).toBe(ServingStatus.NOT_SERVING);
      const client = grpcHealth(d.ledger.url);
      try {
        expect(await check(client, "ledger.v1.SessionService")).toEqual({ status: "NOT_SERVING" });
      } finally {
        client.close();
      }
    } finally {
      abort.abort();
      manager.abort();
    }
  });
});

// ---- grpc.reflection.v1 / v1alpha with a Connect gRPC client (bidi over h2c) ----

type ReflectionInit = MessageInitShape<typeof ServerReflectionRequestSchema>;
type ReflectionClient = Client<typeof ServerReflection>;

/** Sends `requests` on one ServerReflectionInfo stream and collects one response per request. */
async function reflect(client: ReflectionClient, requests: ReflectionInit[]): Promise<ServerReflectionResponse[]> {
  async function* input(): AsyncIterable<ReflectionInit> {
    yield* requests;
  }
  const out: ServerReflectionResponse[] = [];
  for await (const res of client.serverReflectionInfo(input())) out.push(res);
  return out;
}

function descriptors(res: ServerReflectionResponse): FileDescriptorProto[] {
  if (res.messageResponse.case !== "fileDescriptorResponse")
    throw new Error(`expected file descriptors, got ${res.messageResponse.case}: ${JSON.stringify(res.messageResponse.value)}`);
  return res.messageResponse.value.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
}

/**
 * `files` ordered so that each comes after its imports, as a `FileDescriptorSet` must be (the
 * server sends the requested file first, then its imports, as gRPC servers do).
 */
function importsFirst(files: FileDescriptorProto[]): FileDescriptorProto[] {
  const byName = new Map(files.map((f) => [f.name, f]));
  const out: FileDescriptorProto[] = [];
  const done = new Set<string>();
  const visit = (file: FileDescriptorProto): void => {
    if (done.has(file.name)) return;
    done.add(file.name);
    for (const dep of file.dependency) visit(byName.get(dep) ?? expect.unreachable(`${file.name} imports ${dep}, which was not sent`));
    out.push(file);
  };
  files.forEach(visit);
  return out;
}

function errorOf(res: ServerReflectionResponse): { errorCode: number; errorMessage: string } {
  if (res.messageResponse.case !== "errorResponse") throw new Error(`expected an error response, got ${res.messageResponse.case}`);
  return res.messageResponse.value;
}

const symbol = (name: string): ReflectionInit => ({ messageRequest: { case: "fileContainingSymbol", value: name } });

describe("grpc.reflection (Connect gRPC client, bidi over h2c)", () => {
  let reflection: ReflectionClient;
  beforeAll(() => {
    reflection = createClient(ServerReflection, createGrpcTransport({ baseUrl: t.ledger.url, sessionManager }));
  });

  it("list_services names the ledger, health and both reflection services", async () => {
    const [res] = await reflect(reflection, [{ host: "example", messageRequest: { case: "listServices", value: "*" } }]);
    expect(res!.validHost).toBe("example");
    expect(res!.originalRequest?.messageRequest).toEqual({ case: "listServices", value: "*" });
    if (res!.messageResponse.case !== "listServicesResponse") throw new Error(res!.messageResponse.case);
    expect(res!.messageResponse.value.service.map((s) => s.name).sort()).toEqual([
      "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection",
      "ledger.v1.SessionService",
    ]);
  });

  it("file_containing_symbol ledger.v1.SessionService: a FileRegistry rebuilt from the answer has Prompt", async () => {
    const [res] = await reflect(reflection, [symbol("ledger.v1.SessionService")]);
    const files = descriptors(res!);
    expect(files[0]!.name).toBe("ledger/v1/service.proto");
    const names = files.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(
      expect.arrayContaining(["buf/validate/validate.proto", "google/protobuf/descriptor.proto", "google/protobuf/timestamp.proto"]),
    );
    const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: importsFirst(files) }));
    const service = registry.getService("ledger.v1.SessionService");
    const prompt = service?.methods.find((m) => m.name === "Prompt");
    expect(prompt?.input.typeName).toBe("ledger.v1.PromptRequest");
    expect(prompt?.methodKind).toBe("unary");
    expect(service?.methods.find((m) => m.name === "PromptStream")?.methodKind).toBe("server_streaming");
    // The validation rules travel with the descriptors (an extension on the field options).
    expect(registry.getMessage("ledger.v1.PromptRequest")?.fields.length).toBeGreaterThan(0);
  });

  it("resolves nested symbols, file names and extensions, with NOT_FOUND error responses for unknown ones", async () => {
    const responses = await reflect(reflection, [
      symbol("ledger.v1.SessionService.Prompt"),
      symbol(".ledger.v1.PromptRequest"),
      symbol("grpc.health.v1.HealthCheckResponse.ServingStatus"),
      symbol("grpc.health.v1.HealthCheckResponse.SERVING"),
      symbol("grpc.health.v1.HealthCheckRequest.service"),
      symbol("grpc.reflection.v1.ServerReflectionRequest.message_request"),
      symbol("buf.validate.field"),
      symbol("google.rpc.ErrorInfo"),
      { messageRequest: { case: "fileByFilename", value: "grpc/health/v1/health.proto" } },
      {
        messageRequest: {
          case: "fileContainingExtension",
          value: { containingType: "google.protobuf.FieldOptions", extensionNumber: 1159 },
        },
      },
      { messageRequest: { case: "allExtensionNumbersOfType", value: "google.protobuf.FieldOptions" } },
      symbol("ledger.v1.NoSuchThing"),
      { messageRequest: { case: "fileByFilename", value: "nope.proto" } },
      {
        messageRequest: {
          case: "fileContainingExtension",
          value: { containingType: "google.protobuf.FieldOptions", extensionNumber: 99999 },
        },
      },
      { messageRequest: { case: "allExtensionNumbersOfType", value: "no.such.Type" } },
      {},
    ]);
    const firstFile = (i: number) => descriptors(responses[i]!)[0]!.name;
    expect(firstFile(0)).toBe("ledger/v1/service.proto");
    expect(firstFile(1)).toBe("ledger/v1/service.proto");
    expect(firstFile(2)).toBe("grpc/health/v1/health.proto");
    expect(firstFile(3)).toBe("grpc/health/v1/health.proto");
    expect(firstFile(4)).toBe("grpc/health/v1/health.proto");
    expect(firstFile(5)).toBe("grpc/reflection/v1/reflection.proto");
    expect(firstFile(6)).toBe("buf/validate/validate.proto");
    expect(firstFile(7)).toBe("google/rpc/error_details.proto");
    expect(descriptors(responses[8]!).map((f) => f.name)).toEqual(["grpc/health/v1/health.proto"]);
    expect(firstFile(9)).toBe("buf/validate/validate.proto");
    const numbers = responses[10]!.messageResponse;
    if (numbers.case !== "allExtensionNumbersResponse") throw new Error(numbers.case);
    expect(numbers.value.baseTypeName).toBe("google.protobuf.FieldOptions");
    expect(numbers.value.extensionNumber).toContain(1159);
    for (const i of [11, 12, 13, 14]) expect(errorOf(responses[i]!).errorCode).toBe(Code.NotFound);
    expect(errorOf(responses[11]!).errorMessage).toContain("ledger.v1.NoSuchThing");
    expect(errorOf(responses[15]!).errorCode).toBe(Code.InvalidArgument);
  });

  it("v1alpha answers the same", async () => {
    const alpha = createClient(ServerReflectionV1Alpha, createGrpcTransport({ baseUrl: t.ledger.url, sessionManager }));
    async function* input() {
      yield { messageRequest: { case: "listServices" as const, value: "" } };
      yield { messageRequest: { case: "fileContainingSymbol" as const, value: "ledger.v1.SessionService" } };
    }
    const out = [];
    for await (const res of alpha.serverReflectionInfo(input())) out.push(res);
    expect(out).toHaveLength(2);
    if (out[0]!.messageResponse.case !== "listServicesResponse") throw new Error(out[0]!.messageResponse.case);
    expect(out[0]!.messageResponse.value.service.map((s) => s.name)).toContain("ledger.v1.SessionService");
    if (out[1]!.messageResponse.case !== "fileDescriptorResponse") throw new Error(out[1]!.messageResponse.case);
    expect(fromBinary(FileDescriptorProtoSchema, out[1]!.messageResponse.value.fileDescriptorProto[0]!).name).toBe(
      "ledger/v1/service.proto",
    );
  });
});

// ---- buf curl (the real binary), schema from reflection only ----

describe("buf curl with no proto files", () => {
  const curl = (args: string[]) =>
    // Run in the test's temp dir: no buf.yaml or protos around, so only reflection can help.
    run(BUF, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args], { cwd: t.dir, timeout: 20_000 });

  it("--list-methods lists the ledger's methods", async () => {
    const { stdout } = await curl(["--list-methods", t.ledger.url]);
    const methods = stdout.trim().split("\n");
    expect(methods).toContain("ledger.v1.SessionService/Prompt");
    expect(methods).toContain("ledger.v1.SessionService/WatchSession");
    expect(methods).toContain("grpc.health.v1.Health/Check");
  });

  it("calls ListAgents with a JSON body", async () => {
    const { stdout } = await curl(["-d", "{}", `${t.ledger.url}/ledger.v1.SessionService/ListAgents`]);
    const body = JSON.parse(stdout) as { agents: { name: string }[]; defaultAgent: string };
    expect(body.defaultAgent).toBe("build");
    expect(body.agents.map((a) => a.name)).toContain("plan");
  });

  it("uses v1alpha when asked", async () => {
    const { stdout } = await curl(["--reflect-protocol", "grpc-v1alpha", "--list-methods", t.ledger.url]);
    expect(stdout).toContain("ledger.v1.SessionService/Prompt");
  });
});
