import type { DescMessage } from "@bufbuild/protobuf";

/**
 * The proto field name (snake_case, e.g. `part_updated`, `step_start`) of a oneof case given by
 * its generated local name (`partUpdated`, `stepStart`). Stored `kind` columns use the proto
 * names so SQL reads the same as the .proto files. Throws on a case the schema does not have.
 */
export function protoCaseName(schema: DescMessage, localName: string): string {
  const field = schema.fields.find((f) => f.localName === localName);
  if (!field) throw new Error(`${schema.typeName} has no field ${localName}`);
  return field.name;
}
