/**
 * Conditions on a call: a CEL expression (https://cel.dev, evaluated by @bufbuild/cel) over
 * the call's `args`, its `caller` (id, kind, groups), its `tool` (name, annotations) and
 * `now`, compiled once when the rules are loaded and evaluated at each decision.
 *
 * CEL has no loops of its own and no recursion, so an expression's cost is bounded by its
 * size and the size of what it is given. Both are bounded here: an expression of at most
 * MAX_SOURCE characters and MAX_DEPTH levels, with no comprehension (`all`, `exists`,
 * `map`, `filter`) inside another and none whose body reads `args` again (only its own
 * item), so a loop's cost is bounded by what it loops over, over values converted from the call with at most
 * MAX_VALUES values and MAX_NESTING levels. A value past a bound is an evaluation error,
 * not a silent truncation: the caller of `evaluate` decides what an error means (rules.ts
 * fails closed: a `deny` or `ask` whose condition fails matches, an `allow` does not).
 *
 * Values are converted by hand, never handed over as objects: every JSON mapping becomes a
 * Map (so `__proto__` or `constructor` are ordinary keys), integers and fractions both
 * become doubles (so `args.amount > 100` reads as written), and nothing else gets in.
 *
 * policy/rules.ts uses this for `{tool, when}` rules; grants with conditions may use it too.
 */
import { createRequire } from "node:module";
import type { CelEnv, CelInput } from "@bufbuild/cel";
import { isClean, isPlainPath } from "./content/signals.js";

/** @bufbuild/cel, loaded (synchronously, from node_modules) when the first condition is compiled: a space without one never loads it. */
interface Cel {
  celEnv: typeof import("@bufbuild/cel").celEnv;
  celFunc: typeof import("@bufbuild/cel").celFunc;
  CelScalar: typeof import("@bufbuild/cel").CelScalar;
  isCelList: typeof import("@bufbuild/cel").isCelList;
  isCelMap: typeof import("@bufbuild/cel").isCelMap;
  isCelError: typeof import("@bufbuild/cel").isCelError;
  parse: typeof import("@bufbuild/cel").parse;
  plan: typeof import("@bufbuild/cel").plan;
  strings: typeof import("@bufbuild/cel/ext").strings;
  timestampFromDate: typeof import("@bufbuild/protobuf/wkt").timestampFromDate;
}

let loadedCel: Cel | undefined;

function cel(): Cel {
  if (!loadedCel) {
    // Not `import`: a bundle would load CEL (and protobuf, and RE2) with the rest of the gateway.
    const load = createRequire(import.meta.url);
    const main = load("@bufbuild/cel") as typeof import("@bufbuild/cel");
    loadedCel = {
      celEnv: main.celEnv,
      celFunc: main.celFunc,
      CelScalar: main.CelScalar,
      isCelList: main.isCelList,
      isCelMap: main.isCelMap,
      isCelError: main.isCelError,
      parse: main.parse,
      plan: main.plan,
      strings: (load("@bufbuild/cel/ext") as typeof import("@bufbuild/cel/ext")).strings,
      timestampFromDate: (load("@bufbuild/protobuf/wkt") as typeof import("@bufbuild/protobuf/wkt")).timestampFromDate,
    };
  }
  return loadedCel;
}

/** The longest expression accepted, in characters. */
export const MAX_SOURCE = 2048;
/** How deep an expression's syntax tree may nest. */
export const MAX_DEPTH = 48;
/** How many values (scalars, items, entries) of a call a condition may be given. */
export const MAX_VALUES = 20_000;
/** How deeply nested a call's arguments may be for a condition to look at them. */
export const MAX_NESTING = 64;

const VARIABLES = ["args", "caller", "tool", "now"] as const;

/** What a condition is evaluated over. */
export interface ConditionInput {
  /** The call's arguments (a tools/call's `arguments`); undefined reads as an empty mapping. */
  args: unknown;
  /** The caller, or a function giving it (looked up only when the expression reads `caller`). */
  caller: Caller | (() => Caller);
  tool: { name: string; annotations?: Record<string, unknown> | undefined };
  now?: Date;
}

export interface Caller {
  id: string;
  kind: string;
  groups: readonly string[];
}

/** The outcome of one evaluation: true, false, or why it could not say. */
export type ConditionResult = { ok: true; value: boolean } | { ok: false; error: string };

export interface Condition {
  readonly source: string;
  evaluate(input: ConditionInput): ConditionResult;
}

/** A condition that does not compile: where in the expression (1-based line and column) and why. */
export class ConditionError extends Error {
  override readonly name = "ConditionError";
  constructor(
    message: string,
    readonly line: number,
    readonly column: number,
  ) {
    super(message);
  }
}

/** A CEL value back as plain JSON-like data, for the content functions. */
function fromCel(v: unknown): unknown {
  const { isCelList, isCelMap } = cel();
  if (isCelMap(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of v) out[String(k)] = fromCel(x);
    return out;
  }
  if (isCelList(v)) return [...v].map(fromCel);
  return typeof v === "bigint" ? Number(v) : v;
}

/**
 * The gateway's own functions, beside CEL's standard ones and the strings extension:
 *   clean(value)       no signal at any depth (policy/content.ts: no secret, shell syntax or
 *                      download-and-run, URL, secret-like, hidden or system path, traversal,
 *                      control characters, nothing past 8 KiB): a learned rule's free text;
 *   plain_path(string) a path with none of those and no `..`, hidden part, `~` or backslash.
 */
function ownFuncs() {
  const { celFunc, CelScalar } = cel();
  return [
    celFunc("clean", [CelScalar.DYN], CelScalar.BOOL, (v) => isClean(fromCel(v))),
    celFunc("plain_path", [CelScalar.STRING], CelScalar.BOOL, (p) => isPlainPath(p)),
  ];
}

let env: CelEnv | undefined;
function theEnv(): CelEnv {
  env ??= cel().celEnv({ funcs: [...cel().strings, ...ownFuncs()] });
  return env;
}

// The parts of the parsed tree this reads (cel.expr.Expr from @bufbuild/cel-spec).
interface Node {
  id: bigint;
  // biome-ignore lint/suspicious/noExplicitAny: the CEL tree value differs per exprKind case; the reader switches on case
  exprKind: { case: string | undefined; value?: any };
}

/** Conditions compiled lately, by source: a compiled condition holds no state, so one serves every rule that spells it. */
const compiled = new Map<string, Condition>();
const COMPILED_MAX = 512;

/** Compiles `source`, or throws a ConditionError saying where it is wrong. */
export function compileCondition(source: string): Condition {
  const known = compiled.get(source);
  if (known) return known;
  const made = compileFresh(source);
  if (compiled.size >= COMPILED_MAX) compiled.delete(compiled.keys().next().value!);
  compiled.set(source, made);
  return made;
}

function compileFresh(source: string): Condition {
  if (source.length > MAX_SOURCE) throw new ConditionError(`the expression is ${source.length} characters; at most ${MAX_SOURCE}`, 1, 1);
  if (source.trim() === "") throw new ConditionError("the expression is empty", 1, 1);
  let parsed: ReturnType<Cel["parse"]>;
  try {
    parsed = cel().parse(source);
  } catch (err) {
    const e = err as { rawMessage?: string; message?: string; location?: { start?: { line: number; column: number } } };
    // Deep nesting overflows the parser's stack before it can say more.
    if (err instanceof RangeError) throw new ConditionError("the expression nests too deeply", 1, 1);
    const start = e.location?.start;
    throw new ConditionError(e.rawMessage ?? e.message ?? String(err), start?.line ?? 1, start?.column ?? 1);
  }
  const positions = parsed.sourceInfo?.positions ?? {};
  const where = (id: bigint): { line: number; column: number } => position(source, positions[String(id)] ?? 0);
  const funcs = theEnv().funcs;
  // Only the variables the expression names are built at each evaluation.
  const used = new Set<string>();
  // Checked here since the library has no type checker: names it would only find unbound at run time.
  const walk = (node: Node | undefined, depth: number, scope: ReadonlySet<string>, inLoop: boolean): void => {
    if (!node) return;
    if (depth > MAX_DEPTH) {
      const p = where(node.id);
      throw new ConditionError(`the expression nests more than ${MAX_DEPTH} deep`, p.line, p.column);
    }
    const { case: kind, value } = node.exprKind;
    const next = (n: Node | undefined, s = scope, loop = inLoop) => walk(n, depth + 1, s, loop);
    switch (kind) {
      case "identExpr": {
        const name = value.name as string;
        if (scope.has(name)) return;
        if (!(VARIABLES as readonly string[]).includes(name)) {
          const p = where(node.id);
          throw new ConditionError(`unknown name ${JSON.stringify(name)}; a condition may use ${VARIABLES.join(", ")}`, p.line, p.column);
        }
        // Each turn of a loop may look at its own item, not at the whole arguments again:
        // otherwise (args.big + x) in a loop over args.list costs list × big.
        if (inLoop && name === "args") {
          const p = where(node.id);
          throw new ConditionError(
            "inside all, exists, map or filter, read the item through the loop's variable, not args",
            p.line,
            p.column,
          );
        }
        used.add(name);
        return;
      }
      case "selectExpr":
        return next(value.operand);
      case "callExpr": {
        const fn = value.function as string;
        // Operators (`_&&_`, `@in`, `!_`) are the planner's own; only named functions can be unbound.
        if (/^[A-Za-z]/.test(fn) && !funcs.find(fn)) {
          const p = where(node.id);
          throw new ConditionError(`unknown function ${JSON.stringify(fn)}`, p.line, p.column);
        }
        next(value.target);
        for (const a of value.args as Node[]) next(a);
        return;
      }
      case "listExpr":
        for (const e of value.elements as Node[]) next(e);
        return;
      case "structExpr":
        for (const e of value.entries as { mapKey?: Node; value?: Node }[]) {
          next(e.mapKey);
          next(e.value);
        }
        return;
      case "comprehensionExpr": {
        if (inLoop) {
          const p = where(node.id);
          throw new ConditionError(
            "a comprehension (all, exists, map, filter) inside another is not allowed: its cost would grow with the square of the arguments",
            p.line,
            p.column,
          );
        }
        next(value.iterRange);
        const inner = new Set([
          ...scope,
          value.iterVar as string,
          value.accuVar as string,
          ...(value.iterVar2 ? [value.iterVar2 as string] : []),
        ]);
        next(value.accuInit, inner);
        next(value.loopCondition, inner, true);
        next(value.loopStep, inner, true);
        next(value.result, inner);
        return;
      }
      default:
        return;
    }
  };
  walk(parsed.expr as unknown as Node, 0, new Set(), false);
  let run: (ctx: Record<string, CelInput>) => unknown;
  try {
    run = cel().plan(theEnv(), parsed) as unknown as typeof run;
  } catch (err) {
    throw new ConditionError((err as Error).message, 1, 1);
  }
  return {
    source,
    evaluate(input: ConditionInput): ConditionResult {
      const budget = { left: MAX_VALUES };
      const bindings: Record<string, CelInput> = {};
      try {
        if (used.has("args")) bindings["args"] = input.args === undefined ? new Map() : toCel(input.args, 0, budget);
        if (used.has("caller")) {
          const c = typeof input.caller === "function" ? input.caller() : input.caller;
          bindings["caller"] = new Map<string, CelInput>([
            ["id", c.id],
            ["kind", c.kind],
            ["groups", c.groups.filter((g) => typeof g === "string")],
          ]);
        }
        if (used.has("tool")) {
          bindings["tool"] = new Map<string, CelInput>([
            ["name", input.tool.name],
            ["annotations", input.tool.annotations === undefined ? new Map() : toCel(input.tool.annotations, 0, budget)],
          ]);
        }
        if (used.has("now")) bindings["now"] = cel().timestampFromDate(input.now ?? new Date());
      } catch (err) {
        return { ok: false, error: (err as Error).message };
      }
      let out: unknown;
      try {
        out = run(bindings);
      } catch (err) {
        // The library returns its errors; anything thrown (a stack overflow) is an error too.
        return { ok: false, error: (err as Error).message ?? String(err) };
      }
      if (cel().isCelError(out)) return { ok: false, error: out.message };
      if (typeof out !== "boolean") return { ok: false, error: `the expression gave ${describe(out)}, not true or false` };
      return { ok: true, value: out };
    },
  };
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (typeof v === "bigint" || typeof v === "number") return "a number";
  if (typeof v === "string") return "a string";
  return "a value of another type";
}

/** 1-based line and column of `offset` (in UTF-16 units) in `text`. */
function position(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let start = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text[i] === "\n") {
      line++;
      start = i + 1;
    }
  }
  return { line, column: offset - start + 1 };
}

class Bound extends Error {}

/** A JSON value as a CEL value, within the budget; throws past a bound. */
function toCel(value: unknown, depth: number, budget: { left: number }): CelInput {
  if (--budget.left < 0) throw new Bound(`the arguments hold more than ${MAX_VALUES} values`);
  if (depth > MAX_NESTING) throw new Bound(`the arguments nest more than ${MAX_NESTING} deep`);
  switch (typeof value) {
    case "string":
    case "boolean":
      return value;
    case "number":
      return Number.isFinite(value) ? value : null;
    case "object": {
      if (value === null) return null;
      if (Array.isArray(value)) {
        const out: CelInput[] = [];
        for (const item of value) out.push(toCel(item, depth + 1, budget));
        return out;
      }
      const out = new Map<string, CelInput>();
      for (const key of Object.keys(value)) out.set(key, toCel((value as Record<string, unknown>)[key], depth + 1, budget));
      return out;
    }
    default:
      // undefined, functions, bigints: not JSON, so not arguments.
      return null;
  }
}
