/**
 * Mcp-Param-* headers against a tool's x-mcp-header properties (participants/mcp-server/modern/param-headers.ts):
 * hostile shapes first — a schema nested past the bound, marks where only `properties` may
 * carry them, bad header names, non-canonical Base64, a header left out, a value changed.
 */
import { describe, expect, it } from "vitest";
import { declarations, paramMismatch } from "../participants/mcp-server/modern/param-headers.js";

const headers = (h: Record<string, string>) => (name: string) => h[name];

describe("Mcp-Param-* headers: hostile first", () => {
  it("marks only what properties reach, with a token name, within the nesting bound", () => {
    let deep: Record<string, unknown> = { type: "string", "x-mcp-header": "Deep" };
    for (let i = 0; i < 40; i++) deep = { type: "object", properties: { n: deep } };
    expect(declarations(deep)).toEqual([]);
    const schema = {
      type: "object",
      "x-mcp-header": "Root",
      properties: {
        ok: { type: "string", "x-mcp-header": "Region" },
        bad: { type: "string", "x-mcp-header": "Has Space\r\n" },
        list: { type: "array", items: { type: "string", "x-mcp-header": "Item" } },
        nested: { type: "object", properties: { id: { type: "integer", "x-mcp-header": "Id" } } },
      },
    };
    expect(declarations(schema).map((d) => d.header)).toEqual(["Region", "Id"]);
    expect(declarations(null)).toEqual([]);
    expect(declarations("x")).toEqual([]);
  });

  it("refuses a missing header, invalid Base64, a changed value; accepts literal, Base64 and numeric equality", () => {
    const d = declarations({
      type: "object",
      properties: { region: { type: "string", "x-mcp-header": "Region" }, n: { type: "number", "x-mcp-header": "N" } },
    });
    expect(paramMismatch(d, { region: "Hello" }, headers({}))).toMatch(/Mcp-Param-Region header is absent/);
    expect(paramMismatch(d, { region: "Hello" }, headers({ "mcp-param-region": "=?base64?SGVsbG8?=" }))).toMatch(/invalid Base64/);
    expect(paramMismatch(d, { region: "Hello" }, headers({ "mcp-param-region": "=?base64?SGVs!!!bG8=?=" }))).toMatch(/invalid Base64/);
    expect(paramMismatch(d, { region: "Hello" }, headers({ "mcp-param-region": "Hellp" }))).toMatch(/does not match region/);
    expect(paramMismatch(d, { region: "Hello" }, headers({ "mcp-param-region": "Hello" }))).toBeUndefined();
    expect(paramMismatch(d, { region: "Hello" }, headers({ "mcp-param-region": "=?base64?SGVsbG8=?=" }))).toBeUndefined();
    // Without the sentinel's both ends the value is literal.
    expect(paramMismatch(d, { region: "=?base64?SGVsbG8=" }, headers({ "mcp-param-region": "=?base64?SGVsbG8=" }))).toBeUndefined();
    expect(paramMismatch(d, { n: 42 }, headers({ "mcp-param-n": "42.0" }))).toBeUndefined();
    expect(paramMismatch(d, { n: 42 }, headers({ "mcp-param-n": "43" }))).toMatch(/does not match n/);
    // A value the body does not carry (or not a primitive) expects no header.
    expect(paramMismatch(d, { region: null, n: { deep: 1 } }, headers({}))).toBeUndefined();
    expect(paramMismatch(d, "not an object", headers({}))).toBeUndefined();
  });
});
