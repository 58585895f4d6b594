import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, realpath, rm, symlink, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { file, partText, text } from "../support/prompt.js";

// A corpus of hostile `file:` URLs driven through the real server: a Connect client sends a
// no_reply prompt with the URL as a file draft, and each row says which gRPC code comes back
// (or OK with the text stored), and how long the call may take. Refusals must be quick (no read
// of /dev/zero, no hang on a FIFO) and store nothing.
//
// Layout (in a fresh temp dir `base`):
//   base/session/        the session directory (a.txt, sub/b.txt, links, FIFO, socket, ...)
//   base/root/           a configured root (r.txt)
//   base/outside/        neither (secret.txt)
//   base/session-evil/   a sibling sharing the session dir's name as a prefix
// `main` is configured with roots [base/root]; `wide` with roots ["/"], to show that /proc, /sys
// and /dev stay refused even under a root that contains them.

/** Refusals must answer within this (ms), wall time of the Prompt call. */
const REFUSAL_MS = 100;
/** Reads that succeed (or report a missing file) must answer within this (ms). */
const READ_MS = 1000;
/** A call still running after this is cut off, so a hang fails the test instead of stalling it (ms). */
const CALL_TIMEOUT_MS = 5000;

interface Layout {
  base: string;
  session: string;
  root: string;
  outside: string;
}

type Expected =
  | { code: Code.PermissionDenied | Code.InvalidArgument; mentions?: (l: Layout) => string }
  /** The prompt is stored; its parts' text contains `text`. */
  | { code: "ok"; text: (l: Layout) => string };

interface Row {
  name: string;
  /** Creates what the row needs (under `l.base`, or links to system paths). */
  setup?: (l: Layout) => Promise<void>;
  url: (l: Layout) => string;
  expect: Expected;
  /** Upper bound on the Prompt call's wall time (ms). */
  withinMs: number;
  /** Which server: `main` (roots: base/root) or `wide` (roots: /). Default `main`. */
  ledger?: "main" | "wide";
}

const denied = (mentions?: (l: Layout) => string): Expected => ({ code: Code.PermissionDenied, mentions });
const invalid = (mentions?: (l: Layout) => string): Expected => ({ code: Code.InvalidArgument, mentions });
const stored = (expected: (l: Layout) => string): Expected => ({ code: "ok", text: expected });
const notFound = (rel: (l: Layout) => string): Expected => stored((l) => `File not found: ${rel(l)}`);
const fifo = (path: string): void => {
  execFileSync("mkfifo", [path]);
};

let socket: Server | undefined;

const ROWS: Row[] = [
  // Controls: what a client may read.
  {
    name: "a plain file inside the session dir",
    url: (l) => `file://${l.session}/a.txt`,
    expect: stored(() => "1: inside"),
    withinMs: READ_MS,
  },
  {
    name: "a missing file inside the session dir (OK with a failure text)",
    url: (l) => `file://${l.session}/missing.txt`,
    expect: notFound((l) => `${l.session}/missing.txt`),
    withinMs: READ_MS,
  },
  {
    name: "an absolute path inside a configured root (allowed)",
    url: (l) => `file://${l.root}/r.txt`,
    expect: stored(() => "1: in root"),
    withinMs: READ_MS,
  },
  {
    name: "a symlink inside the dir to another file inside (allowed)",
    setup: (l) => symlink(join(l.session, "sub", "b.txt"), join(l.session, "inner-link.txt")),
    url: (l) => `file://${l.session}/inner-link.txt`,
    expect: stored(() => "1: sub file"),
    withinMs: READ_MS,
  },
  {
    name: "a symlink inside the dir into the configured root (allowed)",
    setup: (l) => symlink(join(l.root, "r.txt"), join(l.session, "to-root.txt")),
    url: (l) => `file://${l.session}/to-root.txt`,
    expect: stored(() => "1: in root"),
    withinMs: READ_MS,
  },
  {
    name: "a directory inside the session dir (listing)",
    url: (l) => `file://${l.session}/sub/`,
    expect: stored(() => "<entries>\nb.txt"),
    withinMs: READ_MS,
  },
  {
    name: "an NFD-named file given in NFC (found)",
    setup: (l) => writeFile(join(l.session, "cafe\u0301.txt"), "decomposed\n"),
    url: (l) => `file://${l.session}/caf%C3%A9.txt`,
    expect: stored(() => "1: decomposed"),
    withinMs: READ_MS,
  },
  {
    name: "an NFC-named file given in NFD (found)",
    setup: (l) => writeFile(join(l.session, "\u00e9t\u00e9.txt"), "composed\n"),
    url: (l) => `file://${l.session}/e%CC%81te%CC%81.txt`,
    expect: stored(() => "1: composed"),
    withinMs: READ_MS,
  },

  // Devices and pseudo-filesystems.
  { name: "/dev/zero", url: () => "file:///dev/zero", expect: denied(() => "/dev/zero"), withinMs: REFUSAL_MS },
  { name: "/dev/urandom", url: () => "file:///dev/urandom", expect: denied(() => "/dev/urandom"), withinMs: REFUSAL_MS },
  { name: "/dev/stdin", url: () => "file:///dev/stdin", expect: denied(() => "/dev/stdin"), withinMs: REFUSAL_MS },
  { name: "/proc/self/environ", url: () => "file:///proc/self/environ", expect: denied(() => "/proc/self/environ"), withinMs: REFUSAL_MS },
  { name: "/sys/kernel", url: () => "file:///sys/kernel/", expect: denied(() => "/sys/kernel"), withinMs: REFUSAL_MS },
  {
    name: "/dev/zero under a root of /",
    ledger: "wide",
    url: () => "file:///dev/zero",
    expect: denied(() => "/dev/zero is a special filesystem path"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "/dev/urandom under a root of /",
    ledger: "wide",
    url: () => "file:///dev/urandom",
    expect: denied(() => "/dev/urandom is a special filesystem path"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "/proc/self/environ under a root of /",
    ledger: "wide",
    url: () => "file:///proc/self/environ",
    expect: denied(() => "/proc/self/environ is a special filesystem path"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "/proc/self/fd/0 under a root of /",
    ledger: "wide",
    url: () => "file:///proc/self/fd/0",
    expect: denied(() => "/proc/self/fd/0 is a special filesystem path"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "/sys/kernel under a root of /",
    ledger: "wide",
    url: () => "file:///sys/kernel/",
    expect: denied(() => "/sys/kernel is a special filesystem path"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "/proc reached by .. under a root of /",
    ledger: "wide",
    url: () => "file:///tmp/../proc/self/status",
    expect: denied(() => "/proc/self/status is a special filesystem path"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a symlink in the session dir to /proc/self/environ, under a root of /",
    ledger: "wide",
    setup: (l) => symlink("/proc/self/environ", join(l.session, "environ")),
    url: (l) => `file://${l.session}/environ`,
    expect: denied((l) => `${l.session}/environ is a special filesystem path`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a symlink in the session dir to /dev/zero",
    setup: (l) => symlink("/dev/zero", join(l.session, "zero")),
    url: (l) => `file://${l.session}/zero`,
    expect: denied((l) => `${l.session}/zero`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a FIFO inside the session dir (no hang)",
    setup: async (l) => fifo(join(l.session, "pipe")),
    url: (l) => `file://${l.session}/pipe`,
    expect: denied((l) => `${l.session}/pipe is not a regular file or directory`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a unix socket inside the session dir",
    setup: async (l) => {
      const server = createServer();
      await new Promise<void>((done) => server.listen(join(l.session, "sock"), done));
      socket = server;
    },
    url: (l) => `file://${l.session}/sock`,
    expect: denied((l) => `${l.session}/sock is not a regular file or directory`),
    withinMs: REFUSAL_MS,
  },

  // Symlinks leading out.
  {
    name: "a symlink to /etc/passwd",
    setup: (l) => symlink("/etc/passwd", join(l.session, "passwd")),
    url: (l) => `file://${l.session}/passwd`,
    expect: denied((l) => `${l.session}/passwd leads through a symlink outside`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a symlink to a file outside the roots",
    setup: (l) => symlink(join(l.outside, "secret.txt"), join(l.session, "leak.txt")),
    url: (l) => `file://${l.session}/leak.txt`,
    expect: denied((l) => `${l.session}/leak.txt`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a symlinked parent directory pointing out",
    setup: (l) => symlink(l.outside, join(l.session, "out-dir")),
    url: (l) => `file://${l.session}/out-dir/secret.txt`,
    expect: denied((l) => `${l.session}/out-dir/secret.txt`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a missing name under a symlinked parent pointing out",
    url: (l) => `file://${l.session}/out-dir/missing.txt`,
    expect: denied((l) => `${l.session}/out-dir/missing.txt leads through a symlink outside`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a directory symlink to /, then etc/passwd",
    setup: (l) => symlink("/", join(l.session, "slash")),
    url: (l) => `file://${l.session}/slash/etc/passwd`,
    expect: denied((l) => `${l.session}/slash/etc/passwd`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a directory symlink to / itself",
    url: (l) => `file://${l.session}/slash/`,
    expect: denied((l) => `${l.session}/slash`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a file that is a symlink loop",
    setup: async (l) => {
      await symlink(join(l.session, "loop-b"), join(l.session, "loop-a"));
      await symlink(join(l.session, "loop-a"), join(l.session, "loop-b"));
    },
    url: (l) => `file://${l.session}/loop-a`,
    expect: denied((l) => `${l.session}/loop-a cannot be resolved (ELOOP)`),
    withinMs: REFUSAL_MS,
  },

  // Traversal.
  {
    name: "../ out of the session dir",
    url: (l) => `file://${l.session}/../outside/secret.txt`,
    expect: denied((l) => `${l.outside}/secret.txt`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "%2e%2e out of the session dir",
    url: (l) => `file://${l.session}/%2e%2e/outside/secret.txt`,
    expect: denied((l) => `${l.outside}/secret.txt`),
    withinMs: REFUSAL_MS,
  },
  {
    name: ".%2E and %2E. out of the session dir",
    url: (l) => `file://${l.session}/sub/.%2E/%2E./outside/secret.txt`,
    expect: denied(),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a very deep ../../.. to /etc/passwd",
    url: (l) => `file://${l.session}/${"../".repeat(3000)}etc/passwd`,
    expect: denied(() => "/etc/passwd"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a sibling dir sharing the session dir's prefix",
    url: (l) => `file://${l.session}-evil/x.txt`,
    expect: denied((l) => `${l.session}-evil/x.txt`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "raw backslash traversal (a \\ is a / in file: URLs)",
    url: (l) => `file://${l.session}\\..\\outside\\secret.txt`,
    expect: denied((l) => `${l.outside}/secret.txt`),
    withinMs: REFUSAL_MS,
  },
  {
    name: "%3F then .. (the escaped ? is a name, the .. still climbs)",
    url: (l) => `file://${l.session}/%3F/../../outside/secret.txt`,
    expect: denied(),
    withinMs: REFUSAL_MS,
  },
  {
    name: "double-encoded %252e%252e stays a literal name (OK, not found)",
    url: (l) => `file://${l.session}/%252e%252e/outside/secret.txt`,
    expect: notFound((l) => `${l.session}/%2e%2e/outside/secret.txt`),
    withinMs: READ_MS,
  },
  {
    name: "escaped backslashes %5C are part of the name (OK, not found)",
    url: (l) => `file://${l.session}/..%5C..%5Coutside%5Csecret.txt`,
    expect: notFound((l) => `${l.session}/..\\..\\outside\\secret.txt`),
    withinMs: READ_MS,
  },
  {
    name: "a one-dot-leader lookalike of .. is a name (OK, not found)",
    url: (l) => `file://${l.session}/%E2%80%A4%E2%80%A4/outside/secret.txt`,
    expect: notFound((l) => `${l.session}/\u2024\u2024/outside/secret.txt`),
    withinMs: READ_MS,
  },
  { name: "an encoded slash %2F", url: (l) => `file://${l.session}/..%2F..%2Fetc%2Fpasswd`, expect: invalid(), withinMs: REFUSAL_MS },
  {
    name: "an overlong UTF-8 dot %C0%AE",
    url: (l) => `file://${l.session}/%C0%AE%C0%AE/outside/secret.txt`,
    expect: invalid(),
    withinMs: REFUSAL_MS,
  },

  // Malformed paths.
  {
    name: "a NUL (%00)",
    url: (l) => `file://${l.session}/a.txt%00.png`,
    expect: invalid(() => "contains a NUL character"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a path over 4096 bytes",
    url: (l) => `file://${l.session}/${"a".repeat(5000)}`,
    expect: invalid(() => "over the 4096-byte limit"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a file name over 255 bytes",
    url: (l) => `file://${l.session}/${"n".repeat(300)}.txt`,
    expect: invalid(() => "ENAMETOOLONG"),
    withinMs: REFUSAL_MS,
  },

  // Hosts, drives and odd URL forms.
  {
    name: "file://otherhost/etc/passwd",
    url: () => "file://otherhost/etc/passwd",
    expect: denied(() => "file://otherhost/etc/passwd names a remote host"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "file://127.0.0.1/etc/passwd",
    url: () => "file://127.0.0.1/etc/passwd",
    expect: denied(() => "names a remote host"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "file://localhost/etc/passwd (local, but outside)",
    url: () => "file://localhost/etc/passwd",
    expect: denied(() => "/etc/passwd is outside"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "FILE:///etc/passwd (upper-case scheme)",
    url: () => "FILE:///etc/passwd",
    expect: denied(() => "/etc/passwd"),
    withinMs: REFUSAL_MS,
  },
  { name: "file:/etc/passwd (one slash)", url: () => "file:/etc/passwd", expect: denied(() => "/etc/passwd"), withinMs: REFUSAL_MS },
  {
    name: "file:///C:/Windows/win.ini",
    url: () => "file:///C:/Windows/win.ini",
    expect: denied(() => "names a Windows drive path"),
    withinMs: REFUSAL_MS,
  },
  { name: "file:///c|/x", url: () => "file:///c|/x", expect: denied(() => "names a Windows drive path"), withinMs: REFUSAL_MS },
  {
    name: "file:///C:%5CWindows%5Cwin.ini",
    url: () => "file:///C:%5CWindows%5Cwin.ini",
    expect: denied(() => "names a Windows drive path"),
    withinMs: REFUSAL_MS,
  },
  { name: "a relative file:x", url: () => "file:x", expect: invalid(() => "is a relative file: URL"), withinMs: REFUSAL_MS },
  {
    name: "a relative file:../../etc/passwd",
    url: () => "file:../../etc/passwd",
    expect: invalid(() => "is a relative file: URL"),
    withinMs: REFUSAL_MS,
  },
  {
    name: "a query hiding a traversal (ignored: reads a.txt)",
    url: (l) => `file://${l.session}/a.txt?/../../outside/secret.txt`,
    expect: stored(() => "1: inside"),
    withinMs: READ_MS,
  },
  {
    name: "a fragment hiding a traversal (ignored: reads a.txt)",
    url: (l) => `file://${l.session}/a.txt#/../../../etc/passwd`,
    expect: stored(() => "1: inside"),
    withinMs: READ_MS,
  },
  {
    name: "a fragment cutting the path short, then .. (a plain missing name)",
    url: (l) => `file://${l.session}/x#/../../../etc/passwd`,
    expect: notFound((l) => `${l.session}/x`),
    withinMs: READ_MS,
  },
];

let base: string;
let layout: Layout;
let main: TestLedger;
let wide: TestLedger;

beforeAll(async () => {
  base = await realpath(await mkdtemp(join(tmpdir(), "hostile-")));
  layout = { base, session: join(base, "session"), root: join(base, "root"), outside: join(base, "outside") };
  await mkdir(join(layout.session, "sub"), { recursive: true });
  await mkdir(layout.root);
  await mkdir(layout.outside);
  await mkdir(`${layout.session}-evil`);
  await writeFile(join(layout.session, "a.txt"), "inside\n");
  await writeFile(join(layout.session, "sub", "b.txt"), "sub file\n");
  await writeFile(join(layout.root, "r.txt"), "in root\n");
  await writeFile(join(layout.outside, "secret.txt"), "TOP SECRET\n");
  await writeFile(`${layout.session}-evil/x.txt`, "evil\n");
  for (const row of ROWS) await row.setup?.(layout);
  [main, wide] = await Promise.all([
    startTestLedger({ roots: [layout.root] }, { transport: "http" }),
    startTestLedger({ roots: ["/"] }, { transport: "http" }),
  ]);
  // Warm both servers up (connection, first query, JIT), so the bounds measure the refusal itself.
  for (const t of [main, wide]) {
    const { session } = await t.client.createSession({ directory: layout.session });
    await t.client.prompt({ sessionId: session!.id, noReply: true, parts: [text("warm up"), file(`file://${layout.session}/a.txt`)] });
  }
});

afterAll(async () => {
  await new Promise((done) => (socket ? socket.close(done) : done(undefined)));
  await Promise.all([main?.close(), wide?.close()]);
  await rm(base, { recursive: true, force: true });
});

describe("hostile file: URLs through the server", () => {
  it("has at least 40 rows", () => {
    expect(ROWS.length).toBeGreaterThanOrEqual(40);
  });

  it.each(ROWS)("$name", async (row) => {
    const t = row.ledger === "wide" ? wide : main;
    // Best of up to 3 calls, each in a fresh session: a hang or a read of /dev/zero is slow every
    // time, a garbage-collection pause on a loaded test machine is not.
    const times: number[] = [];
    while (times.length < 3 && !times.some((ms) => ms < row.withinMs)) times.push(await attempt(t, row));
    expect(Math.min(...times), `${row.name} took ${times.map((ms) => ms.toFixed(1)).join(", ")} ms`).toBeLessThan(row.withinMs);
  });
});

/** Sends the row's URL once in a new session, checks the answer and what was stored; returns the call's wall time (ms). */
async function attempt(t: TestLedger, row: Row): Promise<number> {
  const sessionId = (await t.client.createSession({ directory: layout.session })).session!.id;
  const url = row.url(layout);
  const started = performance.now();
  const outcome = await t.client
    .prompt({ sessionId, noReply: true, parts: [text("look"), file(url)] }, { timeoutMs: CALL_TIMEOUT_MS })
    .then(
      (res) => ({ ok: true as const, res }),
      (err: unknown) => ({ ok: false as const, err: ConnectError.from(err) }),
    );
  const elapsed = performance.now() - started;
  const listed = await t.client.listMessages({ sessionId });

  if (row.expect.code === "ok") {
    if (!outcome.ok) throw new Error(`expected OK, got ${Code[outcome.err.code]}: ${outcome.err.rawMessage}`);
    const texts = outcome.res.message!.parts.map((p) => partText(p)).join("\n");
    expect(texts).toContain(row.expect.text(layout));
    expect(texts).not.toContain("TOP SECRET");
    expect(listed.messages).toHaveLength(1);
  } else {
    if (outcome.ok)
      throw new Error(`expected ${Code[row.expect.code]}, got OK: ${JSON.stringify(outcome.res.message?.parts.map(partText))}`);
    expect({ code: Code[outcome.err.code], message: outcome.err.rawMessage }).toMatchObject({ code: Code[row.expect.code] });
    expect(outcome.err.rawMessage).toMatch(/^parts\[1\]\.file\.url: /);
    if (row.expect.mentions) expect(outcome.err.rawMessage).toContain(row.expect.mentions(layout));
    expect(outcome.err.rawMessage).not.toContain("TOP SECRET");
    expect(listed.messages).toEqual([]);
  }
  return elapsed;
}

describe("session directories", () => {
  it("must exist", async () => {
    const err = await main.client.createSession({ directory: join(base, "no-such-dir") }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.InvalidArgument);
  });

  it("must be a directory", async () => {
    const err = await main.client.createSession({ directory: join(layout.session, "a.txt") }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.InvalidArgument);
  });

  it("are stored resolved, so a symlinked directory is confined to its target", async () => {
    await symlink(layout.session, join(base, "session-link"));
    const { session } = await main.client.createSession({ directory: join(base, "session-link", "sub", "..") });
    expect(session!.directory).toBe(layout.session);
    const err = await main.client
      .prompt({ sessionId: session!.id, noReply: true, parts: [file(`file://${base}/session-link/../outside/secret.txt`)] })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.PermissionDenied);
  });
});
