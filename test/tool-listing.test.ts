/**
 * `tools/list` of system:gateway is served from the catalogue serialised once per change
 * (gateway/calls/tool-listing.ts). Its pages must be exactly what building each page
 * from the entries gives (wire/paging.ts `takePage` over the cleaned entries): the same
 * tools, cleaned the same, cut at the same byte budgets, whatever the texts hold —
 * hidden and bidi characters, multi-byte text, huge descriptions.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { readable, ToolListing } from "../gateway/calls/tool-listing.js";
import type { Decision } from "../gateway/policy/rules.js";
import type { ToolEntry } from "../gateway/tools/registry.js";
import { jsonBytes, takePage } from "../gateway/wire/paging.js";

const json = (page: { parts: Buffer[] }) => `[${Buffer.concat(page.parts).toString("utf8")}]`;

const text = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.constantFrom("\u202Eevil\u202C", "zero\u200Bwidth", "tag\u{E0041}\u{E0042}", "é😀\u0000\r\n", "x".repeat(5000)),
);
const entry = fc.record(
  {
    tool: fc.stringMatching(/^[a-z_]{1,12}$/),
    participant: fc.constantFrom("fs", "mail", "web"),
    title: text,
    description: text,
    inputSchema: fc.record({ type: fc.constant("object"), properties: fc.dictionary(fc.string(), fc.record({ description: text })) }),
    annotations: fc.dictionary(fc.string(), fc.oneof(text, fc.boolean())),
    _meta: fc.dictionary(fc.string(), text),
  },
  { requiredKeys: ["tool", "participant", "inputSchema"] },
);

describe("tools/list pages from the catalogue serialised once", () => {
  it("are the pages built entry by entry: same tools, same texts cleaned, same cuts", () => {
    fc.assert(
      fc.property(
        fc.array(entry, { maxLength: 40 }),
        fc.nat(45),
        fc.integer({ min: 1, max: 40_000 }),
        fc.constantFrom<Decision>("direct", "proposal", "denied"),
        (raw, start, budget, decision) => {
          const list: ToolEntry[] = raw.map((e) => ({ ...e, name: `${e.participant}/${e.tool}` }) as ToolEntry);
          const policy = (t: { tool: string }) => (t.tool.length % 2 ? decision : "direct");
          const want = takePage(
            list.map((t) => readable({ ...t, policy: policy(t) })),
            start,
            budget,
            jsonBytes,
          );
          const listing = new ToolListing();
          for (const round of [1, 2]) {
            // The second time from what was kept.
            const got = listing.page(list, start, budget, policy);
            expect(JSON.parse(json(got)), `round ${round}`).toEqual(JSON.parse(JSON.stringify(want.items)));
            expect(got.next).toBe(want.next);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it("no hidden character reaches a reader, and a new catalogue is listed anew", () => {
    const listing = new ToolListing();
    const one: ToolEntry[] = [
      { name: "fs/a", participant: "fs", tool: "a", description: "read\u202E files\u200B", inputSchema: { type: "object" } },
    ];
    const first = listing.page(one, 0, 100_000, () => "direct");
    expect(json(first)).not.toMatch(/[\u202E\u200B]/);
    expect(JSON.parse(json(first))[0]).toMatchObject({ name: "fs/a", description: "read files", policy: "direct" });
    const two: ToolEntry[] = [...one, { name: "fs/b", participant: "fs", tool: "b", inputSchema: { type: "object" } }];
    expect(JSON.parse(json(listing.page(two, 0, 100_000, () => "denied"))).map((t: { name: string }) => t.name)).toEqual(["fs/a", "fs/b"]);
  });
});
