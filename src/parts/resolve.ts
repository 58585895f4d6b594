import path from "node:path";
import pLimit, { type LimitFunction } from "p-limit";
import { agentRules, evaluate } from "../tools/permission.js";
import { create, type JsonObject } from "@bufbuild/protobuf";
import {
  type AgentPartInput,
  type FilePartInput,
  PartSchema,
  type Part,
  type PartInput,
  type TextPartInput,
} from "../../gen/ledger/v1/part_pb.js";
import { requireSubagent, type AgentInfo } from "../config/agents.js";
import { modelRefProblem } from "../config/config.js";
import type { Limits } from "../config/limits.js";
import { newId } from "../ids.js";
import { InvalidArgumentError, LimitExceededError } from "../errors.js";
import { notConfigured, type McpReader } from "../mcp/reader.js";
import { confinePath } from "../files/confine.js";
import { ReadFailure, readPath, type ReadResult } from "../files/read-file.js";
import { dataUrlText, isTextMime, parseDataUrl, toDataUrl } from "./data-url.js";
import { isHttpUrlWithHost } from "./http-url.js";
import { parseFileUrl } from "./file-url.js";
import { McpBudget, type McpTurn } from "./mcp-budget.js";
import { findSymbolAt } from "./symbols/index.js";
import { referenceNote } from "./reference.js";
import { isImageMime, normalizeImage, sniffImage } from "../files/image.js";

/** Everything draft resolution needs to know about the prompt. */
export interface ResolveContext {
  sessionId: string;
  messageId: string;
  /** The session's resolved directory: `file:` reads must stay inside it or `roots`. */
  directory: string;
  /** Extra allowed directories (absolute), the references among them. */
  roots: string[];
  /** Configured references (alias → absolute directory): a `file:` draft inside one gets a leading note. */
  references?: Record<string, string>;
  limits: Limits;
  /** The prompt's agent (its permissions shape the agent-mention hint). */
  agent: AgentInfo;
  /** Every configured agent: agent mentions and subtasks must name a subagent among them. */
  agents: ReadonlyMap<string, AgentInfo>;
  /** Reads MCP resources (`source.resource` file drafts); without it every such read fails as not configured. */
  mcp?: McpReader;
  /** Set when the session may not use MCP servers (a tenant without `tenants.<name>.mcp`): every resource read fails with it. */
  mcpRefused?: string;
}

/** Most `file:` reads one prompt runs at once (each may hold up to `attachment_bytes`). */
const READS_AT_ONCE = 4;

/**
 * What the drafts of one prompt share while they resolve: the read problems met, and the reads
 * of their `file:` URLs, each (path, offset, limit) read once whatever the drafts that name it
 * (`@dir/`, `@dir//` and a `file:` URL of the same directory are one listing), at most
 * {@link READS_AT_ONCE} at a time. A probe sent 256 drafts of one 100,000-entry directory: 54 s
 * and 2.3 GB, each listing read, sorted and held at once.
 */
interface DraftRun {
  problems: ReadProblem[];
  reads: Map<string, Promise<ReadResult>>;
  readSlots: LimitFunction;
}

/**
 * `readPath(filePath, options)` through `run`: the first draft of a (path, offset, limit) reads
 * it, the others share its result, a `ReadFailure` (the failure text names the path, not a
 * field) included. Another error names the first draft's field: a later draft reads again.
 */
function readOnce(run: DraftRun, filePath: string, options: NonNullable<Parameters<typeof readPath>[1]>): Promise<ReadResult> {
  const key = JSON.stringify([filePath, options.offset, options.limit]);
  const known = run.reads.get(key);
  if (known)
    return known.catch((error: unknown) => (error instanceof ReadFailure ? Promise.reject(error) : readOnce(run, filePath, options)));
  const reading = run.readSlots(() => readPath(filePath, options));
  run.reads.set(key, reading);
  reading.catch((error: unknown) => {
    if (!(error instanceof ReadFailure) && run.reads.get(key) === reading) run.reads.delete(key);
  });
  return reading;
}

/** A `file:` draft that could not be read; it becomes a failure text and a `session_error` event. */
export interface ReadProblem {
  path: string;
  message: string;
}

/** The parts of one prompt, in input order, and the read problems met on the way. */
export interface ResolvedDrafts {
  /** Parts in stored order. Ids: the draft's own id for the part it names, else fresh ascending ids. */
  parts: Part[];
  /** Ids of the parts the server made (synthetic text). */
  syntheticIds: string[];
  problems: ReadProblem[];
}

type Piece = { part: Part; synthetic: boolean };

/**
 * Resolves every draft concurrently, keeping input order (docs/design.md §4; OpenCode
 * `SessionPrompt.createUserMessage`/`resolvePart`). Empty and whitespace-only text drafts are
 * dropped when other drafts exist; a prompt with nothing else is refused. Per draft
 * (docs/design.md §4; OpenCode
 * `SessionPrompt.createUserMessage`/`resolvePart`):
 * - text → as given; file `data:` text (`text/*`, JSON, XML, YAML and the other types of
 *   `isTextMime`, by the draft's declared mime) → S read call, S decoded body, the file part;
 * - file `data:` image (declared `image/*` as the draft's mime or the URL's, or sniffed image
 *   content, whatever the declared mime) → the file part with the image normalized by
 *   `normalizeImage` (docs/design.md §3 step 6) as a base64 `data:` URL with the image's real mime;
 * - file `data:` other → the file part; `http(s):` → the file part as given;
 * - file `file:` inside a configured reference → first S `Referenced configured reference
 *   @<alias>/<target>.` with `metadata.reference` (see `referenceNote`), then as below;
 * - file `file:` → S read call, then the read output (text, with `?start=&end=` ranges, or a
 *   directory listing) and the file part, or the file as a `data:` URL (images/PDF, sniffed;
 *   images normalized as above, PDFs as read); a one-line range `?start=N&end=N` on a
 *   TypeScript/JavaScript, Python, Go or Rust file is widened to the symbol starting on line N
 *   (`findSymbolAt`; the first `symbol_lookups` such drafts of the prompt, in draft order), and
 *   the read call's `metadata.symbol` gives `{name, kind, start, end}`;
 *   binary, missing or unreadable → S failure text and a `ReadProblem`;
 * - MCP resource source → S `Reading MCP resource: <filename> (<uri>)` (`<uri>` alone without a
 *   filename; a full path's last segment, as stored), S per non-empty text item,
 *   S `[Binary content: <mime>]` per binary item (never inlined), then the file part as given; any
 *   read failure (server not configured, could not start, timeout, server error) → the reading
 *   text and S `Failed to read MCP resource <filename>: <message>` (no file part, no `ReadProblem`);
 * - every file part's `filename` sent as a full path is stored as its last segment (`fileName`);
 * - agent → the agent part and S task hint; subtask → as given (a malformed `model` is refused);
 *   both must name a configured subagent (`requireSubagent`).
 *
 * Throws `AgentNotFoundError` (NOT_FOUND: an agent mention or subtask naming no agent),
 * `InvalidArgumentError` (one naming a primary-only agent, bad URL or range, a URL without a `data:`/`file:`/`http(s):`
 * scheme such as raw base64, an empty, truncated or undecodable image), `PathNotAllowedError`
 * (outside the session directory and roots) and `LimitExceededError` (text, data: URL,
 * attachment or image pixels over its limit), each naming the field as `partField(i)...`
 * (`parts[i]...` by default); then nothing is stored.
 */
export async function resolveDrafts(
  ctx: ResolveContext,
  drafts: PartInput[],
  partField: PartField = requestPartField,
): Promise<ResolvedDrafts> {
  const run: DraftRun = { problems: [], reads: new Map(), readSlots: pLimit(READS_AT_ONCE) };
  const blank = (d: PartInput) => d.kind.case === "text" && d.kind.value.text.trim() === "";
  if (drafts.every(blank)) throw new InvalidArgumentError("parts", "has no content: every draft is an empty or whitespace-only text");
  const symbols = symbolDrafts(drafts, ctx.limits.symbol_lookups);
  // Turns taken here, in draft order, before any read starts.
  const budget = new McpBudget(ctx.limits.mcp_prompt_bytes);
  const turns = new Map(drafts.flatMap((d, i) => (isResourceDraft(d) && !blank(d) ? [[i, budget.turn()] as const] : [])));
  const resolved = await Promise.all(
    drafts.map((draft, i) => (blank(draft) ? [] : resolveDraft(ctx, draft, partField(i), run, symbols.has(i), turns.get(i)))),
  );
  const parts: Part[] = [];
  const syntheticIds: string[] = [];
  for (const { part, synthetic } of resolved.flat()) {
    part.id ||= newId("prt");
    part.sessionId = ctx.sessionId;
    part.messageId = ctx.messageId;
    parts.push(part);
    if (synthetic) syntheticIds.push(part.id);
  }
  return { parts, syntheticIds, problems: run.problems };
}

/**
 * Indexes of the drafts allowed a symbol lookup: the first `max` `file:` drafts (in draft order)
 * whose URL is a one-line range. A URL that does not parse is skipped here; resolving it fails.
 */
function isResourceDraft(draft: PartInput): boolean {
  return draft.kind.case === "file" && draft.kind.value.source?.kind.case === "resource";
}

function symbolDrafts(drafts: PartInput[], max: number): Set<number> {
  const allowed = new Set<number>();
  drafts.forEach((draft, i) => {
    if (allowed.size >= max || draft.kind.case !== "file" || !/^file:/i.test(draft.kind.value.url)) return;
    try {
      if (parseFileUrl("url", draft.kind.value.url).symbolLine !== undefined) allowed.add(i);
    } catch {
      // reported when the draft itself is resolved
    }
  });
  return allowed;
}

async function resolveDraft(
  ctx: ResolveContext,
  draft: PartInput,
  field: string,
  run: DraftRun,
  symbol: boolean,
  turn: McpTurn | undefined,
): Promise<Piece[]> {
  switch (draft.kind.case) {
    case "text":
      return [textDraft(ctx, draft.kind.value, `${field}.text.text`)];
    case "file":
      if (draft.kind.value.source?.kind.case === "resource")
        return resourceDraft(ctx, draft.kind.value, draft.kind.value.source.kind.value, turn!);
      return fileDraft(ctx, draft.kind.value, `${field}.file`, run, symbol);
    case "agent":
      requireSubagent(ctx.agents, draft.kind.value.name, `${field}.agent.name`);
      return agentDraft(ctx, draft.kind.value);
    case "subtask": {
      requireSubagent(ctx.agents, draft.kind.value.agent, `${field}.subtask.agent`);
      for (const name of ["prompt", "description", "command"] as const)
        limitText(ctx.limits, draft.kind.value[name], `${field}.subtask.${name}`);
      const problem = draft.kind.value.model ? modelRefProblem(draft.kind.value.model) : undefined;
      if (problem) throw new InvalidArgumentError(`${field}.subtask.model.${problem.part}`, problem.description);
      const { id, $typeName: _, ...subtask } = draft.kind.value;
      return [{ part: create(PartSchema, { id, kind: { case: "subtask", value: subtask } }), synthetic: false }];
    }
    default:
      return [];
  }
}

function textDraft(ctx: ResolveContext, draft: TextPartInput, field: string): Piece {
  limitText(ctx.limits, draft.text, field);
  const { id, $typeName: _, ...text } = draft;
  return { part: create(PartSchema, { id, kind: { case: "text", value: text } }), synthetic: false };
}

/**
 * Refuses a text of more than `limits.text_part_bytes` bytes of UTF-8: a prompt's text draft or
 * subtask texts, and the same texts of a part sent to UpdatePart.
 *
 * @throws LimitExceededError (RESOURCE_EXHAUSTED, limit `text_part_bytes`) on `field`.
 */
export function limitText(limits: Pick<Limits, "text_part_bytes">, text: string, field: string): void {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > limits.text_part_bytes) throw new LimitExceededError(field, "text_part_bytes", limits.text_part_bytes, bytes, "bytes");
}

function agentDraft(ctx: ResolveContext, draft: AgentPartInput): Piece[] {
  // As OpenCode's resolvePart: weighed on the subagent's name, so a `task` map can deny some.
  const denied = evaluate(agentRules(ctx.agent), "task", draft.name) === "deny";
  const hint = denied ? " . Invoked by user; guaranteed to exist." : "";
  return [
    {
      part: create(PartSchema, { id: draft.id, kind: { case: "agent", value: { name: draft.name, source: draft.source } } }),
      synthetic: false,
    },
    synthetic(` Use the above message and context to generate a prompt and call the task tool with subagent: ${draft.name}${hint}`),
  ];
}

async function fileDraft(ctx: ResolveContext, draft: FilePartInput, field: string, run: DraftRun, symbol: boolean): Promise<Piece[]> {
  const scheme = checkFileUrl(`${field}.url`, draft.url);
  if (scheme === "data") return dataDraft(ctx, draft, field);
  if (scheme === "file") return fileUrlDraft(ctx, draft, field, run, symbol);
  return [filePart(draft, {})];
}

/**
 * OpenCode `createUserMessage`, MCP resource branch, bounded: a text item over
 * `limits.mcp_item_bytes`, or text that would bring the prompt's MCP resources over
 * `limits.mcp_prompt_bytes` (counted in draft order through `turn`), fails the draft naming the limit.
 */
async function resourceDraft(
  ctx: ResolveContext,
  draft: FilePartInput,
  source: { clientName: string; uri: string },
  turn: McpTurn,
): Promise<Piece[]> {
  // Named as the file part will be (a full path's last segment); a draft without a name by its URI.
  const name = fileName(draft.filename);
  const pieces = [synthetic(`Reading MCP resource: ${name ? `${name} (${source.uri})` : source.uri}`)];
  const failed = (message: string) => [...pieces, synthetic(`Failed to read MCP resource ${name || source.uri}: ${message}`)];
  try {
    let contents;
    try {
      if (ctx.mcpRefused) throw new Error(ctx.mcpRefused);
      if (!ctx.mcp) throw notConfigured(source.clientName, []);
      const mcp = ctx.mcp;
      const read = await turn.read(() => mcp.read(source.clientName, source.uri));
      if (read.full)
        return failed(`not read: the prompt's MCP resources already fill limits.mcp_prompt_bytes (${ctx.limits.mcp_prompt_bytes} bytes)`);
      contents = read.value;
    } catch (error) {
      return failed(error instanceof Error ? error.message : String(error));
    }
    const { mcp_item_bytes: itemMax, mcp_prompt_bytes: promptMax } = ctx.limits;
    const sizes = contents.map((item) => ("text" in item ? Buffer.byteLength(item.text, "utf8") : 0));
    const over = sizes.findIndex((bytes) => bytes > itemMax);
    if (over >= 0)
      return failed(`item ${over + 1} of ${source.uri} is ${sizes[over]} bytes of text, over limits.mcp_item_bytes (${itemMax} bytes)`);
    const total = sizes.reduce((a, b) => a + b, 0);
    const room = await turn.take(total);
    if (!room.ok)
      return failed(
        `its ${total} bytes of text would bring the prompt's MCP resources to ${room.used + total} bytes, over limits.mcp_prompt_bytes (${promptMax} bytes)`,
      );
    const items = contents.flatMap((item) =>
      "text" in item ? (item.text ? [synthetic(item.text)] : []) : [synthetic(`[Binary content: ${item.mime || draft.mime}]`)],
    );
    return [...pieces, ...items, filePart(draft, {})];
  } finally {
    turn.done();
  }
}

const SCHEMES = new Set(["data", "file", "http", "https"]);

/**
 * Checks the URL of a file part that has no MCP resource source (a draft's, or an edited part's in
 * `UpdatePart`) and returns its scheme, lower-cased: `data`, `file`, `http` or `https`.
 *
 * @param field - the request field named in errors, e.g. `parts[1].file.url`.
 * @throws InvalidArgumentError naming `field` for another scheme or none (raw base64 gets the hint
 *   "send it as data:<mime>;base64,…"), and for an `http(s):` URL that does not parse or names no
 *   host (`https://`, `http://exa mple.com/x.pdf`): it would reach the provider as such.
 */
export function checkFileUrl(field: string, url: string): string {
  const scheme = /^\s*([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if ((scheme === "http" || scheme === "https") && !isHttpUrlWithHost(url))
    throw new InvalidArgumentError(field, `is not a valid ${scheme}: URL (expected ${scheme}://host/path)`);
  if (scheme !== undefined && SCHEMES.has(scheme)) return scheme;
  const hint = /^[A-Za-z0-9+/=_\-\s]{16,}$/.test(url.slice(0, 4096))
    ? "; it looks like raw base64: send it as data:<mime>;base64,<data>"
    : "";
  const what = scheme === undefined ? "has no URL scheme" : `has the unsupported scheme "${scheme}:"`;
  throw new InvalidArgumentError(field, `${what} (expected a data:, file:, http: or https: URL)${hint}`);
}

async function dataDraft(ctx: ResolveContext, draft: FilePartInput, field: string): Promise<Piece[]> {
  const data = parseDataUrl(`${field}.url`, draft.url);
  if (data.bytes.byteLength > ctx.limits.data_url_bytes) {
    throw new LimitExceededError(`${field}.url`, "data_url_bytes", ctx.limits.data_url_bytes, data.bytes.byteLength, "bytes");
  }
  const sniffed = await sniffImage(data.bytes);
  const declared = [draft.mime, data.mime].find(isImageMime);
  if (sniffed !== undefined || declared !== undefined) {
    const image = await normalizeImage(`${field}.url`, data.bytes, sniffed ?? essence(declared ?? ""), ctx.limits);
    return [filePart(draft, { mime: image.mime, url: toDataUrl(image.mime, image.bytes) })];
  }
  // The declared mime decides (a URL without one is text/plain by the standard, whatever its body).
  if (!isTextMime(draft.mime)) return [filePart(draft, {})];
  return [
    synthetic(`Called the Read tool with the following input: ${JSON.stringify({ filePath: draft.filename || undefined })}`),
    synthetic(dataUrlText(data)),
    filePart(draft, {}),
  ];
}

async function fileUrlDraft(
  ctx: ResolveContext,
  draft: FilePartInput,
  field: string,
  run: DraftRun,
  symbolAllowed: boolean,
): Promise<Piece[]> {
  const target = parseFileUrl(`${field}.url`, draft.url);
  const filePath = await confinePath(`${field}.url`, target.path, [ctx.directory, ...ctx.roots]);
  const note = ctx.references ? await referenceNote(ctx.references, draft, filePath) : undefined;
  const lead = note ? [synthetic(note.text, note.metadata)] : [];
  let { offset, limit } = target;
  const symbol =
    target.symbolLine === undefined || !symbolAllowed
      ? undefined
      : await findSymbolAt(filePath, target.symbolLine, ctx.limits.symbol_source_bytes);
  if (symbol !== undefined) {
    offset = symbol.start;
    limit = symbol.end - symbol.start + 1;
  }
  const args = { filePath, offset, limit };
  const call = synthetic(
    `Called the Read tool with the following input: ${JSON.stringify(args)}`,
    symbol ? { symbol: { ...symbol } } : undefined,
  );
  let result: ReadResult;
  try {
    result = await readOnce(run, filePath, { offset, limit, maxAttachmentBytes: ctx.limits.attachment_bytes, field: `${field}.url` });
  } catch (error) {
    if (!(error instanceof ReadFailure)) throw error;
    run.problems.push({ path: filePath, message: error.message });
    return [...lead, call, synthetic(`Read tool failed to read ${filePath} with the following error: ${error.message}`)];
  }
  const filename = draft.filename || path.basename(filePath);
  switch (result.kind) {
    case "text":
      return [...lead, call, synthetic(result.output), filePart(draft, { mime: "text/plain", filename })];
    case "directory":
      return [...lead, call, synthetic(result.output), filePart(draft, { mime: "application/x-directory", filename })];
    case "attachment": {
      if (!isImageMime(result.mime))
        return [...lead, call, filePart(draft, { mime: result.mime, filename, url: toDataUrl(result.mime, result.data) })];
      const image = await normalizeImage(`${field}.url`, result.data, result.mime, ctx.limits);
      return [...lead, call, filePart(draft, { mime: image.mime, filename, url: toDataUrl(image.mime, image.bytes) })];
    }
  }
}

function filePart(draft: FilePartInput, override: { mime?: string; filename?: string; url?: string }): Piece {
  const value = {
    mime: override.mime ?? draft.mime,
    filename: fileName(override.filename ?? draft.filename),
    url: override.url ?? draft.url,
    source: draft.source,
  };
  return { part: create(PartSchema, { id: draft.id, kind: { case: "file", value } }), synthetic: false };
}

/**
 * The name a file part is stored with: the last segment of `filename` when a client sent a full
 * path (`/home/me/docs/spec.pdf`, `C:\Users\me\spec.pdf`, `\\server\share\spec.pdf` →
 * `spec.pdf`; a trailing separator is ignored), for every kind of file. A relative name
 * (`src/a.ts`, a reference's `docs/guide/intro.md`) is kept as sent: it names the file the way
 * the prompt text does.
 */
export function fileName(filename: string): string {
  if (!/^(?:[/\\]|[A-Za-z]:[/\\])/.test(filename)) return filename;
  return (
    filename
      .split(/[/\\]/)
      .filter((s) => s !== "")
      .at(-1) ?? ""
  );
}

function synthetic(text: string, metadata?: JsonObject): Piece {
  return { part: create(PartSchema, { kind: { case: "text", value: { text, synthetic: true, metadata } } }), synthetic: true };
}

function essence(mime: string): string {
  return mime.split(";")[0]!.trim().toLowerCase();
}

/**
 * Names the i-th draft of a prompt in errors, e.g. `parts[2]` (then `parts[2].file.url`). The
 * `Command` RPC names the drafts its template brings `command.template.parts[k]` and the
 * request's own drafts by their index in its `parts` (`commandPartField`).
 */
export type PartField = (index: number) => string;

/** The default {@link PartField}: `parts[i]`, the draft's index in the request. */
export const requestPartField: PartField = (index) => `parts[${index}]`;
