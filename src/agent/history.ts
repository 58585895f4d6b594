import type { JsonObject } from "@bufbuild/protobuf";
import type { AssistantContent, ModelMessage, ToolContent, ToolResultPart, UserContent } from "ai";
import type { MessageWithParts } from "../../gen/ledger/v1/message_pb.js";
import type { FilePart, Part, ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { SHELL_USER_TEXT } from "../ledger/shell-text.js";
import { isTextMime } from "../parts/data-url.js";
import { isHttpUrlWithHost } from "../parts/http-url.js";
import { COMPACTION_QUESTION, PRUNED_OUTPUT } from "./compacted-history.js";
import type { ResolvedModel } from "./providers.js";

/** What the model accepts, for deciding how attachments are sent. */
export interface HistoryTarget {
  /** Provider of the model this history is for; provider metadata of other providers is dropped. */
  providerId: string;
  /** `modalities.input` of the model ("text", "image", "pdf"). */
  inputModalities: string[];
  /**
   * The provider takes images and PDFs inside tool results ({@link ResolvedModel}); otherwise a
   * tool's attachments follow its results in a user message. Default false.
   */
  mediaInToolResults?: boolean;
}

/** The history target of `model`: its provider, `modalities.input` (default text only) and whether tool results may hold media. */
export function historyTarget(model: Pick<ResolvedModel, "providerId" | "config" | "mediaInToolResults">): HistoryTarget {
  return {
    providerId: model.providerId,
    inputModalities: model.config.modalities?.input ?? ["text"],
    mediaInToolResults: model.mediaInToolResults,
  };
}

/** The user text before a tool's attachments when the provider takes none in tool results (OpenCode's). */
export const TOOL_ATTACHMENTS_TEXT = "Attached image(s) from tool result:";

/**
 * Converts a session's stored messages into AI SDK model messages (OpenCode
 * `MessageV2.toModelMessages`):
 * - user: text parts (synthetic included, `ignored` left out); agent parts are replaced by the
 *   synthetic text that follows them; text/directory file parts and text `data:` URLs are left
 *   out (their content is in the synthetic read output); images and PDFs go only to models whose modalities accept them,
 *   otherwise an explicit text notice; a subtask part (it runs as a `task` call in the answer)
 *   is sent as the text {@link SHELL_USER_TEXT}, "The following tool was executed by the user",
 *   as OpenCode does, so a prompt of subtasks alone still has its user turn before the calls; a
 *   `compaction` part is sent as the text {@link COMPACTION_QUESTION} (OpenCode: "What did we do so far?");
 * - assistant: text, reasoning and tool calls, each step's tool results as a `tool` message;
 *   interrupted tool calls get an error result; a pruned output (`time_compacted` set) is sent as
 *   {@link PRUNED_OUTPUT} (OpenCode "[Old tool result content cleared]"), without attachments;
 * - a completed tool's attachments (images and PDFs `read` returned; OpenCode `attachments`):
 *   for a model whose modalities accept them, inside the tool result when the provider takes
 *   media there (`mediaInToolResults`), else in a user message right after the `tool` message,
 *   {@link TOOL_ATTACHMENTS_TEXT} then the files (as OpenCode does); for a model that does not
 *   accept them, the result's text ends with the notice a prompt's attachment gets;
 * - provider metadata (`providerOptions`: Anthropic thinking signatures and redacted thinking,
 *   OpenAI Responses item ids and encrypted reasoning) goes back only to the provider that
 *   produced it (same `providerId`); for another provider it is dropped. A reasoning part with
 *   empty text is sent only with its metadata (Anthropic redacted thinking, an OpenAI reasoning
 *   item without summary), so never to another provider;
 * - reasoning is sent only together with the text or tool calls it led to: a step cut off after
 *   its reasoning (an abort or error mid-thinking) is skipped, since providers reject reasoning
 *   on its own (Anthropic: an assistant message left empty once an unsigned thinking block is
 *   dropped; OpenAI Responses: "Item 'rs_…' of type 'reasoning' was provided without its required
 *   following item");
 * - assistant messages that produced nothing are skipped.
 */
export function toModelMessages(history: MessageWithParts[], target: HistoryTarget): ModelMessage[] {
  const out: ModelMessage[] = [];
  for (const entry of history) {
    const message = entry.message?.kind;
    if (message?.case === "user") {
      const content = userContent(entry.parts, target);
      if (content.length > 0) out.push({ role: "user", content });
      continue;
    }
    if (message?.case !== "assistant") continue;
    const sameProvider = message.value.model?.providerId === target.providerId;
    const { content, results, media } = assistantContent(entry.parts, sameProvider, target);
    if (content.length === 0) continue;
    out.push({ role: "assistant", content });
    if (results.length > 0) out.push({ role: "tool", content: results });
    if (media.length > 0) out.push({ role: "user", content: [{ type: "text", text: TOOL_ATTACHMENTS_TEXT }, ...media] });
  }
  return out;
}

function userContent(parts: Part[], target: HistoryTarget): Exclude<UserContent, string> {
  const content: Exclude<UserContent, string> = [];
  for (const part of parts) {
    if (part.kind.case === "text" && !part.kind.value.ignored && part.kind.value.text !== "")
      content.push({ type: "text", text: part.kind.value.text });
    if (part.kind.case === "file") content.push(...fileContent(part.kind.value, target));
    if (part.kind.case === "compaction") content.push({ type: "text", text: COMPACTION_QUESTION });
    if (part.kind.case === "subtask") content.push({ type: "text", text: SHELL_USER_TEXT });
  }
  return content;
}

/** A `data:` URL, in any case (as admission takes it). */
const DATA_URL = /^\s*data:/i;

/** Whether a provider can be sent `url`: a `data:` URL, or an `http(s):` URL naming a host. */
function sendable(url: string): boolean {
  return DATA_URL.test(url) || isHttpUrlWithHost(url);
}

/** How a notice names `file`: its filename, else the start of its URL. */
function shownName(file: FilePart): string {
  return file.filename || file.url.slice(0, 80);
}

/** Whether `file` is an image or a PDF (the media a model may accept), by its mime. */
function mediaKind(file: FilePart): "image" | "pdf" | undefined {
  const mime = file.mime.toLowerCase();
  return mime.startsWith("image/") ? "image" : mime === "application/pdf" ? "pdf" : undefined;
}

/** The notice sent instead of an image or PDF the model does not accept. */
function unreadableNotice(file: FilePart, kind: "image" | "pdf"): string {
  return `[Attached ${kind === "image" ? "image" : "PDF"} ${shownName(file)} (${file.mime}) cannot be read by this model: it does not accept ${kind} input]`;
}

function fileContent(file: FilePart, target: HistoryTarget): Exclude<UserContent, string> {
  // An MCP resource's content is in the synthetic texts before it; its URL is not readable here.
  if (file.source?.kind.case === "resource") return [];
  const mime = file.mime.toLowerCase();
  if (mime === "text/plain" || mime === "application/x-directory") return [];
  // A text `data:` URL's body is in the synthetic texts before it (decoded at admission).
  if (DATA_URL.test(file.url) && isTextMime(mime)) return [];
  const kind = mediaKind(file);
  // Only a data: URL or an http(s) one with a host can reach a provider; anything else (a URL
  // stored before admission checked it, a file: URL set by UpdatePart) is named, never sent.
  if (!kind || !sendable(file.url))
    return [{ type: "text", text: `[Attached file ${shownName(file)} (${file.mime}) is not shown to the model]` }];
  if (!target.inputModalities.includes(kind)) return [{ type: "text", text: unreadableNotice(file, kind) }];
  return [
    {
      type: "file",
      data: DATA_URL.test(file.url) ? file.url.trim() : new URL(file.url),
      mediaType: file.mime,
      filename: file.filename || undefined,
    },
  ];
}

function assistantContent(
  parts: Part[],
  sameProvider: boolean,
  target: HistoryTarget,
): { content: Exclude<AssistantContent, string>; results: ToolContent; media: Exclude<UserContent, string> } {
  const content: Exclude<AssistantContent, string> = [];
  const results: ToolContent = [];
  const media: Exclude<UserContent, string> = [];
  for (const part of parts) {
    const options = sameProvider ? providerOptions(part) : undefined;
    switch (part.kind.case) {
      case "text":
        if (part.kind.value.text !== "" && !part.kind.value.ignored)
          content.push({ type: "text", text: part.kind.value.text, providerOptions: options });
        break;
      case "reasoning":
        if (part.kind.value.text !== "" || options)
          content.push({ type: "reasoning", text: part.kind.value.text, providerOptions: options });
        break;
      case "tool": {
        const tool = part.kind.value;
        content.push({ type: "tool-call", toolCallId: tool.callId, toolName: tool.tool, input: toolInput(tool), providerOptions: options });
        results.push({ type: "tool-result", toolCallId: tool.callId, toolName: tool.tool, output: toolOutput(tool, target, media) });
        break;
      }
      default:
        break;
    }
  }
  // Reasoning alone is not sent: it must come with what it led to.
  if (content.every((c) => c.type === "reasoning")) return { content: [], results, media: [] };
  return { content, results, media };
}

function toolInput(tool: ToolPart): unknown {
  const state = tool.state?.status;
  return (state?.value && "input" in state.value ? state.value.input : undefined) ?? {};
}

/**
 * The result the model gets for `tool`. A completed call's attachments the model accepts go into
 * the result (`mediaInToolResults`) or onto `media`, for the user message after the results.
 */
function toolOutput(tool: ToolPart, target: HistoryTarget, media: Exclude<UserContent, string>): ToolResultPart["output"] {
  const state = tool.state?.status;
  if (state?.case === "error") return { type: "error-text", value: state.value.error };
  if (state?.case !== "completed") return { type: "error-text", value: "Tool execution was interrupted" };
  if (state.value.timeCompacted) return { type: "text", value: PRUNED_OUTPUT };
  const notices: string[] = [];
  const inResult: Array<{ type: "image-data" | "file-data"; data: string; mediaType: string; filename?: string }> = [];
  for (const file of state.value.attachments) {
    const kind = mediaKind(file);
    const data = kind && base64Of(file.url);
    if (!kind || data === undefined) continue;
    if (!target.inputModalities.includes(kind)) notices.push(unreadableNotice(file, kind));
    else if (!target.mediaInToolResults) media.push(...fileContent(file, target));
    else if (kind === "image") inResult.push({ type: "image-data", data, mediaType: file.mime });
    else inResult.push({ type: "file-data", data, mediaType: file.mime, filename: file.filename || undefined });
  }
  const text = [state.value.output, ...notices].join("\n\n");
  if (inResult.length === 0) return { type: "text", value: text };
  return { type: "content", value: [{ type: "text", text }, ...inResult] };
}

/** The base64 payload of a `data:<mime>;base64,` URL (what `read` stores), else undefined. */
function base64Of(url: string): string | undefined {
  const match = /^data:[^,;]*(?:;[^,;]*)*;base64,/i.exec(url);
  return match ? url.slice(match[0].length) : undefined;
}

function providerOptions(part: Part): Record<string, JsonObject> | undefined {
  const value = part.kind.value as { metadata?: JsonObject } | undefined;
  const metadata = value?.metadata;
  return metadata && Object.keys(metadata).length > 0 ? (metadata as Record<string, JsonObject>) : undefined;
}
