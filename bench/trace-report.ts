// The trace benchmark's results file and what is drawn from it: the Markdown
// tables of docs/benchmarks.md and the SVG chart beside them. Pure functions
// of the results, so a test can check that the committed docs were drawn from
// the committed results file.

export interface PolicyVariant {
  readonly label: string;
  readonly policy: 'lru' | 'arc' | 's3-fifo';
  readonly storeThreshold: number;
}

/** The policies the sweep compares, in table and legend order. */
export const VARIANTS: readonly PolicyVariant[] = [
  { label: 'LRU', policy: 'lru', storeThreshold: 1 },
  { label: 'ARC (vLLM)', policy: 'arc', storeThreshold: 1 },
  { label: 'S3-FIFO', policy: 's3-fifo', storeThreshold: 1 },
  { label: 'LRU + store threshold 2', policy: 'lru', storeThreshold: 2 },
];

/** The capacities of the sweep, in tokens (the issue's; the paper's Figure 9 spans 10^4 to 10^9). */
export const CAPACITIES = [100_000, 300_000, 1_000_000, 3_000_000, 10_000_000, 50_000_000];

/** The paper's local cache in its Figure 9 discussion. */
export const PAPER_LOCAL_CACHE_TOKENS = 3_000_000;

export interface SweepPoint {
  readonly variant: string;
  readonly capacityTokens: number;
  readonly tokenHitRatio: number;
  readonly hitTokens: number;
  readonly evictions: number;
  readonly admissionSkips: number;
  readonly chunksDroppedForCapacity: number;
  readonly wallSeconds: number;
}

export interface TraceSweep {
  /** A short name: conversation, synthetic. */
  readonly name: string;
  readonly source: string;
  readonly requests: number;
  readonly promptTokens: number;
  /** The paper's Table 2 "cache ratio" for this workload. */
  readonly paperCacheRatio: number;
  /** What the hash IDs alone give (no tier): see bench/trace.ts. */
  readonly ideal: {
    readonly tokenWeighted: number;
    readonly wholeChunks: number;
    readonly perRequestMean: number;
  };
  /** The cache mode at unlimited capacity, per variant (LRU, ARC and S3-FIFO evict nothing, so they agree). */
  readonly unlimited: readonly { readonly variant: string; readonly tokenHitRatio: number }[];
  readonly points: readonly SweepPoint[];
}

export interface TraceResults {
  readonly schema: 'kvoff-bench-trace/1';
  readonly mode: 'full' | 'smoke';
  readonly at: string;
  readonly commit: string;
  readonly dirty: boolean;
  readonly loadAverage: readonly [number, number];
  readonly benchSeconds: number;
  readonly tokensPerChunk: number;
  readonly traces: readonly TraceSweep[];
}

const pct = (x: number, digits = 1) => `${(x * 100).toFixed(digits)}%`;

/** 100 k, 3 M, 50 M: tokens as people say them. */
function capacityLabel(tokens: number): string {
  if (tokens >= 1e6) return `${tokens / 1e6} M`;
  if (tokens >= 1e3) return `${tokens / 1e3} k`;
  return String(tokens);
}

/** The Markdown tables of the sweep (one per trace). */
export function renderMarkdown(r: TraceResults): string {
  const out: string[] = [];
  for (const t of r.traces) {
    out.push(
      `**${t.name}** (\`${t.source}\`, ${t.requests.toLocaleString('en-US')} requests, ` +
        `${(t.promptTokens / 1e6).toFixed(1)} M prompt tokens): token hit ratio by host tier capacity`,
      '',
      `| capacity (tokens) | ${VARIANTS.map((v) => v.label).join(' | ')} |`,
      `| --- | ${VARIANTS.map(() => '---:').join(' | ')} |`,
    );
    const caps = [...new Set(t.points.map((p) => p.capacityTokens))].sort((a, b) => a - b);
    for (const cap of caps) {
      const cells = VARIANTS.map((v) => {
        const p = t.points.find((x) => x.variant === v.label && x.capacityTokens === cap);
        return p === undefined ? '' : pct(p.tokenHitRatio);
      });
      out.push(`| ${capacityLabel(cap)} | ${cells.join(' | ')} |`);
    }
    const unl = VARIANTS.map((v) => {
      const u = t.unlimited.find((x) => x.variant === v.label);
      return u === undefined ? '' : pct(u.tokenHitRatio);
    });
    out.push(`| unlimited | ${unl.join(' | ')} |`, '');
  }
  return out.join('\n');
}

// --- the chart ---

const W = 760;
const PANEL_H = 300;
const M = { left: 56, right: 36, top: 34, bottom: 46 };
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd'];
const DASH = ['', '6 3', '2 3', '8 3 2 3'];

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** One panel per trace, stacked: hit ratio against capacity (log scale), a line per policy. */
export function renderChart(r: TraceResults): string {
  const panels = r.traces.length;
  const legendH = 28;
  const H = panels * PANEL_H + legendH;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
  ];
  r.traces.forEach((t, i) => parts.push(panel(t, i * PANEL_H)));
  // Legend.
  let x = M.left;
  const y = panels * PANEL_H + 14;
  VARIANTS.forEach((v, k) => {
    parts.push(
      `<line x1="${x}" y1="${y}" x2="${x + 24}" y2="${y}" stroke="${COLORS[k]}" stroke-width="2" ${DASH[k] === '' ? '' : ` stroke-dasharray="${DASH[k]}"`}/>`,
      `<text x="${x + 30}" y="${y + 4}">${esc(v.label)}</text>`,
    );
    x += 44 + v.label.length * 7;
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function panel(t: TraceSweep, top: number): string {
  const caps = [...new Set(t.points.map((p) => p.capacityTokens))].sort((a, b) => a - b);
  const x0 = Math.log10(caps[0]!);
  const x1 = Math.log10(caps[caps.length - 1]!);
  const yMax = Math.ceil(Math.max(t.ideal.tokenWeighted, t.paperCacheRatio) * 10 + 0.5) / 10;
  const pw = W - M.left - M.right;
  const ph = PANEL_H - M.top - M.bottom;
  const px = (cap: number) => M.left + ((Math.log10(cap) - x0) / (x1 - x0)) * pw;
  const py = (ratio: number) => top + M.top + ph - (ratio / yMax) * ph;
  const f = (n: number) => n.toFixed(1);
  const out: string[] = [
    `<text x="${M.left}" y="${top + 20}" font-size="13" font-weight="bold">${esc(`${t.name}: token hit ratio by host tier capacity (${t.requests.toLocaleString('en-US')} requests)`)}</text>`,
    `<rect x="${M.left}" y="${top + M.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`,
  ];
  for (let g = 0; g <= yMax + 1e-9; g += 0.1) {
    const y = py(g);
    out.push(
      `<line x1="${M.left}" y1="${f(y)}" x2="${M.left + pw}" y2="${f(y)}" stroke="#eee"/>`,
      `<text x="${M.left - 6}" y="${f(y + 4)}" text-anchor="end">${Math.round(g * 100)}%</text>`,
    );
  }
  for (const cap of caps) {
    const x = px(cap);
    out.push(
      `<line x1="${f(x)}" y1="${top + M.top + ph}" x2="${f(x)}" y2="${top + M.top + ph + 4}" stroke="#999"/>`,
      `<text x="${f(x)}" y="${top + M.top + ph + 18}" text-anchor="middle">${esc(capacityLabel(cap))}</text>`,
    );
  }
  out.push(
    `<text x="${M.left + pw / 2}" y="${top + PANEL_H - 8}" text-anchor="middle">host tier capacity (tokens, log scale)</text>`,
  );
  // The paper's 3 M-token local cache (when the sweep spans it).
  const xl = px(PAPER_LOCAL_CACHE_TOKENS);
  const spans =
    caps[0]! <= PAPER_LOCAL_CACHE_TOKENS && PAPER_LOCAL_CACHE_TOKENS <= caps[caps.length - 1]!;
  if (spans)
    out.push(
      `<line x1="${f(xl)}" y1="${top + M.top}" x2="${f(xl)}" y2="${top + M.top + ph}" stroke="#555" stroke-dasharray="4 4"/>`,
      `<text x="${f(xl + 4)}" y="${top + M.top + 14}" fill="#555">3 M tokens: the paper's local cache</text>`,
    );
  // Unlimited capacity, and the paper's Table 2 ratio.
  const yu = py(t.unlimited.find((u) => u.variant === 'LRU')?.tokenHitRatio ?? 0);
  out.push(
    `<line x1="${M.left}" y1="${f(yu)}" x2="${M.left + pw}" y2="${f(yu)}" stroke="#888" stroke-dasharray="1 3"/>`,
    `<text x="${M.left + 4}" y="${f(yu - 4)}" fill="#555">unlimited capacity</text>`,
  );
  const yp = py(t.paperCacheRatio);
  out.push(
    `<line x1="${M.left + pw - 120}" y1="${f(yp)}" x2="${M.left + pw}" y2="${f(yp)}" stroke="#e08000" stroke-width="2"/>`,
    `<text x="${M.left + pw - 124}" y="${f(yp + 4)}" text-anchor="end" fill="#e08000">paper's Table 2</text>`,
  );
  VARIANTS.forEach((v, k) => {
    const pts = caps
      .map((cap) => t.points.find((p) => p.variant === v.label && p.capacityTokens === cap))
      .filter((p): p is SweepPoint => p !== undefined)
      .map((p) => `${f(px(p.capacityTokens))},${f(py(p.tokenHitRatio))}`);
    out.push(
      `<polyline points="${pts.join(' ')}" fill="none" stroke="${COLORS[k]}" stroke-width="2" ${DASH[k] === '' ? '' : ` stroke-dasharray="${DASH[k]}"`}/>`,
    );
  });
  return out.join('\n');
}
