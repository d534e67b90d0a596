/**
 * Forms at the terminal (MCP elicitation): a participant asks the person at the terminal
 * to fill in a form. Hostile first: schemas the terminal cannot show are refused before
 * anything is drawn, and what the asker wrote is drawn inert. Then, under tmux against a
 * real gateway process: a bad value is asked again, the answer goes back typed, /decline
 * declines, and a form the asker withdraws leaves the screen.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { parseAnswer, parseForm, type Field } from "../cli/terminal/elicit.js";
import { cleanEnv, MAIN, tempDir, Tmux } from "./fixtures/cli/harness.js";
import { killGateway, responseFor, spawnGateway, TestClient, type GatewayProcess } from "./helpers.js";

const ESC = "\x1b";

describe("forms the terminal accepts", () => {
  it("refuses what it cannot show: nesting, too many fields, long names, huge messages, bad URLs", () => {
    const form = (properties: Record<string, unknown>, message = "m") =>
      parseForm({ message, requestedSchema: { type: "object", properties } });
    expect(form({ address: { type: "object", properties: {} } })).toEqual({
      ok: false,
      error: expect.stringMatching(/a form takes string, number/),
    });
    expect(form(Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`f${i}`, { type: "string" }])))).toEqual({
      ok: false,
      error: "the form has 101 fields; at most 100",
    });
    expect(form({ ["n".repeat(201)]: { type: "string" } })).toEqual({ ok: false, error: "a field name is 201 characters; at most 200" });
    expect(form({}, "x".repeat(64 * 1024 + 1))).toEqual({ ok: false, error: expect.stringMatching(/params.message is 65537 characters/) });
    expect(form({ tags: { type: "array", items: { type: "object" } } })).toEqual({
      ok: false,
      error: expect.stringMatching(/a list must be of enum strings/),
    });
    expect(parseForm({ mode: "url", message: "go", url: "javascript:alert(1)" })).toEqual({
      ok: false,
      error: "params.url must be an http(s) URL",
    });
    expect(parseForm(null)).toEqual({ ok: false, error: "params must be an object" });
  });

  it("types and checks each answer against its field", () => {
    const parsed = parseForm({
      message: "m",
      requestedSchema: {
        type: "object",
        required: ["age"],
        properties: {
          age: { type: "integer", minimum: 1, maximum: 120 },
          ok: { type: "boolean", default: false },
          mail: { type: "string", format: "email" },
          hero: {
            type: "string",
            oneOf: [
              { const: "h1", title: "Superman" },
              { const: "h2", title: "Wonder Woman" },
            ],
          },
          tools: { type: "array", maxItems: 2, items: { type: "string", enum: ["saw", "drill", "awl"] } },
        },
      },
    });
    if (!parsed.ok || parsed.value.mode !== "form") throw new Error("expected a form");
    const [age, ok, mail, hero, tools] = parsed.value.fields as [Field, Field, Field, Field, Field];
    expect(parseAnswer(age, "")).toEqual({ ok: false, error: "this field is required" });
    expect(parseAnswer(age, "3.5")).toEqual({ ok: false, error: "expected a whole number" });
    expect(parseAnswer(age, "121")).toEqual({ ok: false, error: "at most 120" });
    expect(parseAnswer(age, "42")).toEqual({ ok: true, value: 42 });
    expect(parseAnswer(ok, "")).toEqual({ ok: true, value: false });
    expect(parseAnswer(ok, "yes")).toEqual({ ok: true, value: true });
    expect(parseAnswer(mail, "not-mail")).toEqual({ ok: false, error: "expected an e-mail address" });
    expect(parseAnswer(mail, "")).toEqual({ ok: true, value: undefined, skip: true });
    expect(parseAnswer(hero, "2")).toEqual({ ok: true, value: "h2" });
    expect(parseAnswer(hero, "superman")).toEqual({ ok: true, value: "h1" });
    expect(parseAnswer(tools, "1, 3")).toEqual({ ok: true, value: ["saw", "awl"] });
    expect(parseAnswer(tools, "1,2,3")).toEqual({ ok: false, error: "choose at most 2" });
  });
});

const SPACE = `
space: {id: forms}
participants:
  me: {kind: human, token: me-token-123456}
  asker: {kind: service, token: asker-token-1234, capabilities: [{kind: "mcp/request", payload: {method: "elicitation/create"}}, {kind: "mcp/request", payload: {method: "notifications/*"}}]}
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

const ask = (id: string, params: Record<string, unknown>) => ({
  id,
  kind: "mcp/request",
  to: ["me"],
  payload: { jsonrpc: "2.0", id, method: "elicitation/create", params },
});

describe("the interactive terminal asked to fill in a form", () => {
  it("refuses a schema it cannot show, draws the asker's text inert, re-asks a bad value, and answers typed", {
    timeout: 40_000,
  }, async () => {
    const dir = tempDir();
    const file = join(dir, "space.yaml");
    writeFileSync(file, SPACE);
    gateway = await spawnGateway(file);
    const tokenFile = join(dir, "me.token");
    writeFileSync(tokenFile, "me-token-123456\n", { mode: 0o600 });
    const asker = await TestClient.join(gateway, "forms", "asker-token-1234");
    clients.push(asker);
    pane = new Tmux(
      [process.execPath, MAIN, "connect", "--gateway", `ws://127.0.0.1:${gateway.port}`, "--space", "forms", "--token-file", tokenFile],
      { env: cleanEnv({}), width: 100, height: 40 },
    );
    await pane.waitFor(/me>/);

    asker.send(ask("nested", { message: "NESTED-FORM", requestedSchema: { type: "object", properties: { a: { type: "object" } } } }));
    const refused = await responseFor(asker, "nested");
    expect(refused.payload.error.code).toBe(-32602);
    // The request scrolls by like any envelope, but no form opens for it.
    expect(pane.capture()).not.toContain("asks you");

    asker.send(
      ask("f1", {
        message: `Hello${ESC}[2J${ESC}]0;pwned\x07 there`,
        requestedSchema: {
          type: "object",
          required: ["name", "age"],
          properties: {
            name: { type: "string", title: `Your name${ESC}[8m` },
            age: { type: "integer", minimum: 1, maximum: 120 },
            ok: { type: "boolean", description: "Agree?" },
          },
        },
      }),
    );
    await pane.waitFor(/asker asks you/);
    const screen = pane.capture();
    expect(screen).toContain("Hello");
    expect(screen).toContain("there");
    expect(screen).not.toContain("pwned\x07");
    await pane.waitFor(/Your name\*/);
    pane.type("Ada");
    pane.keys("Enter");
    await pane.waitFor(/age\* \(integer\)>/);
    pane.type("many");
    pane.keys("Enter");
    await pane.waitFor(/! expected a number/);
    pane.type("36");
    pane.keys("Enter");
    await pane.waitFor(/ok \(y\/n\)>/);
    pane.type("y");
    pane.keys("Enter");
    const answered = await responseFor(asker, "f1");
    expect(answered.payload.result).toEqual({ action: "accept", content: { name: "Ada", age: 36, ok: true } });

    asker.send(ask("f2", { message: "Second form", requestedSchema: { type: "object", properties: { x: { type: "string" } } } }));
    await pane.waitFor(/Second form/);
    pane.type("/decline");
    pane.keys("Enter");
    expect((await responseFor(asker, "f2")).payload.result).toEqual({ action: "decline" });

    asker.send(ask("f3", { message: "Third form", requestedSchema: { type: "object", properties: { x: { type: "string" } } } }));
    await pane.waitFor(/Third form/);
    asker.send({
      kind: "mcp/request",
      to: ["me"],
      correlation_id: ["f3"],
      payload: { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "f3", reason: "not needed" } },
    });
    await pane.waitFor(/no longer waits for the form/);
    // Back to chat: what is typed now is a message, not an answer.
    pane.type("hello space");
    pane.keys("Enter");
    await pane.waitFor(/me: hello space/);
  });
});
