import {
  create,
  createRegistry,
  fromBinary,
  toBinary,
  type DescEnum,
  type DescFile,
  type DescMessage,
  type DescService,
  type Registry,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflection as ServerReflectionV1Alpha,
  ServerReflectionRequestSchema as ServerReflectionRequestSchemaV1Alpha,
  ServerReflectionResponseSchema as ServerReflectionResponseSchemaV1Alpha,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

export { ServerReflection, ServerReflectionV1Alpha };

/** The two reflection services, ready for `router.service`. */
export interface ReflectionHandlers {
  v1: ServiceImpl<typeof ServerReflection>;
  v1alpha: ServiceImpl<typeof ServerReflectionV1Alpha>;
}

/**
 * gRPC server reflection (`grpc.reflection.v1` and `grpc.reflection.v1alpha`, the same messages
 * on the wire; https://github.com/grpc/grpc/blob/master/doc/server-reflection.md), answering
 * from the descriptors compiled into `gen/` (and the well-known types and buf/validate they
 * import), so clients such as `buf curl` and grpcurl need no proto files.
 *
 * - `list_services`: the names of `services`.
 * - `file_by_filename`, `file_containing_symbol` (packages' services, methods, messages, fields,
 *   oneofs, enums, enum values, extensions, nested ones included; a leading dot is accepted),
 *   `file_containing_extension`: the serialized `FileDescriptorProto` of the file, then those of
 *   its transitive imports (each once).
 * - `all_extension_numbers_of_type`: the numbers of the known extensions of a message.
 * - Anything unknown: an `error_response` with `NOT_FOUND` (an empty request: `INVALID_ARGUMENT`);
 *   the stream stays open.
 *
 * `extraFiles` are served too without being listed as services (e.g. `google/rpc/*` to decode
 * error details). Bidi streaming: clients must speak HTTP/2 (h2c on our port).
 */
export function createReflectionHandlers(services: readonly DescService[], extraFiles: readonly DescFile[] = []): ReflectionHandlers {
  const index = buildIndex(services, extraFiles);
  return {
    v1: {
      async *serverReflectionInfo(requests, ctx) {
        for await (const req of untilGone(requests, ctx.signal)) yield answer(index, req);
      },
    },
    v1alpha: {
      async *serverReflectionInfo(requests, ctx) {
        // v1alpha has v1's messages field for field: translate through the wire format.
        for await (const req of untilGone(requests, ctx.signal)) {
          const res = answer(index, fromBinary(ServerReflectionRequestSchema, toBinary(ServerReflectionRequestSchemaV1Alpha, req)));
          yield fromBinary(ServerReflectionResponseSchemaV1Alpha, toBinary(ServerReflectionResponseSchema, res));
        }
      },
    },
  };
}

/**
 * The requests until the client half-closes, or until it goes away: clients such as `buf curl`
 * drop the connection without half-closing once they have their answer, which surfaces as a
 * "premature close" error of the request stream; that is a normal end here, not a failure.
 */
async function* untilGone<T>(requests: AsyncIterable<T>, signal: AbortSignal): AsyncIterable<T> {
  try {
    yield* requests;
  } catch (error) {
    if (signal.aborted || isPrematureClose(error)) return;
    throw error;
  }
}

function isPrematureClose(error: unknown): boolean {
  return error instanceof Error && "code" in error && error.code === "ERR_STREAM_PREMATURE_CLOSE";
}

interface Index {
  serviceNames: string[];
  /** Every served file by its proto name (`ledger/v1/service.proto`). */
  files: Map<string, DescFile>;
  /** Fully qualified name (no leading dot) → the file declaring it. */
  symbols: Map<string, DescFile>;
  registry: Registry;
}

function buildIndex(services: readonly DescService[], extraFiles: readonly DescFile[]): Index {
  const files = new Map<string, DescFile>();
  const visit = (file: DescFile): void => {
    if (files.has(file.proto.name)) return;
    files.set(file.proto.name, file);
    file.dependencies.forEach(visit);
  };
  services.forEach((service) => visit(service.file));
  extraFiles.forEach(visit);

  const symbols = new Map<string, DescFile>();
  const addEnum = (desc: DescEnum): void => {
    symbols.set(desc.typeName, desc.file);
    // Enum values are scoped like siblings of their enum (C++ scoping rules).
    const scope = desc.parent?.typeName ?? desc.file.proto.package;
    for (const value of desc.values) symbols.set(scope ? `${scope}.${value.name}` : value.name, desc.file);
  };
  const addMessage = (desc: DescMessage): void => {
    symbols.set(desc.typeName, desc.file);
    for (const member of desc.members) symbols.set(`${desc.typeName}.${member.name}`, desc.file);
    desc.nestedMessages.forEach(addMessage);
    desc.nestedEnums.forEach(addEnum);
    for (const ext of desc.nestedExtensions) symbols.set(ext.typeName, desc.file);
  };
  for (const file of files.values()) {
    file.messages.forEach(addMessage);
    file.enums.forEach(addEnum);
    for (const ext of file.extensions) symbols.set(ext.typeName, file);
    for (const service of file.services) {
      symbols.set(service.typeName, file);
      for (const method of service.methods) symbols.set(`${service.typeName}.${method.name}`, file);
    }
  }
  return {
    serviceNames: services.map((s) => s.typeName),
    files,
    symbols,
    registry: createRegistry(...files.values()),
  };
}

function answer(index: Index, req: ServerReflectionRequest): ServerReflectionResponse {
  const base = { validHost: req.host, originalRequest: req };
  const found = (file: DescFile | undefined, what: string) =>
    file
      ? create(ServerReflectionResponseSchema, {
          ...base,
          messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: withImports(file) } },
        })
      : failure(base, Code.NotFound, `${what} not found`);
  const request = req.messageRequest;
  switch (request.case) {
    case "listServices":
      return create(ServerReflectionResponseSchema, {
        ...base,
        messageResponse: { case: "listServicesResponse", value: { service: index.serviceNames.map((name) => ({ name })) } },
      });
    case "fileByFilename":
      return found(index.files.get(request.value), `file ${JSON.stringify(request.value)}`);
    case "fileContainingSymbol": {
      const symbol = request.value.replace(/^\./, "");
      return found(index.symbols.get(symbol), `symbol ${JSON.stringify(symbol)}`);
    }
    case "fileContainingExtension": {
      const { containingType, extensionNumber } = request.value;
      const extendee = index.registry.getMessage(containingType.replace(/^\./, ""));
      const extension = extendee ? index.registry.getExtensionFor(extendee, extensionNumber) : undefined;
      return found(extension?.file, `extension ${extensionNumber} of ${JSON.stringify(containingType)}`);
    }
    case "allExtensionNumbersOfType": {
      const typeName = request.value.replace(/^\./, "");
      if (!index.registry.getMessage(typeName)) return failure(base, Code.NotFound, `type ${JSON.stringify(typeName)} not found`);
      const numbers: number[] = [];
      for (const desc of index.registry) if (desc.kind === "extension" && desc.extendee.typeName === typeName) numbers.push(desc.number);
      return create(ServerReflectionResponseSchema, {
        ...base,
        messageResponse: {
          case: "allExtensionNumbersResponse",
          value: { baseTypeName: typeName, extensionNumber: numbers.sort((a, b) => a - b) },
        },
      });
    }
    default:
      return failure(base, Code.InvalidArgument, "message_request: one of the request kinds must be set");
  }
}

function failure(
  base: { validHost: string; originalRequest: ServerReflectionRequest },
  code: Code,
  message: string,
): ServerReflectionResponse {
  return create(ServerReflectionResponseSchema, {
    ...base,
    messageResponse: { case: "errorResponse", value: { errorCode: code, errorMessage: message } },
  });
}

/** `file` then its transitive imports, each once, as serialized `FileDescriptorProto`s. */
function withImports(file: DescFile): Uint8Array[] {
  const seen = new Set<string>();
  const out: Uint8Array[] = [];
  const queue = [file];
  for (let next = queue.shift(); next; next = queue.shift()) {
    if (seen.has(next.proto.name)) continue;
    seen.add(next.proto.name);
    out.push(toBinary(FileDescriptorProtoSchema, next.proto));
    queue.push(...next.dependencies);
  }
  return out;
}
