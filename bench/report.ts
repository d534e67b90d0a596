/**
 * Result rows and how they are printed: one aligned line per figure, gateway beside the
 * naive forwarder, their ratio, and the goal with whether it was met. Figures, never
 * pass/fail: a missed goal is printed, not thrown.
 */

export type Unit = "del/s" | "µs" | "KiB" | "ms" | "MiB" | "";

export interface Goal {
  /** e.g. ">= 0.90" (of the ratio) or "<= 250 ms" (of the gateway's figure). */
  text: string;
  met: boolean;
}

export interface Row {
  scenario: string;
  label: string;
  unit: Unit;
  gateway: number | string;
  naive?: number | string | undefined;
  /** gateway / naive, when both are numbers. */
  ratio?: number | undefined;
  goal?: Goal | undefined;
  /** Extra lines printed under the row (CPU use, raw samples, caveats). */
  details?: string[];
}

export function row(r: Omit<Row, "ratio"> & { ratio?: boolean | number }): Row {
  let ratio: number | undefined;
  if (typeof r.ratio === "number") ratio = r.ratio;
  else if (r.ratio !== false && typeof r.gateway === "number" && typeof r.naive === "number" && r.naive !== 0) ratio = r.gateway / r.naive;
  return { ...r, ratio };
}

function num(value: number, unit: Unit): string {
  if (!Number.isFinite(value)) return String(value);
  switch (unit) {
    case "del/s":
      return Math.round(value).toLocaleString("en-US");
    case "µs":
    case "ms":
      return value >= 100 ? Math.round(value).toLocaleString("en-US") : value.toFixed(1);
    case "KiB":
    case "MiB":
      return value.toFixed(1);
    default:
      return String(value);
  }
}

function value(v: number | string | undefined, unit: Unit): string {
  if (v === undefined) return "-";
  if (typeof v === "string") return v;
  return unit ? `${num(v, unit)} ${unit}` : num(v, unit);
}

/** Formats rows as aligned columns. */
export function table(rows: readonly Row[], withDetails = true): string {
  const cells = rows.map((r) => [
    r.label,
    `gateway ${value(r.gateway, r.unit)}`,
    `naive ${value(r.naive, r.unit)}`,
    r.ratio === undefined ? "" : `ratio ${r.ratio.toFixed(2)}`,
    r.goal ? `goal ${r.goal.text}` : "",
    r.goal ? (r.goal.met ? "met" : "NOT MET") : "",
  ]);
  const widths = cells[0]?.map((_, i) => Math.max(...cells.map((c) => c[i]!.length))) ?? [];
  const out: string[] = [];
  rows.forEach((r, i) => {
    out.push(
      cells[i]!.map((c, j) => c.padEnd(widths[j]!))
        .join("   ")
        .trimEnd(),
    );
    if (withDetails) for (const d of r.details ?? []) out.push(`    ${d}`);
  });
  return out.join("\n");
}

/** A row as `--json` prints it. */
export interface JsonRow {
  scenario: string;
  label: string;
  unit: Unit;
  gateway: number | string;
  naive: number | string | null;
  ratio: number | null;
  goal: string | null;
  met: boolean | null;
  details: string[];
}

/** What one side of an `--against` run hands back (bench/against.ts reads it). */
export interface ChildReport {
  rows: JsonRow[];
  /** CPU the gateway processes used, summed (procs.ts). */
  gatewayCpuMs: number;
  /** CPU of the bench process itself: the load clients, and the gateways a scenario runs in-process. */
  benchCpuMs: number;
  noise: number;
  failed: boolean;
}

export function toJson(rows: readonly Row[]): JsonRow[] {
  return rows.map((r) => ({
    scenario: r.scenario,
    label: r.label,
    unit: r.unit,
    gateway: r.gateway,
    naive: r.naive ?? null,
    ratio: r.ratio ?? null,
    goal: r.goal?.text ?? null,
    met: r.goal?.met ?? null,
    details: r.details ?? [],
  }));
}
