// session-ledger browser client: list sessions, open one, send a prompt (text + attached files
// as `data:` URLs) over PromptStream, and render its events live. Plain TypeScript + DOM.
//
// The server is `?server=<url>` (default: this page's origin), reached with Connect + JSON from
// @connectrpc/connect-web; the ledger allows loopback origins by CORS. A server that requires a
// token gets the one given as `#token=<token>` (see pageToken).
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { MessageError } from "../../gen/ledger/v1/error_pb.js";
import type { SessionStatus } from "../../gen/ledger/v1/event_pb.js";
import type { AssistantMessage, UserMessage } from "../../gen/ledger/v1/message_pb.js";
import type { ModelRef } from "../../gen/ledger/v1/model_pb.js";
import type { Part, PartInputSchema, ToolPart } from "../../gen/ledger/v1/part_pb.js";
import { SessionService } from "../../gen/ledger/v1/service_pb.js";
import type { Session } from "../../gen/ledger/v1/session_pb.js";
import { PermissionReply, type PermissionRequest } from "../../gen/ledger/v1/permission_pb.js";
import { renderTodos } from "./todo-list.js";
import { Transcript, type Change, type Entry } from "./transcript.js";

type PartInit = MessageInitShape<typeof PartInputSchema>;

const serverUrl = (new URLSearchParams(location.search).get("server") ?? location.origin).replace(/\/+$/, "");

/**
 * The bearer token of a server that requires one (docs/security.md, "The browser page"): given
 * as the URL fragment `#token=<token>` (a fragment never reaches a server or its logs), kept in
 * this tab's sessionStorage and taken out of the address bar at once.
 */
function pageToken(): string | undefined {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ""));
  const given = fragment.get("token");
  if (given) {
    sessionStorage.setItem("ledger-token", given);
    fragment.delete("token");
    const rest = fragment.toString();
    history.replaceState(null, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
  }
  return sessionStorage.getItem("ledger-token") ?? undefined;
}
const token = pageToken();
const client = createClient(
  SessionService,
  createConnectTransport({
    baseUrl: serverUrl,
    useBinaryFormat: false,
    interceptors: token
      ? [
          (next) => (req) => {
            req.header.set("authorization", `Bearer ${token}`);
            return next(req);
          },
        ]
      : [],
  }),
);

function byId<T extends HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (!found) throw new Error(`#${id} is missing from index.html`);
  return found as T;
}

const ui = {
  serverUrl: byId<HTMLElement>("server-url"),
  status: byId<HTMLElement>("status"),
  newSession: byId<HTMLFormElement>("new-session"),
  directory: byId<HTMLInputElement>("directory"),
  title: byId<HTMLInputElement>("title"),
  refresh: byId<HTMLButtonElement>("refresh"),
  sessions: byId<HTMLUListElement>("sessions"),
  sessionHead: byId<HTMLElement>("session-head"),
  error: byId<HTMLElement>("error"),
  messages: byId<HTMLElement>("messages"),
  prompt: byId<HTMLFormElement>("prompt"),
  text: byId<HTMLTextAreaElement>("prompt-text"),
  file: byId<HTMLInputElement>("prompt-file"),
  model: byId<HTMLSelectElement>("model"),
  abort: byId<HTMLButtonElement>("abort"),
  permissions: byId<HTMLElement>("permissions"),
  todos: byId<HTMLElement>("todos"),
  send: byId<HTMLButtonElement>("send"),
};

/** The open session and its transcript. */
let current: { session: Session; transcript: Transcript } | undefined;
/** The PromptStream in flight (one at a time) and the session it runs in. */
let running: { controller: AbortController; sessionId: string } | undefined;

// ---------------------------------------------------------------------------------------------
// DOM helpers

type Child = Node | string | false | null | undefined;

function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== false && child !== null && child !== undefined) node.append(child);
  return node;
}

function formatTime(ts: Timestamp | undefined): string {
  return ts ? timestampDate(ts).toLocaleString() : "";
}

function modelName(model: ModelRef | undefined): string {
  return model ? `${model.providerId}/${model.modelId}` : "";
}

/** The main argument of a tool call (path, pattern, ...), as the CLI shows it. */
function describeInput(input: JsonObject | undefined): string {
  if (!input) return "";
  const key = ["filePath", "path", "pattern", "description", "url", "command"].find((k) => typeof input[k] === "string");
  const value = key ? String(input[key]) : Object.keys(input).length > 0 ? JSON.stringify(input) : "";
  return value.length > 80 ? `${value.slice(0, 79)}…` : value;
}

function errorKind(error: MessageError): string {
  return (error.kind.case ?? "unknown").replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function describeError(error: unknown): string {
  const err = ConnectError.from(error);
  const reason = err.findDetails(ErrorInfoSchema)[0]?.reason;
  const hint =
    reason === "NO_MODEL_PROVIDER"
      ? "\nThe prompt was stored; configure a model provider in ledger.json to get answers."
      : err.code === Code.Unauthenticated
        ? "\nThis server requires a token: open the page as /#token=<your token> (it stays in this tab only)."
        : "";
  return `${Code[err.code] ?? err.code}${reason ? ` (${reason})` : ""}: ${err.rawMessage}${hint}`;
}

function showError(message: string | undefined): void {
  ui.error.textContent = message ?? "";
  ui.error.hidden = !message;
}

type StatusKind = "idle" | "busy" | "retry" | "sending" | "error";

function setStatus(kind: StatusKind, text: string = kind): void {
  ui.status.dataset.status = kind;
  ui.status.textContent = text;
}

function showStatus(status: SessionStatus["status"]): void {
  switch (status.case) {
    case "busy":
      setStatus("busy");
      return;
    case "retry": {
      const r = status.value;
      const wait = r.next ? Math.max(0, Math.round((timestampMs(r.next) - Date.now()) / 1000)) : undefined;
      setStatus("retry", `retry ${r.attempt}: ${r.message}${wait !== undefined ? ` (next in ${wait}s)` : ""}`);
      return;
    }
    default:
      setStatus("idle");
  }
}

// ---------------------------------------------------------------------------------------------
// Sessions

async function loadSessions(): Promise<void> {
  try {
    const { sessions } = await client.listSessions({ pageSize: 100 });
    renderSessions(sessions);
  } catch (error) {
    showError(`Cannot list sessions on ${serverUrl}: ${describeError(error)}`);
  }
}

function renderSessions(sessions: Session[]): void {
  ui.sessions.replaceChildren(
    ...sessions.map((s) => {
      const button = h(
        "button",
        { type: "button", "data-session-id": s.id, title: s.id },
        h("span", { class: "session-title" }, s.title || "(untitled)"),
        h("small", {}, s.directory),
        h("small", {}, `${s.messageCount} message${s.messageCount === 1 ? "" : "s"} · ${formatTime(s.timeUpdated)}`),
      );
      if (current?.session.id === s.id) button.setAttribute("aria-current", "true");
      button.addEventListener("click", () => void openSession(s.id));
      return h("li", {}, button);
    }),
  );
}

async function loadModels(): Promise<void> {
  try {
    const { models, defaultModel } = await client.listModels({});
    const def = modelName(defaultModel);
    ui.model.replaceChildren(
      h("option", { value: "" }, def ? `default (${def})` : "default model"),
      ...models.map((m) =>
        h(
          "option",
          { value: `${m.providerId}/${m.modelId}` },
          m.name ? `${m.name} (${m.providerId}/${m.modelId})` : `${m.providerId}/${m.modelId}`,
        ),
      ),
    );
  } catch {
    // Optional: the select keeps "default model".
  }
}

/** Counts openSession calls: a load that a later call overtook does not replace what that call shows. */
let opening = 0;
/** openSession calls in flight; `body[data-opening]` is set while there are any. */
let loading = 0;

/** Shows a session: its head, transcript, todos and permission requests, then follows its events. False when a later call overtook this one or it failed (the error is shown). */
async function openSession(sessionId: string): Promise<boolean> {
  const mine = ++opening;
  loading += 1;
  document.body.dataset.opening = "true";
  showError(undefined);
  try {
    const { session } = await client.getSession({ sessionId });
    if (!session) throw new Error(`session ${sessionId} not found`);
    const transcript = new Transcript(session.id);
    // Where the log ends before the messages are read: the events after it are followed below
    // (those already in the page are applied again, which changes nothing).
    const afterSeq = await logEnd(session.id);
    const { todos } = await client.getTodo({ sessionId });
    let pageToken = "";
    do {
      const page = await client.listMessages({ sessionId, pageSize: 1000, pageToken });
      transcript.load(page.messages);
      pageToken = page.nextPageToken;
    } while (pageToken);
    // Another session was opened (or this one again) while this one loaded: that call renders.
    if (mine !== opening) return false;
    current = { session, transcript };
    renderTodos(ui.todos, todos);
    void followSession(session.id, afterSeq);
    if (location.hash !== `#${session.id}`) history.replaceState(null, "", `#${session.id}`);
    renderSessionHead();
    renderTranscript();
    for (const b of ui.sessions.querySelectorAll<HTMLButtonElement>("button[data-session-id]")) {
      if (b.dataset.sessionId === session.id) b.setAttribute("aria-current", "true");
      else b.removeAttribute("aria-current");
    }
    setStatus(running?.sessionId === session.id ? "busy" : "idle");
    updateControls();
    // Ready to type into, unless the user is typing elsewhere meanwhile (the new-session form, say).
    const active = document.activeElement;
    const typing = active instanceof HTMLInputElement || active instanceof HTMLTextAreaElement || active instanceof HTMLSelectElement;
    if (!typing) ui.text.focus();
    return true;
  } catch (error) {
    if (mine === opening) showError(`Cannot open ${sessionId}: ${describeError(error)}`);
    return false;
  } finally {
    loading -= 1;
    if (loading === 0) delete document.body.dataset.opening;
  }
}

function renderSessionHead(): void {
  if (!current) return;
  const s = current.session;
  ui.sessionHead.replaceChildren(h("strong", {}, s.title || "(untitled)"), ` · ${s.id} · `, h("code", {}, s.directory));
}

// ---------------------------------------------------------------------------------------------
// Transcript rendering

function renderTranscript(): void {
  ui.messages.replaceChildren();
  for (const entry of current?.transcript.messages ?? []) renderMessage(entry);
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

function messageElement(messageId: string): HTMLElement | undefined {
  return ui.messages.querySelector<HTMLElement>(`article[data-message-id="${CSS.escape(messageId)}"]`) ?? undefined;
}

function renderMessage(entry: Entry): void {
  let article = messageElement(entry.id);
  if (!article) {
    article = h("article", { class: "message", "data-message-id": entry.id }, h("header"), h("div", { class: "parts" }));
    ui.messages.append(article);
  }
  const kind = entry.message?.kind;
  article.classList.toggle("user", kind?.case === "user");
  article.classList.toggle("assistant", kind?.case === "assistant");
  const items = messageHeader(kind?.case === "user" ? kind.value : undefined, kind?.case === "assistant" ? kind.value : undefined);
  article
    .querySelector("header")!
    .replaceChildren(...items.flatMap((item) => (!item ? [] : typeof item === "string" ? [h("span", {}, item)] : [item])));
  for (const part of entry.parts) renderPart(entry.id, part);
}

function messageHeader(user: UserMessage | undefined, assistant: AssistantMessage | undefined): Child[] {
  if (user) {
    return [h("span", { class: "role" }, "You"), user.agent && `agent ${user.agent}`, modelName(user.model), formatTime(user.timeCreated)];
  }
  if (assistant) {
    const t = assistant.tokens;
    const done = assistant.time?.completed !== undefined;
    return [
      h("span", { class: "role" }, "Assistant"),
      assistant.agent && `agent ${assistant.agent}`,
      modelName(assistant.model),
      done && assistant.finish && `finish ${assistant.finish}`,
      done && t && `tokens ${t.input} in / ${t.output} out`,
      done && assistant.cost > 0 && `$${assistant.cost.toFixed(4)}`,
      assistant.error && h("span", { class: "message-error" }, `error: ${errorKind(assistant.error)}: ${assistant.error.message}`),
    ];
  }
  return [h("span", { class: "role" }, "…")];
}

function renderPart(messageId: string, part: Part): void {
  const article = messageElement(messageId);
  if (!article) return;
  const container = article.querySelector<HTMLElement>(".parts")!;
  const old = container.querySelector<HTMLElement>(`[data-part-id="${CSS.escape(part.id)}"]`);
  const next = partElement(part);
  if (!next) {
    old?.remove();
    return;
  }
  next.dataset.partId = part.id;
  // Keep a <details> the user opened open across re-renders.
  const detailsOf = (node: HTMLElement | null) => (node instanceof HTMLDetailsElement ? node : node?.querySelector("details"));
  const before = detailsOf(old);
  const after = detailsOf(next);
  if (before && after) after.open = before.open;
  if (old) old.replaceWith(next);
  else container.append(next);
}

function partElement(part: Part): HTMLElement | undefined {
  const k = part.kind;
  switch (k.case) {
    case "text": {
      const t = k.value;
      if (t.synthetic) {
        const first = t.text.split("\n", 1)[0] ?? "";
        return h(
          "details",
          { class: "part text synthetic" },
          h("summary", {}, first.length > 100 ? `${first.slice(0, 99)}…` : first),
          h("pre", {}, t.text),
        );
      }
      const node = h("div", { class: `part text${t.ignored ? " ignored" : ""}` }, t.text);
      node.dataset.done = String(t.time?.end !== undefined);
      return node;
    }
    case "reasoning":
      return h(
        "details",
        { class: "part reasoning" },
        h("summary", {}, k.value.time?.end ? "Thought" : "Thinking…"),
        h("pre", {}, k.value.text),
      );
    case "file": {
      const f = k.value;
      const isImage = f.url.startsWith("data:image/");
      const isLink = /^https?:/i.test(f.url);
      return h(
        "div",
        { class: "part file" },
        h("span", { class: "badge" }, "file"),
        isLink
          ? h("a", { href: f.url, target: "_blank", rel: "noopener noreferrer" }, f.filename || f.url)
          : h("strong", { class: "filename" }, f.filename || "(file)"),
        h("span", { class: "mime" }, f.mime),
        isImage && h("img", { src: f.url, alt: f.filename }),
      );
    }
    case "tool":
      return toolElement(k.value);
    case "agent":
      return h("div", { class: "part agent" }, h("span", { class: "badge" }, "agent"), `@${k.value.name}`);
    case "subtask":
      return h(
        "div",
        { class: "part subtask" },
        h("span", { class: "badge" }, "subtask"),
        `${k.value.agent}: ${k.value.description || k.value.prompt}`,
      );
    case "retry":
      return h("div", { class: "part meta retry" }, `retry ${k.value.attempt}: ${k.value.error?.message ?? ""}`);
    case "patch":
      return h("div", { class: "part meta patch" }, `changed: ${k.value.files.join(", ")}`);
    case "compaction":
      return h("div", { class: "part meta compaction" }, "conversation summarised");
    default:
      // step-start, step-finish, snapshot: bookkeeping, summed up in the message header.
      return undefined;
  }
}

function toolElement(tool: ToolPart): HTMLElement {
  const status = tool.state?.status;
  const state = status?.case ?? "pending";
  let title = describeInput(status?.value?.input);
  let body: Child;
  switch (status?.case) {
    case "pending":
      body = status.value.raw && h("pre", {}, status.value.raw);
      break;
    case "running":
      title = status.value.title || title;
      break;
    case "completed":
      title = status.value.title || title;
      body = h("pre", {}, status.value.output);
      break;
    case "error":
      body = h("pre", { class: "tool-error" }, status.value.error);
      break;
  }
  return h(
    "div",
    { class: "part tool", "data-tool": tool.tool, "data-state": state },
    h(
      "div",
      {},
      h("span", { class: `badge ${state}` }, state),
      h("span", { class: "tool-name" }, tool.tool),
      title && h("span", { class: "tool-title" }, title),
    ),
    body && h("details", {}, h("summary", {}, state === "error" ? "error" : state === "completed" ? "output" : "input"), body),
  );
}

function render(change: Change): void {
  if (!current) return;
  const t = current.transcript;
  switch (change.kind) {
    case "message": {
      const entry = t.get(change.messageId);
      if (entry) renderMessage(entry);
      return;
    }
    case "message-removed":
      messageElement(change.messageId)?.remove();
      return;
    case "part": {
      const part = t.part(change.messageId, change.partId);
      if (!messageElement(change.messageId)) {
        const entry = t.get(change.messageId);
        if (entry) renderMessage(entry);
      } else if (part) renderPart(change.messageId, part);
      return;
    }
    case "part-removed":
      messageElement(change.messageId)
        ?.querySelector(`[data-part-id="${CSS.escape(change.partId)}"]`)
        ?.remove();
      return;
    case "status":
      showStatus(change.status);
      return;
    case "error":
      if (change.error) showError(`${errorKind(change.error)}: ${change.error.message}`);
      return;
    case "session":
      if (!change.deleted) {
        current.session = change.session;
        renderSessionHead();
      }
      return;
    case "prompted":
      // The message is stored: the inputs have done their job.
      ui.text.value = "";
      ui.file.value = "";
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Permission requests: a tool call an `ask` rule paused, answered here or by any other client

/** The WatchSession following the open session. */
let sessionWatch: AbortController | undefined;

/**
 * Follows the open session's events after `afterSeq` (WatchSession), whoever started its run
 * (this page, the CLI, another browser): messages, parts, streamed text and status are applied
 * to the transcript (events this page's own PromptStream also delivers apply twice and change
 * nothing: snapshots replace, deltas carry their offset), and the pending permission requests
 * are shown and refreshed on each permission event; the todo list is replaced on each
 * `todo_updated`. Another client's `prompted` event leaves the inputs alone.
 */
async function followSession(sessionId: string, afterSeq: bigint): Promise<void> {
  sessionWatch?.abort();
  const controller = new AbortController();
  sessionWatch = controller;
  await refreshPermissions(sessionId);
  try {
    for await (const { event } of client.watchSession({ sessionId, afterSeq }, { signal: controller.signal })) {
      if (!event || current?.transcript.sessionId !== sessionId) continue;
      const kind = event.kind.case;
      if (kind === "permissionAsked" || kind === "permissionReplied") await refreshPermissions(sessionId);
      if (event.kind.case === "todoUpdated") renderTodos(ui.todos, event.kind.value.todos);
      const own = running?.sessionId === sessionId;
      const near = ui.messages.scrollHeight - ui.messages.scrollTop - ui.messages.clientHeight < 80;
      for (const change of current.transcript.apply(event)) {
        // The page's own run reports its outcome on its own stream.
        if (change.kind === "prompted" || (own && (change.kind === "status" || change.kind === "error"))) continue;
        render(change);
      }
      if (near) ui.messages.scrollTop = ui.messages.scrollHeight;
    }
  } catch {
    // Switched sessions, or the stream ended: the page stays as last shown.
  }
}

/**
 * The last seq of the session's event log: WatchSession answers a cursor past the end with
 * OUT_OF_RANGE and the log's `last_seq` in its ErrorInfo (docs/api.md). 0 when it says nothing.
 */
async function logEnd(sessionId: string): Promise<bigint> {
  try {
    for await (const _ of client.watchSession({ sessionId, afterSeq: 1n << 62n })) break;
  } catch (error) {
    const lastSeq = ConnectError.from(error).findDetails(ErrorInfoSchema)[0]?.metadata.last_seq;
    if (lastSeq) return BigInt(lastSeq);
    throw error;
  }
  return 0n;
}

async function refreshPermissions(sessionId: string): Promise<void> {
  try {
    const { permissions } = await client.listPermissions({ sessionId });
    if (current?.session.id === sessionId) renderPermissions(permissions);
  } catch (error) {
    showError(`Cannot list permission requests: ${describeError(error)}`);
  }
}

function renderPermissions(requests: PermissionRequest[]): void {
  ui.permissions.hidden = requests.length === 0;
  ui.permissions.replaceChildren(
    ...requests.map((request) => {
      const meta = request.metadata ?? {};
      const diff = typeof meta.diff === "string" ? meta.diff : "";
      const description = typeof meta.description === "string" && meta.description ? ` (${meta.description})` : "";
      const answer = (reply: PermissionReply) => async () => {
        try {
          await client.replyPermission({ sessionId: request.sessionId, permissionId: request.id, reply });
        } catch (error) {
          showError(`Cannot answer ${request.id}: ${describeError(error)}`);
        }
        await refreshPermissions(request.sessionId);
      };
      const button = (label: string, reply: PermissionReply) => {
        const b = h("button", { type: "button", "data-reply": label.toLowerCase().replace(/ /g, "-") }, label);
        b.addEventListener("click", () => void answer(reply)());
        return b;
      };
      return h(
        "div",
        { class: "permission", "data-permission-id": request.id },
        h(
          "div",
          { class: "permission-what" },
          h("strong", {}, request.permission),
          " ",
          h("code", {}, request.patterns.join(", ")),
          description,
        ),
        diff && h("pre", { class: "permission-diff" }, diff),
        h(
          "div",
          { class: "permission-buttons" },
          button("Allow once", PermissionReply.ONCE),
          button("Always", PermissionReply.ALWAYS),
          button("Reject", PermissionReply.REJECT),
        ),
      );
    }),
  );
}

// ---------------------------------------------------------------------------------------------
// Prompting

function readAsDataUrl(file: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(reader.error ?? new Error(`cannot read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

function updateControls(): void {
  const open = current !== undefined;
  const busy = running !== undefined;
  ui.text.disabled = !open;
  ui.file.disabled = !open;
  ui.model.disabled = !open;
  ui.send.disabled = !open || busy;
  ui.abort.disabled = !busy || running?.sessionId !== current?.session.id;
}

async function sendPrompt(): Promise<void> {
  if (!current || running) return;
  const sessionId = current.session.id;
  const text = ui.text.value;
  const files = [...(ui.file.files ?? [])];
  if (!text.trim() && files.length === 0) return;
  showError(undefined);

  const parts: PartInit[] = [];
  if (text.trim()) parts.push({ kind: { case: "text", value: { text } } });
  try {
    for (const file of files) {
      parts.push({
        kind: {
          case: "file",
          value: { mime: file.type || "application/octet-stream", filename: file.name, url: await readAsDataUrl(file) },
        },
      });
    }
  } catch (error) {
    showError(String(error));
    return;
  }
  const [providerId, ...rest] = ui.model.value.split("/");
  const model = ui.model.value ? { providerId, modelId: rest.join("/") } : undefined;

  running = { controller: new AbortController(), sessionId };
  updateControls();
  setStatus("sending", "sending…");
  let failed = false;
  try {
    const stream = client.promptStream({ sessionId, parts, model }, { signal: running.controller.signal });
    for await (const { event } of stream) {
      if (!event || current?.transcript.sessionId !== event.sessionId) continue;
      const near = ui.messages.scrollHeight - ui.messages.scrollTop - ui.messages.clientHeight < 80;
      for (const change of current.transcript.apply(event)) render(change);
      if (near) ui.messages.scrollTop = ui.messages.scrollHeight;
    }
  } catch (error) {
    const err = ConnectError.from(error);
    if (err.code !== Code.Canceled) {
      failed = true;
      showError(describeError(err));
    }
  } finally {
    running = undefined;
    if (current?.session.id === sessionId) setStatus(failed ? "error" : "idle", failed ? "error" : "idle");
    updateControls();
    void loadSessions();
  }
}

async function abortRun(): Promise<void> {
  const run = running;
  if (!run) return;
  try {
    const { aborted } = await client.abort({ sessionId: run.sessionId });
    // No loop to stop (yet): end the stream on our side.
    if (!aborted) run.controller.abort();
  } catch {
    run.controller.abort();
  }
}

// ---------------------------------------------------------------------------------------------
// Wiring

ui.serverUrl.textContent = serverUrl;

ui.newSession.addEventListener("submit", (e) => {
  e.preventDefault();
  void (async () => {
    showError(undefined);
    try {
      const { session } = await client.createSession({ directory: ui.directory.value.trim(), title: ui.title.value.trim() });
      ui.title.value = "";
      if (!session) return;
      await loadSessions();
      // Submitted from the form: the prompt is what comes next, unless the user went on typing elsewhere.
      if (
        (await openSession(session.id)) &&
        (document.activeElement === document.body || document.activeElement?.closest("#new-session"))
      ) {
        ui.text.focus();
      }
    } catch (error) {
      showError(`Cannot create a session: ${describeError(error)}`);
    }
  })();
});

ui.refresh.addEventListener("click", () => void loadSessions());

ui.prompt.addEventListener("submit", (e) => {
  e.preventDefault();
  void sendPrompt();
});

ui.text.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    ui.prompt.requestSubmit();
  }
});

ui.abort.addEventListener("click", () => void abortRun());

window.addEventListener("hashchange", () => {
  const id = location.hash.slice(1);
  if (!/^ses_[0-9A-HJKMNP-TV-Z]{26}$/.test(id)) return;
  if (id !== current?.session.id) void openSession(id);
  // Back to the session shown: a load still on its way (another session) must not replace it.
  else opening++;
});

void (async () => {
  await Promise.all([loadSessions(), loadModels()]);
  const id = location.hash.slice(1);
  if (/^ses_[0-9A-HJKMNP-TV-Z]{26}$/.test(id)) await openSession(id);
  document.body.dataset.ready = "true";
})();
