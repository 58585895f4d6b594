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

/**
 * The JSON name (lowerCamelCase, e.g. `noReply`) of a field of `schema`, given by its generated
 * local name: the key under which the stored proto JSON (`data` columns) holds it. SQL that
 * looks into `data` takes its keys from here, so a renamed proto field fails loudly at load
 * instead of matching nothing. Throws on a field the schema does not have.
 */
export function protoJsonName(schema: DescMessage, localName: string): string {
  const field = schema.fields.find((f) => f.localName === localName);
  if (!field) throw new Error(`${schema.typeName} has no field ${localName}`);
  return field.jsonName;
}
