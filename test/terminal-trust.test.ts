/**
 * A terminal you can trust, under tmux against a real gateway: a hostile participant
 * sends escape sequences in chat, tool names and arguments, and a proposal whose
 * arguments are far longer than the screen; the human must see all of it, and nothing
 * they send may act on the terminal.
 */
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { sanitize, wrapJson } from "../cli/terminal/format.js";
import { schemaProblem } from "../cli/terminal/validate.js";
import { cleanEnv, MAIN, tempDir, Tmux } from "./fixtures/cli/harness.js";
import { killGateway, spawnGateway, TestClient, toolOwner, type GatewayProcess } from "./helpers.js";

const ESC = "\x1b";
const HOSTILE = [
  `${ESC}]52;c;${Buffer.from("rm -rf ~").toString("base64")}\x07`, // OSC 52: write the clipboard
  `${ESC}[2J${ESC}[H`, // erase the screen, cursor home
  `${ESC}[8mHIDDEN${ESC}[0m`, // conceal
  `${ESC}]0;pwned title\x07`, // window title
  "\x9b2J", // C1 CSI
  "\u202eevil\u202c", // bidi override
].join("");

describe("sanitize and wrapJson", () => {
  it("removes every escape sequence and shows other controls, keeping the text", () => {
    const out = sanitize(`before ${HOSTILE} after`);
    expect(out).not.toMatch(/[\x1b\x07\x9b\u202e]/);
    expect(out).toContain("before");
    expect(out).toContain("after");
    expect(out).toContain("HIDDEN"); // shown, not concealed
    expect(out).not.toContain("52;c");
    expect(sanitize("a\x00b\x7fc")).toBe("a�b�c");
  });

  it("wraps long arguments without losing a character, and counts what is past the limit", () => {
    const value = { command: `echo start && ${"x".repeat(500)} && rm -rf /tmp/the-tail` };
    const all = wrapJson(value, 60);
    expect(all.more).toBe(0);
    expect(all.lines.join("").replace(/\s*↪ /g, "")).toContain("rm -rf /tmp/the-tail");
    expect(Math.max(...all.lines.map((l) => l.length))).toBeLessThanOrEqual(60);
    const some = wrapJson(value, 60, 3);
    expect(some.lines).toHaveLength(3);
    expect(some.more).toBe(all.lines.length - 3);
  });

  it("checks edited arguments against the tool's input schema", () => {
    const schema = {
      type: "object",
      properties: { path: { type: "string" }, mode: { enum: ["a", "w"] } },
      required: ["path"],
      additionalProperties: false,
    };
    expect(schemaProblem(schema, { path: "x" })).toBeUndefined();
    expect(schemaProblem(schema, {})).toBe("arguments.path is required");
    expect(schemaProblem(schema, { path: 3 })).toBe("arguments.path must be a string, not number 3");
    expect(schemaProblem(schema, { path: "x", mode: "r" })).toContain("one of");
    expect(schemaProblem(schema, { path: "x", extra: 1 })).toBe("arguments.extra is not a parameter of this tool");
  });
});

const SPACE = `
space: {id: trust}
participants:
  me: {kind: human, token: me-token-123456}
  bad: {kind: agent, token: bad-token-123456}
  fs: {kind: mcp, token: fs-token-123456}
`;

let gateway: GatewayProcess | undefined;
let pane: Tmux | undefined;
const clients: TestClient[] = [];
afterEach(async () => {
  pane?.kill();
  pane = undefined;
  for (const c of clients.splice(0)) c.ws.terminate();
  if (gateway) await killGateway(gateway);
  gateway = undefined;
});

describe("the interactive terminal against a hostile participant", () => {
  it("draws hostile text inert, and shows long arguments whole", { timeout: 40_000 }, async () => {
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    gateway = await spawnGateway(file);
    const tokenFile = join(dir, "me.token");
    writeFileSync(tokenFile, "me-token-123456\n", { mode: 0o600 });
    clients.push(
      await toolOwner(gateway, "trust", "fs-token-123456", [
        { name: `write${HOSTILE}`, inputSchema: { type: "object" } },
        { name: "run", inputSchema: { type: "object" } },
      ]),
    );
    const bad = await TestClient.join(gateway, "trust", "bad-token-123456");
    clients.push(bad);
    pane = new Tmux(
      [process.execPath, MAIN, "connect", "--gateway", `ws://127.0.0.1:${gateway.port}`, "--space", "trust", "--token-file", tokenFile],
      { env: cleanEnv({ EDITOR: "true" }), width: 100, height: 40 },
    );
    await pane.waitFor(/me>/);

    bad.send({ kind: "chat", payload: { text: `line one ${HOSTILE} still here` } });
    await pane.waitFor(/still here/);
    const tail = "THE-DANGEROUS-TAIL";
    bad.send({
      id: "long",
      kind: "mcp/proposal",
      to: ["fs"],
      payload: { method: "tools/call", params: { name: "run", arguments: { command: `echo ${"y".repeat(3000)} ${tail}`, note: HOSTILE } } },
    });
    await pane.waitFor(/1 proposal waiting/);
    let screen = pane.capture();
    // Earlier lines are still there: nothing erased the screen or moved the cursor.
    expect(screen).toContain("line one");
    expect(screen).toContain("HIDDEN");
    expect(screen).not.toContain("52;c");
    // The arguments are longer than the view: a marker says so, and v shows the tail.
    expect(screen).toMatch(/more lines? of arguments — v shows them all/);
    pane.keys("v");
    await pane.waitFor(/end of arguments/);
    screen = pane.capture();
    expect(screen.replace(/\s*↪ /g, "").replace(/\n/g, "")).toContain(tail);
    // Nothing reached tmux's clipboard buffers or the window title.
    const buffers = execFileSync("tmux", ["-L", pane.socket, "list-buffers"], { encoding: "utf8" });
    expect(buffers).toBe("");
    const title = execFileSync("tmux", ["-L", pane.socket, "display-message", "-p", "#{pane_title}"], { encoding: "utf8" });
    expect(title).not.toContain("pwned");

    // An editor that quits without saving (here `true`; vi's :q!) cancels: nothing is approved.
    pane.keys("e");
    await pane.waitFor(/the arguments were not changed; nothing approved/);
    expect(pane.capture()).toContain("1 proposal waiting");
    await new Promise((r) => setTimeout(r, 200));
    expect(bad.received.some((e) => e.kind === "mcp/approve")).toBe(false);

    // Always: a grant (after saying what it allows and a typed yes), which /grants lists and /revoke takes back.
    pane.keys("A");
    await pane.waitFor(/approve always\? it also grants[\s\S]*participant: bad/);
    expect(bad.received.some((e) => e.kind === "mcp/approve")).toBe(false);
    pane.type("yes");
    pane.keys("Enter");
    await bad.next((e) => e.kind === "mcp/approve");
    pane.type("/grants");
    pane.keys("Enter");
    const [, id] = await pane.waitFor(/\[([0-9a-f-]{8})\] me → bad: /);
    pane.type(`/revoke ${id}`);
    pane.keys("Enter");
    await bad.next((e) => e.kind === "capability/revoke" && e.payload.grant_id.startsWith(id!));
    pane.type("/grants");
    pane.keys("Enter");
    await pane.waitFor(/no grants/);
  });
});
