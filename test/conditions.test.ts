import { describe, expect, it } from "vitest";
import {
  compileCondition,
  ConditionError,
  MAX_NESTING,
  MAX_SOURCE,
  MAX_VALUES,
  type ConditionInput,
} from "../gateway/policy/conditions.js";

const input = (args: unknown, over: Partial<ConditionInput> = {}): ConditionInput => ({
  args,
  caller: { id: "helper", kind: "agent", groups: ["ops"] },
  tool: { name: "files/write_file" },
  ...over,
});
const compileError = (source: string): ConditionError => {
  try {
    compileCondition(source);
  } catch (err) {
    expect(err).toBeInstanceOf(ConditionError);
    return err as ConditionError;
  }
  throw new Error(`compiled: ${source.slice(0, 40)}`);
};

describe("conditions: hostile expressions are refused at compile time", () => {
  it("a syntax error says where", () => {
    const e = compileError("args.path.startsWith('notes/') &&\n  args.size >");
    expect(e.line).toBe(2);
    expect(e.column).toBeGreaterThan(1);
  });
  it("an unknown name and an unknown function point at themselves", () => {
    const e = compileError("args.x == 1 && secret == 2");
    expect([e.line, e.column]).toEqual([1, 16]);
    expect(e.message).toContain('unknown name "secret"');
    expect(compileError("system('rm -rf /')").message).toContain('unknown function "system"');
  });
  it("a huge expression, a deeply nested one, and nested comprehensions are refused", () => {
    expect(compileError(`${"1 == 1 && ".repeat(300)}true`).message).toContain(`at most ${MAX_SOURCE}`);
    expect(compileError(`${"(".repeat(1000)}1${")".repeat(1000)}`).message).toMatch(/nests/);
    expect(compileError("[".repeat(900) + "]".repeat(900)).message).toMatch(/nests/);
    expect(compileError("args.l.all(x, args.l.exists(y, args.l.exists(z, x == y && y == z)))").message).toContain("inside another");
    // A loop whose body reads the whole arguments again would cost list × arguments.
    const e = compileError("args.l.exists(x, (args.big + x).contains('zz'))");
    expect(e.message).toContain("not args");
    expect(e.column).toBe(19);
    expect(compileCondition("args.l.exists(x, x.contains('zz')) && args.big.size() > 0")).toBeDefined();
  });
  it("an empty expression is refused", () => {
    expect(compileError("  ").message).toContain("empty");
  });
});

describe("conditions: hostile arguments cannot break evaluation", () => {
  it("a runtime error is reported, not thrown: a missing field, a wrong type, a non-boolean", () => {
    const missing = compileCondition("args.amount > 100").evaluate(input({}));
    expect(missing).toMatchObject({ ok: false });
    expect(compileCondition("args.amount > 100").evaluate(input({ amount: "lots" }))).toMatchObject({ ok: false });
    expect(compileCondition("args.amount").evaluate(input({ amount: 3 }))).toMatchObject({
      ok: false,
      error: expect.stringContaining("not true or false"),
    });
    expect(compileCondition("has(args.amount) && args.amount > 100").evaluate(input({}))).toEqual({ ok: true, value: false });
  });
  it("__proto__ and constructor are ordinary keys, and Object.prototype is untouched", () => {
    const args = JSON.parse('{"__proto__": {"polluted": true, "x": 7}, "constructor": {"prototype": 1}}');
    expect(compileCondition("args['__proto__'].x == 7 && args.constructor.prototype == 1").evaluate(input(args))).toEqual({
      ok: true,
      value: true,
    });
    expect(compileCondition("has(args.polluted)").evaluate(input(args))).toEqual({ ok: true, value: false });
    expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined();
  });
  it("arguments nested thousands deep, or too many values, are an error", () => {
    let deep: unknown = "bottom";
    for (let i = 0; i < 5000; i++) deep = { d: deep };
    expect(compileCondition("has(args.d)").evaluate(input(deep))).toMatchObject({
      ok: false,
      error: expect.stringContaining(`${MAX_NESTING} deep`),
    });
    const wide = { l: Array.from({ length: MAX_VALUES + 5 }, (_, i) => i) };
    expect(compileCondition("size(args.l) > 0").evaluate(input(wide))).toMatchObject({
      ok: false,
      error: expect.stringContaining(`${MAX_VALUES} values`),
    });
  });
  it("a comprehension over the largest allowed list stays fast", () => {
    const l = Array.from({ length: MAX_VALUES - 10 }, (_, i) => `item-${i}`);
    const c = compileCondition("args.l.exists(x, x.contains('rm -rf'))");
    const t0 = performance.now();
    expect(c.evaluate(input({ l }))).toEqual({ ok: true, value: false });
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});

describe("conditions: what a rule can say", () => {
  it("paths, commands, amounts, callers, tools and time", () => {
    const notes = compileCondition("args.path.startsWith('notes/')");
    expect(notes.evaluate(input({ path: "notes/a.md" }))).toEqual({ ok: true, value: true });
    expect(notes.evaluate(input({ path: "src/a.ts" }))).toEqual({ ok: true, value: false });
    expect(compileCondition("args.command.contains('rm -rf')").evaluate(input({ command: "cd / && rm -rf *" }))).toEqual({
      ok: true,
      value: true,
    });
    expect(compileCondition("args.amount > 100").evaluate(input({ amount: 100.5 }))).toEqual({ ok: true, value: true });
    expect(compileCondition("args.amount > 100").evaluate(input({ amount: 100 }))).toEqual({ ok: true, value: false });
    expect(compileCondition("'ops' in caller.groups && caller.kind == 'agent' && caller.id == 'helper'").evaluate(input({}))).toEqual({
      ok: true,
      value: true,
    });
    expect(compileCondition("tool.name == 'files/write_file' && !has(tool.annotations.readOnlyHint)").evaluate(input({}))).toEqual({
      ok: true,
      value: true,
    });
    expect(compileCondition("now > timestamp('2020-01-01T00:00:00Z')").evaluate(input({}))).toEqual({ ok: true, value: true });
  });
});
