import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PermissionRequestSchema } from "../../gen/ledger/v1/permission_pb.js";
import { permissionAsker } from "../../src/cli/permissions.js";
import { newId } from "../../src/ids.js";
import { startTestLedger, type TestLedger } from "../support/ledger.js";
import { waitFor } from "../support/wait.js";

// The CLI's permission asker against a real ledger: requests are answered in the order asked, a
// request answered elsewhere before its turn is dropped, and a reply that fails does not leave
// the requests behind it waiting (the run would wait for them forever).

let t: TestLedger;
let sessionId: string;
beforeAll(async () => {
  t = await startTestLedger();
  sessionId = (await t.client.createSession({ directory: t.dir })).session!.id;
});
afterAll(async () => {
  await t?.close();
});

/** A request the server does not know: replying to it fails with NOT_FOUND. */
const unknown = (file: string) => create(PermissionRequestSchema, { id: newId("per"), sessionId, permission: "write", patterns: [file] });

describe("permissionAsker", () => {
  it("answers in order, goes on after a failed reply, drops a request answered elsewhere, and closes", async () => {
    const said: string[] = [];
    const asker = permissionAsker(t.client, { yes: true, interactive: false }, (text) => said.push(text));
    const [a, b, c] = [unknown("a.txt"), unknown("b.txt"), unknown("c.txt")];
    asker.asked(a);
    asker.asked(b);
    asker.asked(c);
    // b is answered by another client before its turn: it is never shown or answered here.
    asker.replied(b.id);
    await waitFor("c's turn", () => said.length >= 4);
    await asker.close();
    expect(said).toEqual([
      "permission: write a.txt\n",
      `warning: could not answer permission request ${a.id}: [not_found] permission_id: permission request ${a.id} not found in this session\n`,
      "permission: write c.txt\n",
      `warning: could not answer permission request ${c.id}: [not_found] permission_id: permission request ${c.id} not found in this session\n`,
    ]);
    expect(asker.busy).toBe(false);
  });

  it("close() drops the requests still queued", async () => {
    const said: string[] = [];
    const asker = permissionAsker(t.client, { yes: true, interactive: false }, (text) => said.push(text));
    asker.asked(unknown("d.txt"));
    asker.asked(unknown("e.txt"));
    await asker.close();
    expect(said.filter((line) => line.startsWith("permission:"))).toEqual(["permission: write d.txt\n"]);
  });
});
