/**
 * secretlint's recommended rules (`@secretlint/secretlint-rule-preset-recommend`, MIT, kept up
 * by its maintainers as providers change their formats), asked of the windows secrets.ts picks
 * around key-like runs. Each rule is driven directly through secretlint's rule interface
 * (`create(context).file(source)`), which is synchronous, so the decision point stays
 * synchronous and pays no engine around it.
 *
 * Cost: asking a rule costs about the same for 100 characters as for 1,000 (each rule sets
 * itself up per text), so the windows of one string are read together, and a rule is asked only
 * of text holding what its patterns need (`SECRETLINT_NEEDS`). The preset (about 220 KB) is
 * loaded the first time it is needed: a gateway whose spaces read no secrets never loads it.
 * It is an ES module, loaded synchronously with `require`: Node 20.19 or newer (package.json
 * `engines`), where `require` loads ES modules without a flag.
 */
import { createRequire } from "node:module";
import type { SecretLintRuleContext, SecretLintSourceCode } from "@secretlint/types";

/** What a rule found: what it is in words, where in the string read, and in which window. */
export interface RuleHit {
  what: string;
  start: number;
  end: number;
  window: number;
}

/** A rule's id as words a person reads: `@secretlint/secretlint-rule-github` → "a github credential (secretlint)". */
function ruleWords(id: string): string {
  const name = id.replace(/^@secretlint\/secretlint-rule-/, "");
  return `a ${name} credential (secretlint)`;
}

interface Rule {
  what: string;
  file: (source: SecretLintSourceCode) => void | Promise<void>;
  /** What a text must hold for the rule to find anything in it (undefined: always asked). */
  needs: readonly RegExp[] | undefined;
}

/**
 * What each rule of the preset needs to find anything: the literal its patterns start with (or
 * the keyword they require), read off each rule's patterns (version 12), kept wider than the
 * rules are (case ignored where that costs nothing). A text holding none is not given to the
 * rule: asking the 24 rules costs about 60 µs per text, whatever its length, and ordinary text
 * holds none of them. A rule not listed here (a new one) is always asked; test/guard-content
 * checks that every rule of the installed preset is listed.
 */
export const SECRETLINT_NEEDS: Readonly<Record<string, readonly RegExp[]>> = {
  "@secretlint/secretlint-rule-aws": [
    /A3T[A-Z0-9]|AKIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ASIA/,
    /secret_?access_?key/i,
    /account_?(?:id)?["']?\s*[:=]/i,
  ],
  // Reads only `.json` and `.p12` files (never a text here); listed for its key all the same.
  "@secretlint/secretlint-rule-gcp": [/private_key/i],
  "@secretlint/secretlint-rule-privatekey": [/PRIVATE KEY/i],
  "@secretlint/secretlint-rule-npm": [/_authToken=|npm_|x-oauth-basic/i],
  "@secretlint/secretlint-rule-basicauth": [/:\/\/\S*@/],
  "@secretlint/secretlint-rule-slack": [/xox[a-z]-|xapp-|hooks\.slack\.com/i],
  "@secretlint/secretlint-rule-sendgrid": [/SG\./i],
  "@secretlint/secretlint-rule-shopify": [/shp(?:pa|ca|at|ss)_/i],
  "@secretlint/secretlint-rule-github": [/gh[a-z]_|github_pat_/i],
  "@secretlint/secretlint-rule-gitlab": [/glpat-/i],
  "@secretlint/secretlint-rule-grafana": [/glc_|glsa_/i],
  "@secretlint/secretlint-rule-openai": [/sk-/i],
  "@secretlint/secretlint-rule-anthropic": [/sk-ant-/i],
  "@secretlint/secretlint-rule-groq": [/gsk_/i],
  "@secretlint/secretlint-rule-huggingface": [/hf_/i],
  "@secretlint/secretlint-rule-linear": [/lin_api_/i],
  "@secretlint/secretlint-rule-notion": [/ntn_/i],
  "@secretlint/secretlint-rule-1password": [/ops_/i],
  "@secretlint/secretlint-rule-database-connection-string": [/mongodb|mysql|postgres/i],
  "@secretlint/secretlint-rule-hashicorp-vault": [/hv[a-z]\./i],
  "@secretlint/secretlint-rule-vercel": [/vc[a-z]_/i],
  "@secretlint/secretlint-rule-databricks": [/dapi/i],
  "@secretlint/secretlint-rule-docker": [/dckr_pat_/i],
  "@secretlint/secretlint-rule-figma": [/figd_/i],
};

/**
 * Rules of the preset not asked: the comment filter reports nothing (it only hides others'
 * reports behind `secretlint-disable` comments, which an agent could use to hide a key).
 */
const NOT_ASKED = new Set(["@secretlint/secretlint-rule-filter-comments"]);

/** Where secretlint's rules report, while one batch of windows is read (reading is synchronous). */
let reported: Array<{ what: string; start: number; end: number }> = [];
/** At most this many reports are kept from one batch. */
const MAX_REPORTED = 256;
let loadedRules: Rule[] | undefined;

/**
 * secretlint's rules, loaded (synchronously, from node_modules) the first time a run is read
 * that they could be asked about: a gateway whose spaces read no secrets never loads the
 * preset (about 220 KB of code).
 */
function secretlintRules(): Rule[] {
  if (loadedRules) return loadedRules;
  const load = createRequire(import.meta.url);
  const preset = load("@secretlint/secretlint-rule-preset-recommend") as typeof import("@secretlint/secretlint-rule-preset-recommend");
  loadedRules = preset.rules
    // A filter rule only hides others' reports (comment directives): an agent could use it to hide a key.
    .filter(
      (r) =>
        r.meta.type === "scanner" && !NOT_ASKED.has(r.meta.id) && r.meta.supportedContentTypes.some((t) => t === "text" || t === "all"),
    )
    .map((r) => {
      const what = ruleWords(r.meta.id);
      const context: SecretLintRuleContext = {
        sharedOptions: {},
        // The rules' own messages repeat the secret: only the id of the message is kept.
        createTranslator: () => ((messageId: string) => ({ message: messageId, messageId, data: undefined })) as never,
        report: (d) => {
          if (reported.length < MAX_REPORTED) reported.push({ what, start: d.range[0], end: d.range[1] });
        },
        ignore: () => {},
      };
      const handler = r.create(context, {} as never);
      return { what, file: handler.file?.bind(handler) ?? (() => {}), needs: SECRETLINT_NEEDS[r.meta.id] };
    });
  return loadedRules;
}

function sourceOf(content: string): SecretLintSourceCode {
  // The rules read `content` (and some `ext` or `filePath`, to pick file formats: none here).
  return {
    hasBOM: false,
    content,
    filePath: undefined,
    physicalFilePath: undefined,
    contentType: "text",
    ext: ".txt",
    getFilePath: () => undefined,
    getPhysicalFilePath: () => undefined,
    locationToRange: () => [0, 0],
    rangeToLocation: () => ({ start: { line: 1, column: 0 }, end: { line: 1, column: 0 } }),
    positionToIndex: () => 0,
    indexToPosition: () => ({ line: 1, column: 0 }),
  };
}

/**
 * Runs secretlint's rules once over `windows` (spans [from, to) of `s`, in order, apart),
 * joined with a line between them; each hit is given back with the index of its window, in
 * that window's place in `s`. Asking the rules costs about the same for 100 characters as for
 * 1,000 (each rule sets itself up per text), so the windows of a string are read together.
 * Any promise a rule returns is not waited for.
 */
export function secretlintIn(s: string, windows: ReadonlyArray<readonly [number, number]>): RuleHit[] {
  const rules = secretlintRules();
  let content = "";
  const at: number[] = [];
  for (const [from, to] of windows) {
    if (content) content += SEPARATOR;
    at.push(content.length);
    content += s.slice(from, to);
  }
  const asked = rules.filter((r) => r.needs === undefined || r.needs.some((re) => re.test(content)));
  if (asked.length === 0) return [];
  reported = [];
  const source = sourceOf(content);
  for (const r of asked) {
    try {
      const p = r.file(source);
      // No rule of the text preset is asynchronous; one that became so is read no further.
      if (p && typeof (p as Promise<void>).catch === "function") (p as Promise<void>).catch(() => {});
    } catch {
      // A rule that throws on odd input finds nothing there; the others still read it.
    }
  }
  const out: RuleHit[] = [];
  for (const h of reported) {
    if (h.end <= h.start) continue;
    // The window the hit starts in (the last that starts at or before it).
    let lo = 0;
    let hi = at.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (at[mid]! <= h.start) lo = mid;
      else hi = mid - 1;
    }
    const [from, to] = windows[lo]!;
    const start = from + Math.max(0, h.start - at[lo]!);
    // A hit that ran on past its window (into the separator or the next) ends where the window does.
    const end = Math.min(to, from + (h.end - at[lo]!));
    if (end > start && start < to) out.push({ what: h.what, start, end, window: lo });
  }
  reported = [];
  return out;
}

/** What goes between two windows read together: a blank line, which no rule's pattern spans into a key. */
const SEPARATOR = "\n\n";
/** How many characters of windows are read in one batch. */
export const BATCH_CHARS = 32 * 1024;
