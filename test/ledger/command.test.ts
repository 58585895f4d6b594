import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { expandTemplate } from "../../src/ledger/command.js";
import { newId } from "../../src/ids.js";
import { connectError as rejection } from "../support/errors.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { storedEvents } from "../support/stored.js";
import { file, shape, text, type Draft } from "../support/prompt.js";

let t: TestLedger;
/** A directory outside the session's, for a template reference the session may not read. */
let outside: string;
beforeAll(async () => {
  outside = await mkdtemp(path.join(tmpdir(), "command-outside-"));
  await writeFile(path.join(outside, "secret.txt"), "not yours\n");
  t = await startTestLedger({
    limits: { metadata_bytes: 64 },
    command: {
      review: {
        template: "Review $1 for $2 ($ARGUMENTS). Notes in @notes.txt, not in @missing.txt.",
        description: "review a file",
        agent: "plan",
      },
      count: { template: "Count the files under $1", description: "count files", agent: "explore", subtask: true },
      leak: { template: `Compare @notes.txt with @${outside}/secret.txt`, description: "reads outside" },
    },
  });
  await writeFile(path.join(t.dir, "notes.txt"), "first note\nsecond note\n");
  await mkdir(path.join(t.dir, "src"));
});
afterAll(async () => {
  await t?.close();
  await rm(outside, { recursive: true, force: true });
});

const eventKinds = (sessionId: string) => storedEvents(t.ledger.deps.db, sessionId);

describe("expandTemplate", () => {
  it("fills $N with words (quotes kept together, the last takes the rest) and $ARGUMENTS with everything", () => {
    expect(expandTemplate("a=$1 b=$2 all=$ARGUMENTS", `"two words" x y`)).toBe(`a=two words b=x y all="two words" x y`);
    expect(expandTemplate("a=$1 b=$3", "only")).toBe("a=only b=");
    expect(expandTemplate("plain", "extra args")).toBe("plain\n\nextra args");
    expect(expandTemplate("cost $ARGUMENTS", "$1 and $&")).toBe("cost $1 and $&");
  });

  it("never expands what the arguments bring: a $1 or $ARGUMENTS typed by the user stays as typed", () => {
    expect(expandTemplate("Review $1 for $2 ($ARGUMENTS)", "$ARGUMENTS $1")).toBe("Review $ARGUMENTS for $1 ($ARGUMENTS $1)");
    expect(expandTemplate("all: $ARGUMENTS", "$ARGUMENTS $$")).toBe("all: $ARGUMENTS $$");
  });
});

describe("Command", () => {
  it("stores the expanded template, its file references and the extra parts, with the command event", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const res = await t.client.command({
      sessionId,
      command: "review",
      arguments: `src/app.ts "error handling"`,
      noReply: true,
      parts: [text("and be brief")],
    });
    const message = res.message!;
    const user = message.message!.kind;
    expect(user.case === "user" && user.value.agent).toBe("plan");
    const notes = path.join(t.dir, "notes.txt");
    const shapes = message.parts.map(shape);
    expect(shapes[0]).toEqual({
      kind: "text",
      synthetic: false,
      text: `Review src/app.ts for error handling (src/app.ts "error handling"). Notes in @notes.txt, not in @missing.txt.`,
    });
    expect(shapes[1]).toEqual({
      kind: "text",
      synthetic: true,
      text: `Called the Read tool with the following input: ${JSON.stringify({ filePath: notes })}`,
    });
    expect(shapes[2]).toMatchObject({ kind: "text", synthetic: true });
    expect(String(shapes[2]!.text)).toContain("1: first note");
    expect(shapes[3]).toEqual({ kind: "file", mime: "text/plain", filename: "notes.txt", url: pathToFileURL(notes).href });
    expect(shapes[4]).toEqual({ kind: "text", synthetic: false, text: "and be brief" });
    expect(shapes).toHaveLength(5);

    const events = await eventKinds(sessionId);
    const command = events.find((e) => e.kind === "command");
    expect(command?.data).toMatchObject({
      command: { command: "review", arguments: `src/app.ts "error handling"`, messageId: user.value!.id },
    });
    // In the prompt's transaction, right before `prompted`.
    expect(events[events.indexOf(command!) + 1]?.kind).toBe("prompted");

    const watched = [];
    for await (const r of t.client.watchSession({ sessionId, afterSeq: 0n }, { signal: AbortSignal.timeout(1000) })) {
      watched.push(r.event!);
      if (r.event!.kind.case === "command") break;
    }
    expect(watched.at(-1)?.kind).toMatchObject({ case: "command", value: { command: "review", messageId: user.value!.id } });
  });

  it("replays the same message_id without a second message or command event", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const messageId = newId("msg");
    const first = await t.client.command({ sessionId, messageId, command: "review", arguments: "a", noReply: true });
    const again = await t.client.command({ sessionId, messageId, command: "review", arguments: "a", noReply: true });
    expect(again.message).toEqual(first.message);
    expect((await eventKinds(sessionId)).filter((e) => e.kind === "command")).toHaveLength(1);
  });

  it("runs a subtask command as one subtask part for the command's agent", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const res = await t.client.command({ sessionId, command: "count", arguments: "src", noReply: true });
    const message = res.message!;
    expect(message.parts.map(shape)).toEqual([{ kind: "subtask", agent: "explore", prompt: "Count the files under src" }]);
    const part = message.parts[0]!.kind;
    expect(part.case === "subtask" && [part.value.description, part.value.command]).toEqual(["count files", "count"]);
    const user = message.message!.kind;
    expect(user.case === "user" && user.value.agent).toBe("build");
    expect((await eventKinds(sessionId)).some((e) => e.kind === "command")).toBe(true);
  });

  // Review, 2026-12-02: errors counted the template's drafts (its text, `@notes.txt`) before the
  // client's, so a bad first draft of the request was named parts[2].
  it("names the client's drafts by their index in its parts, and the template's as command.template.parts[k], writing nothing", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = await eventKinds(sessionId);
    const secret = pathToFileURL(path.join(outside, "secret.txt")).href;
    const call = (parts: Draft[], command = "review") =>
      rejection(t.client.command({ sessionId, command, arguments: "a", noReply: true, parts }));

    const denied = await call([text("fine"), file(secret)]);
    expect([denied.code, denied.rawMessage]).toEqual([
      Code.PermissionDenied,
      `parts[1].file.url: ${path.join(outside, "secret.txt")} is outside the session directory and the configured roots`,
    ]);
    const id = newId("prt");
    const repeated = await call([
      { kind: { case: "text", value: { id, text: "a" } } },
      { kind: { case: "text", value: { id, text: "b" } } },
    ]);
    expect([repeated.code, repeated.rawMessage]).toEqual([
      Code.InvalidArgument,
      `parts[1].id: repeats parts[0].id (${id}): each part needs its own id`,
    ]);
    const big = await call([{ kind: { case: "text", value: { text: "m", metadata: { note: "x".repeat(100) } } } }]);
    expect(big.code).toBe(Code.ResourceExhausted);
    expect(big.findDetails(ErrorInfoSchema)[0]?.metadata).toMatchObject({ field: "parts[0].text.metadata", limit: "metadata_bytes" });

    expect(await eventKinds(sessionId)).toEqual(before);
  });

  // A probe, 2026-12-02: `@/etc/shadow` in the arguments was refused while `@/etc/nope` was stored
  // as text, which told a caller which files exist outside its directories. An @path outside the
  // session's directories is now left as text, like one that names nothing, whether it exists or not.
  it("leaves an @path outside the session directory as text whether it exists or not (no read, nothing told)", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const shapes = async (target: string) => {
      const res = await t.client.command({ sessionId, command: "review", arguments: `@${target} x`, noReply: true });
      return res
        .message!.parts.map(shape)
        .map((p): Record<string, unknown> => ({ ...p, text: typeof p.text === "string" ? p.text.replaceAll(target, "<path>") : p.text }));
    };
    const existing = await shapes(path.join(outside, "secret.txt"));
    expect(await shapes(path.join(outside, "no-such-file.txt"))).toEqual(existing);
    // The template's text, then only its own @notes.txt (read call, content, file part).
    expect(existing.map((p) => [p.kind, p.synthetic])).toEqual([
      ["text", false],
      ["text", true],
      ["text", true],
      ["file", undefined],
    ]);
    expect(JSON.stringify(existing)).not.toContain("not yours");

    // The same for a template's own reference outside ("leak"): stored, the reference left as text.
    const leak = await t.client.command({ sessionId, command: "leak", arguments: "", noReply: true });
    expect(leak.message!.parts.map(shape).map((p) => p.kind)).toEqual(["text", "text", "text", "file"]);
    expect(JSON.stringify(leak.message!.parts.map(shape))).not.toContain("not yours");
  });

  it("answers NOT_FOUND listing the configured commands, writing nothing", async () => {
    const sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
    const before = await eventKinds(sessionId);
    const error = await rejection(t.client.command({ sessionId, command: "deploy", arguments: "", noReply: true }));
    expect(error.code).toBe(Code.NotFound);
    expect(error.rawMessage).toContain("review, count, leak");
    expect(error.findDetails(ErrorInfoSchema)[0]).toMatchObject({
      reason: "COMMAND_NOT_FOUND",
      metadata: { command: "deploy", available: "review,count,leak" },
    });
    expect(await eventKinds(sessionId)).toEqual(before);
  });
});
