/**
 * Tool poisoning: what a tool's definition says to whoever reads it — a model, through the
 * system prompt and the function definitions, or a person, on a card — checked when the
 * catalogue takes it in (calls/router.ts). Pure: text in, findings out.
 *
 * A finding names a stable `code` (tests, policy and the console key on it), the field it
 * was found in, and a reason written for a person. What is looked at: the title and the
 * description, `annotations.title`, and every `description` / `title` inside the input
 * schema (bounded in depth and count). What is flagged:
 *
 * - `invisible_characters`: zero-width (U+200B–U+200D, U+2060, U+FEFF), Unicode tag
 *   characters (U+E0000–U+E007F), every other format character (Cf), control characters
 *   other than tab and newline, Hangul fillers and the supplementary variation selectors
 *   — text a screen does not show, which a model still reads.
 * - `bidi_controls`: U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C, which reorder
 *   what is shown so that it differs from what is read.
 * - `markup`: HTML comments, `<script`, HTML tags, markdown images and links to URLs.
 * - `model_instructions`: text that addresses the model rather than describing the tool
 *   (the patterns in `INSTRUCTIONS`), matched case-insensitively on the text with its
 *   invisible characters removed and its whitespace collapsed, so they cannot hide the words.
 * - `sensitive_paths`: keys and secrets a tool has no business asking for (`~/.ssh`,
 *   `id_rsa`, `.env`, cloud credentials, `/etc/shadow`).
 * - `whitespace_run`: more than 40 spaces in a row, or more than 8 blank lines, which
 *   push text off the visible part of a screen or card.
 * - `unusual_length`: a description over 2,000 characters (a title over 200, an argument's
 *   description over 1,000).
 *
 * Every check is one linear pass (no pattern here can backtrack past a bounded window), and
 * no more than `MAX_SCAN` characters of a text are read, so a megabyte costs milliseconds.
 */
import { cleanText } from "../wire/text.js";
import { isRecord } from "../wire/values.js";

export const FINDING_CODES = [
  "invisible_characters",
  "bidi_controls",
  "markup",
  "model_instructions",
  "sensitive_paths",
  "whitespace_run",
  "unusual_length",
] as const;
export type FindingCode = (typeof FINDING_CODES)[number];

export interface Finding {
  code: FindingCode;
  /** Where: `description`, `title`, `inputSchema.properties.path.description`, … */
  field: string;
  /** Why, for a person. */
  reason: string;
}

/** Characters of one text that are read; past it the text is flagged for its length anyway. */
const MAX_SCAN = 256 * 1024;
/** How deep into the input schema, and how many of its strings, are looked at. */
const MAX_DEPTH = 12;
const MAX_SCHEMA_TEXTS = 500;
/** Most findings kept per tool: enough to say what is wrong, never a flood. */
export const MAX_FINDINGS = 24;
const LONG = { description: 2_000, title: 200, argument: 1_000 } as const;
const MAX_SPACES = 40;
const MAX_BLANK_LINES = 8;

const BIDI = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C]/g;
// Format characters (Cf) and controls (Cc but tab, LF, CR), Hangul fillers, the supplementary
// variation selectors; bidi controls are Cf too and are reported on their own.
const INVISIBLE =
  // biome-ignore lint/suspicious/noMisleadingCharacterClass: the class lists single code points (combining marks, fillers) on purpose, to find them alone
  /(?![\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C])[\p{Cf}\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\u115F\u1160\u3164\uFFA0\u{E0100}-\u{E01EF}]/gu;

const MARKUP: ReadonlyArray<[RegExp, string]> = [
  [/<!--/, "an HTML comment (<!-- … -->), which a rendered view hides"],
  [/<\s*script\b/i, "a <script> tag"],
  [
    /<\/?(?:a|abbr|b|blockquote|body|br|button|code|del|details|div|em|embed|font|form|h[1-6]|head|hr|html|i|iframe|img|input|ins|li|link|meta|object|ol|p|pre|s|small|span|strong|style|sub|summary|sup|svg|table|td|th|tr|u|ul)\b[^<>]{0,200}>/i,
    "HTML tags",
  ],
  [/!\[[^[\]\n]{0,200}\]\(/, "a markdown image, which fetches a URL when rendered"],
  [/\[[^[\]\n]{0,200}\]\(\s*<?\s*(?:https?|data|javascript|file|ftp):/i, "a markdown link to a URL"],
];

/**
 * Text that speaks to the model: the documented set. Matched on the cleaned, lower-cased
 * text; each window is bounded so no pattern backtracks far.
 */
export const INSTRUCTIONS: ReadonlyArray<[RegExp, string]> = [
  [
    /\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+)?(?:previous\s+|prior\s+|above\s+|earlier\s+|other\s+|system\s+)?(?:instructions|rules|directions|guidelines)\b/,
    '"ignore … instructions"',
  ],
  [
    /\bbefore\s+(?:answering|responding|replying|using|calling|doing|you\s+(?:answer|respond|reply|use|call|do))\b/,
    '"before answering / using …"',
  ],
  [
    /\b(?:do\s+not|don't|dont|never)\s+(?:tell|mention|inform|notify|alert|reveal|show|let)\b[^.\n]{0,40}?\buser\b/,
    '"do not tell the user …"',
  ],
  [/<\s*\/?\s*(?:important|system|instructions?|secret|hidden)\s*>/, "an <important>-style tag addressed to the model"],
  [/\bsystem\s+prompt\b/, '"system prompt"'],
  [/\bpass\s+(?:it|them|this|that|its\s+content|the\s+contents?)\s+(?:as|in|into|through)\b/, '"pass it as …"'],
  [/\b(?:you\s+must|you\s+are\s+required\s+to)\s+(?:first|always|also)\b/, '"you must first / always …"'],
  [/\b(?:as\s+an\s+ai|you\s+are\s+now|new\s+instructions?\s*:)/, "a role or new instructions for the model"],
];

const SENSITIVE: ReadonlyArray<[RegExp, string]> = [
  [/~\/\.ssh\b|\.ssh\/|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|\bauthorized_keys\b/, "SSH keys (~/.ssh, id_rsa)"],
  [/(?:^|[\s"'`(/=:])\.env\b(?![-\w])/, "a .env file"],
  [/\.aws\/credentials|\.netrc\b|\.npmrc\b|\.pgpass\b|\.git-credentials\b|\.docker\/config\.json/, "credential files"],
  [/\/etc\/(?:shadow|passwd|sudoers)\b/, "system password files"],
];

/** Removes every invisible and bidi character (the one table: wire/text.ts): what a model is given instead of the raw text. */
export function stripHidden(text: string): string {
  return cleanText(text);
}

/** The findings for one tool definition (an MCP tool or a catalogue entry), at most `MAX_FINDINGS`. */
export function inspectTool(tool: { title?: unknown; description?: unknown; inputSchema?: unknown; annotations?: unknown }): Finding[] {
  const out: Finding[] = [];
  if (typeof tool.title === "string") inspectText(tool.title, "title", LONG.title, out);
  if (typeof tool.description === "string") inspectText(tool.description, "description", LONG.description, out);
  const annotations = tool.annotations;
  if (isRecord(annotations) && typeof annotations["title"] === "string")
    inspectText(annotations["title"], "annotations.title", LONG.title, out);
  if (isRecord(tool.inputSchema)) {
    let budget = MAX_SCHEMA_TEXTS;
    const walk = (node: unknown, path: string, depth: number): void => {
      if (depth > MAX_DEPTH || budget <= 0 || out.length >= MAX_FINDINGS) return;
      if (Array.isArray(node)) {
        for (let i = 0; i < node.length && budget > 0; i++) walk(node[i], `${path}[${i}]`, depth + 1);
        return;
      }
      if (!isRecord(node)) return;
      for (const [key, value] of Object.entries(node)) {
        if (budget <= 0) return;
        // A key is the server's text: shown to people only as letters, digits, `_`, `-`, `$`.
        const here = `${path}.${key.replace(/[^\w$-]/g, "?").slice(0, 40)}`;
        if ((key === "description" || key === "title") && typeof value === "string") {
          budget--;
          inspectText(value, here, key === "title" ? LONG.title : LONG.argument, out);
        } else if (typeof value === "object" && value !== null) walk(value, here, depth + 1);
      }
    };
    walk(tool.inputSchema, "inputSchema", 0);
  }
  return out.slice(0, MAX_FINDINGS);
}

function inspectText(raw: string, field: string, longer: number, out: Finding[]): void {
  const add = (code: FindingCode, reason: string) => {
    if (out.length < MAX_FINDINGS) out.push({ code, field, reason: `${reason} in the ${field}` });
  };
  if (raw.length > longer) add("unusual_length", `${raw.length} characters (more than ${longer})`);
  const text = raw.length > MAX_SCAN ? raw.slice(0, MAX_SCAN) : raw;

  const invisible = text.match(INVISIBLE);
  if (invisible)
    add(
      "invisible_characters",
      `${invisible.length} invisible ${invisible.length === 1 ? "character" : "characters"} (${codepoints(invisible)})`,
    );
  const bidi = text.match(BIDI);
  if (bidi)
    add(
      "bidi_controls",
      `${bidi.length} bidirectional control ${bidi.length === 1 ? "character" : "characters"} (${codepoints(bidi)}), which reorder the text a person sees,`,
    );

  const run = whitespaceRuns(text);
  if (run.spaces > MAX_SPACES) add("whitespace_run", `a run of ${run.spaces} spaces, which can push text out of view`);
  else if (run.blankLines > MAX_BLANK_LINES)
    add("whitespace_run", `${run.blankLines} blank lines in a row, which can push text out of view`);

  // Markup and instructions are looked for in what a model reads: hidden characters out.
  const seen = stripHidden(text);
  const markup = MARKUP.filter(([re]) => re.test(seen)).map(([, why]) => why);
  if (markup.length) add("markup", `markup: ${markup.join("; ")}`);
  const words = seen.replace(/\s+/g, " ").toLowerCase();
  const said = INSTRUCTIONS.filter(([re]) => re.test(words)).map(([, why]) => why);
  if (said.length) add("model_instructions", `text addressed to the model: ${said.join(", ")}`);
  const secrets = SENSITIVE.filter(([re]) => re.test(words)).map(([, why]) => why);
  if (secrets.length) add("sensitive_paths", `mentions ${secrets.join(", ")}`);
}

/** The longest run of spaces (tabs and other blank characters count) and of blank lines, in one pass. */
function whitespaceRuns(text: string): { spaces: number; blankLines: number } {
  let spaces = 0;
  let blankLines = 0;
  let run = 0;
  let lines = 0;
  let lineHasText = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) {
      lines = lineHasText ? 0 : lines + 1;
      if (lines > blankLines) blankLines = lines;
      lineHasText = false;
      run = 0;
    } else if (c === 32 || c === 9 || c === 0xa0 || c === 0x3000 || (c >= 0x2000 && c <= 0x200a) || c === 13) {
      if (c !== 13 && ++run > spaces) spaces = run;
    } else {
      run = 0;
      lineHasText = true;
    }
  }
  return { spaces, blankLines };
}

function codepoints(chars: readonly string[]): string {
  const distinct = [...new Set(chars)].slice(0, 4);
  const names = distinct.map((c) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`);
  return new Set(chars).size > 4 ? `${names.join(", ")}, …` : names.join(", ");
}

/** One line for a person or a model: "invisible characters, model instructions". */
export function summary(findings: readonly Finding[]): string {
  return [...new Set(findings.map((f) => f.code.replace(/_/g, " ")))].join(", ");
}
