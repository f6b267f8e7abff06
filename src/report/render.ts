// Renders a ReportData object to one self-contained HTML page: inline CSS and
// inline SVG, no script or style fetched from anywhere, so the file opens
// offline and can be attached to an issue. Pure: same data, same string.
//
// Per traced request, one chart per group plots (in chunks, against time) the
// three sources that race to a chunk boundary — token chunks, keys, complete
// block chunks — with the ready prefix (their minimum) and the cursor. Where
// token chunks run ahead of ready, the gap is shaded: those chunks were
// deferred. Each store is a green bar over the chunks it dispatched.
//
// The race happens early (prefill: keys and block IDs lag the tokens), then a
// long flat decode follows. When the prefill race — until the cursor reaches
// the prompt's last chunk in every group, and past every preemption — ends
// well before the request does, each group gets a zoomed chart of it first
// and the whole request below it.
import type {
  ReportData,
  ReportGroupTrace,
  ReportPass,
  ReportRequestTrace,
  ReportSummaryRow,
} from './data.js';

/** Passes drawn per group: more would make the SVG heavy without showing more. */
const PASSES_DRAWN_MAX = 800;
/** Deferral rows listed per request. */
const DEFERRAL_ROWS_MAX = 12;
/** Zoom when the action ends before this share of the request's time span. */
const ZOOM_WHEN_ACTION_BELOW = 0.6;

const CHART = { width: 1100, height: 190, left: 56, right: 16, top: 14, bottom: 28 } as const;

const SERIES = [
  { key: 'tokenChunks', label: 'token chunks', color: '#2f6fd0', dash: '' },
  { key: 'keys', label: 'keys', color: '#8a4fc8', dash: '5 3' },
  { key: 'blockChunks', label: 'complete block chunks', color: '#d9822b', dash: '2 2' },
  { key: 'ready', label: 'ready prefix', color: '#1a9a5a', dash: '' },
  { key: 'cursorAfter', label: 'cursor', color: '#222222', dash: '' },
] as const satisfies readonly {
  key: keyof ReportPass;
  label: string;
  color: string;
  dash: string;
}[];

/**
 * Stroke attributes of a series. Token chunks are drawn wide and pale under
 * the others: when nothing lags the lines coincide, and the token line still
 * shows around the cursor.
 */
function seriesStyle(s: (typeof SERIES)[number]): string {
  const width = s.key === 'tokenChunks' ? 5 : s.key === 'cursorAfter' ? 2.5 : 1.6;
  const opacity = s.key === 'tokenChunks' ? ' stroke-opacity="0.4"' : '';
  const dash = s.dash ? ` stroke-dasharray="${s.dash}"` : '';
  return ` stroke-width="${width}"${opacity}${dash}`;
}

export function renderReport(data: ReportData): string {
  const body = [
    `<h1>${esc(data.title)}</h1>`,
    `<p class="meta">policy <b>${esc(data.policy)}</b> · generated ${esc(data.generatedAt)}</p>`,
    renderSummary(data.summary),
    data.note ? `<p class="meta note">${esc(data.note)}</p>` : '',
    renderWorkload(data.workload),
    renderLegend(),
    data.requests.length === 0
      ? '<p class="empty">No request was traced in this run.</p>'
      : data.requests.map(renderRequest).join('\n'),
  ].join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(data.title)}</title>
<style>${CSS}</style>
</head>
<body>
${body}
</body>
</html>
`;
}

function renderSummary(rows: readonly ReportSummaryRow[]): string {
  const cells = rows
    .map(
      (r) =>
        `<div class="stat${r.bad ? ' bad' : ''}"><div class="v">${esc(r.value)}</div><div class="l">${esc(r.label)}</div></div>`,
    )
    .join('');
  return `<section class="summary"><h2>Summary</h2><div class="stats">${cells}</div></section>`;
}

function renderWorkload(workload: ReportData['workload']): string {
  const items = Object.entries(workload)
    .map(([k, v]) => `<span class="kv"><span class="k">${esc(k)}</span> ${esc(String(v))}</span>`)
    .join(' ');
  return `<p class="workload">workload: ${items}</p>`;
}

function renderLegend(): string {
  const lines = SERIES.map(
    (s) =>
      `<span class="lg"><svg width="28" height="10" aria-hidden="true"><line x1="0" y1="5" x2="28" y2="5" stroke="${s.color}"${seriesStyle(s)}/></svg>${esc(s.label)}</span>`,
  );
  lines.push(
    '<span class="lg"><svg width="16" height="10" aria-hidden="true"><rect width="16" height="10" fill="#e5484d" fill-opacity="0.25"/></svg>deferred (token-ready, not ready)</span>',
    '<span class="lg"><svg width="16" height="10" aria-hidden="true"><rect width="16" height="10" fill="#7a1020" fill-opacity="0.7"/></svg>cursor past ready (never stored)</span>',
    '<span class="lg"><svg width="8" height="10" aria-hidden="true"><rect width="4" height="10" x="2" fill="#1a9a5a"/></svg>store job</span>',
    '<span class="lg"><svg width="10" height="10" aria-hidden="true"><line x1="5" y1="0" x2="5" y2="10" stroke="#e5484d" stroke-dasharray="2 2"/></svg>preemption (new generation)</span>',
  );
  return `<p class="legend">${lines.join(' ')}</p>`;
}

function renderRequest(req: ReportRequestTrace): string {
  const all = req.groups.flatMap((g) => g.passes);
  const t0 = all.length ? Math.min(...all.map((p) => p.tMs)) : 0;
  const t1 = all.length ? Math.max(...all.map((p) => p.tMs)) : 1;
  const deferredPasses = all.filter((p) => p.deferred > 0).length;
  const pastReady = all.filter((p) => passedFrom(p) !== undefined).length;
  const stores = all.reduce((n, p) => n + p.stored, 0);
  const head =
    `<h2>Request ${req.requestId} <span class="status">${esc(req.status)}</span></h2>` +
    `<p class="meta">${req.promptTokens} prompt tokens · ${stores} chunks stored · ${deferredPasses} passes with deferred chunks${pastReady > 0 ? ` · <b class="bad">${pastReady} passes moved the cursor past the ready prefix without storing</b>` : ''}</p>`;
  const end = Math.max(t1, t0 + 1);
  const raceEnd = prefillRaceEndMs(req);
  // Room after the race (a quarter of it), so its end is not drawn on the edge.
  const zoomEnd = raceEnd === undefined ? end : Math.min(end, raceEnd + (raceEnd - t0) * 0.25 + 2);
  const zoom = zoomEnd - t0 < ZOOM_WHEN_ACTION_BELOW * (end - t0);
  const charts = req.groups
    .map((g) =>
      zoom
        ? renderGroup(g, t0, zoomEnd, {
            caption: `zoom on the prefill race: the first ${fmtMs(zoomEnd - t0)} after the first pass, until the cursor reached the prompt's last chunk`,
            strip: true,
          }) +
          renderGroup(g, t0, end, {
            caption: `the whole request (${fmtMs(end - t0)}, decode included); the zoomed span is shaded`,
            strip: true,
            shade: zoomEnd,
            titled: false,
          })
        : renderGroup(g, t0, end, { strip: true }),
    )
    .join('\n');
  return `<section class="request">${head}\n${charts}\n${renderDeferrals(req)}</section>`;
}

/**
 * When the prefill race ended: the first pass, after the last preemption, at
 * which every group's cursor reached the prompt's last whole chunk (one less
 * for the EAGLE tail). Undefined when some group never got there.
 */
export function prefillRaceEndMs(req: ReportRequestTrace): number | undefined {
  let end: number | undefined;
  for (const g of req.groups) {
    const target = Math.max(1, Math.floor(req.promptTokens / g.tokensPerChunk) - 1);
    let lastGeneration = 0;
    for (let i = 1; i < g.passes.length; i += 1) {
      if (g.passes[i]!.generation !== g.passes[i - 1]!.generation) lastGeneration = i;
    }
    const reached = g.passes.slice(lastGeneration).find((p) => p.cursorAfter >= target);
    if (reached === undefined) return undefined;
    if (end === undefined || reached.tMs > end) end = reached.tMs;
  }
  return end;
}

interface GroupChartOptions {
  /** A line over the chart saying what span it shows. */
  caption?: string;
  /** Draw the deferral strip under the chart. */
  strip: boolean;
  /** Shade [t0, shade] (the span a zoomed chart above shows). */
  shade?: number;
  /** Print the group's heading (once per group). */
  titled?: boolean;
}

/** A chart's axes, ticks and labels, and the shaded span a zoomed chart shows. */
function axes(
  t0: number,
  t1: number,
  yMax: number,
  x: (t: number) => number,
  y: (v: number) => number,
  shade: number | undefined,
): string[] {
  const { width, height, left, right, top, bottom } = CHART;
  const plotH = height - top - bottom;
  const parts: string[] = [];
  for (const v of ticks(0, yMax, 4)) {
    parts.push(
      `<line class="grid" x1="${left}" x2="${width - right}" y1="${f(y(v))}" y2="${f(y(v))}"/>`,
      `<text class="tick" x="${left - 6}" y="${f(y(v) + 4)}" text-anchor="end">${v}</text>`,
    );
  }
  for (const t of ticks(t0, t1, 8)) {
    // Labels near the right edge end there instead of running off the chart.
    const anchor = x(t) > width - right - 24 ? 'end' : 'middle';
    parts.push(
      `<text class="tick" x="${f(x(t))}" y="${height - 8}" text-anchor="${anchor}">${fmtMs(t)}</text>`,
    );
  }
  parts.push(
    `<line class="axis" x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}"/>`,
    `<line class="axis" x1="${left}" x2="${width - right}" y1="${top + plotH}" y2="${top + plotH}"/>`,
    `<text class="axislabel" transform="translate(12 ${f(top + plotH / 2)}) rotate(-90)" text-anchor="middle">chunks</text>`,
  );
  if (shade !== undefined) {
    parts.push(
      `<rect class="zoomed" x="${left}" y="${top}" width="${f(Math.max(1, x(shade) - left))}" height="${plotH}"/>`,
    );
  }

  return parts;
}

function renderGroup(g: ReportGroupTrace, t0: number, t1: number, opts: GroupChartOptions): string {
  const passes = decimate(
    g.passes.filter((p) => p.tMs <= t1),
    PASSES_DRAWN_MAX,
  );
  const heading =
    opts.titled === false
      ? ''
      : `<h3>group ${g.group} · ${esc(g.kind)} · ${g.tokensPerChunk} tokens per chunk · ${g.passes.length} passes</h3>`;
  const title = heading + (opts.caption ? `<p class="caption">${esc(opts.caption)}</p>` : '');
  if (passes.length === 0)
    return `<div class="group">${title}<p class="empty">no pass recorded</p></div>`;
  const yMax = Math.max(1, ...passes.map((p) => Math.max(p.tokenChunks, p.keys, p.blockChunks)));
  const { width, height, left, right, top, bottom } = CHART;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const x = (t: number): number => left + ((t - t0) / (t1 - t0)) * plotW;
  const y = (v: number): number => top + plotH - (v / yMax) * plotH;
  const parts: string[] = [];

  parts.push(...axes(t0, t1, yMax, x, y, opts.shade));

  // Deferred bands: the waiting chunks up to token chunks, until the next pass.
  for (let i = 0; i < passes.length; i += 1) {
    const p = passes[i]!;
    if (p.deferred <= 0) continue;
    const from = p.tokenChunks - p.deferred;
    const xEnd = i + 1 < passes.length ? x(passes[i + 1]!.tMs) : x(p.tMs) + 2;
    const w = Math.max(1.5, xEnd - x(p.tMs));
    parts.push(
      `<rect class="deferred" x="${f(x(p.tMs))}" y="${f(y(p.tokenChunks))}" width="${f(w)}" height="${f(Math.max(1, y(from) - y(p.tokenChunks)))}"><title>${passTitle(p)}</title></rect>`,
    );
  }
  // The legacy-zip bug: a pass moved the cursor beyond the ready prefix
  // without storing what it passed; those chunks will never be stored.
  for (let i = 0; i < passes.length; i += 1) {
    const p = passes[i]!;
    const from = passedFrom(p);
    if (from === undefined) continue;
    const xEnd = i + 1 < passes.length ? x(passes[i + 1]!.tMs) : x(p.tMs) + 2;
    const w = Math.max(1.5, xEnd - x(p.tMs));
    parts.push(
      `<rect class="passed" x="${f(x(p.tMs))}" y="${f(y(p.cursorAfter))}" width="${f(w)}" height="${f(Math.max(1, y(from) - y(p.cursorAfter)))}"><title>cursor passed ${from}..${p.cursorAfter - 1} unstored: ${passTitle(p)}</title></rect>`,
    );
  }
  // Preemptions.
  for (let i = 1; i < passes.length; i += 1) {
    if (passes[i]!.generation !== passes[i - 1]!.generation) {
      const px = f(x(passes[i]!.tMs));
      parts.push(
        `<line class="preempt" x1="${px}" x2="${px}" y1="${top}" y2="${top + plotH}"><title>generation ${passes[i]!.generation} at ${fmtMs(passes[i]!.tMs)}</title></line>`,
      );
    }
  }
  // Series as step lines.
  for (const s of SERIES) {
    const d = stepPath(
      passes,
      (p) => x(p.tMs),
      (p) => y(p[s.key]),
    );
    parts.push(`<path class="series" d="${d}" stroke="${s.color}"${seriesStyle(s)}/>`);
  }
  // Store jobs: a bar over the chunks dispatched.
  for (const p of passes) {
    if (p.stored <= 0) continue;
    parts.push(
      `<rect class="store" x="${f(x(p.tMs) - 1.5)}" y="${f(y(p.cursorBefore + p.stored))}" width="3" height="${f(Math.max(1.5, y(p.cursorBefore) - y(p.cursorBefore + p.stored)))}"><title>${passTitle(p)}</title></rect>`,
    );
  }
  const svg = `<svg class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="group ${g.group} timeline">${parts.join('')}</svg>`;
  return `<div class="group">${title}${svg}${opts.strip ? renderLagStrip(passes, x) : ''}</div>`;
}

/**
 * The race at a glance: under the chart, on the same time axis, how many
 * chunks were token-ready but not ready (red, scaled to the group's worst)
 * and a green tick per store job. On the main chart a deferral of one chunk in
 * hundreds is a hairline; here it is never thinner than the strip.
 */
function renderLagStrip(passes: readonly ReportPass[], x: (t: number) => number): string {
  const { width, left, right } = CHART;
  const height = 46;
  const top = 4;
  const laneH = 26;
  const deferredMax = Math.max(1, ...passes.map((p) => p.deferred));
  const y = (v: number): number => top + laneH - (v / deferredMax) * laneH;
  const parts: string[] = [
    `<line class="axis" x1="${left}" x2="${width - right}" y1="${top + laneH}" y2="${top + laneH}"/>`,
    `<text class="tick" x="${left - 6}" y="${top + 10}" text-anchor="end">${deferredMax}</text>`,
    `<text class="tick" x="${left - 6}" y="${top + laneH}" text-anchor="end">0</text>`,
  ];
  let d = '';
  for (let i = 0; i < passes.length; i += 1) {
    const p = passes[i]!;
    const x0 = x(p.tMs);
    const x1 = i + 1 < passes.length ? x(passes[i + 1]!.tMs) : x0 + 2;
    if (p.deferred > 0)
      d += `M${f(x0)} ${f(top + laneH)}V${f(y(p.deferred))}H${f(Math.max(x1, x0 + 1.5))}V${f(top + laneH)}Z`;
  }
  if (d) parts.push(`<path class="lag" d="${d}"/>`);
  for (const p of passes) {
    if (p.stored > 0) {
      parts.push(
        `<line class="storetick" x1="${f(x(p.tMs))}" x2="${f(x(p.tMs))}" y1="${top + laneH + 3}" y2="${top + laneH + 13}"/>`,
      );
    }
  }
  parts.push(
    `<text class="lane" x="${width - right}" y="${top + 9}" text-anchor="end">deferred chunks · store jobs below</text>`,
  );
  return `<svg class="chart strip" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="deferred chunks and store jobs">${parts.join('')}</svg>`;
}

function renderDeferrals(req: ReportRequestTrace): string {
  const rows: string[] = [];
  let total = 0;
  for (const g of req.groups) {
    for (const p of g.passes) {
      if (p.deferred <= 0) continue;
      total += 1;
      if (rows.length >= DEFERRAL_ROWS_MAX) continue;
      const lag = [
        p.keys < p.tokenChunks ? 'keys' : '',
        p.blockChunks < p.tokenChunks ? 'block IDs' : '',
      ]
        .filter(Boolean)
        .join(' + ');
      rows.push(
        `<tr><td>${fmtMs(p.tMs)}</td><td>${g.group}</td><td>${p.tokenChunks}</td><td>${p.keys}</td><td>${p.blockChunks}</td><td>${p.ready}</td><td>${p.cursorBefore} → ${p.cursorAfter}</td><td>${p.stored}</td><td class="d">${p.tokenChunks - p.deferred}..${p.tokenChunks - 1}</td><td>${esc(lag || '-')}</td></tr>`,
      );
    }
  }
  if (total === 0) return '<p class="meta">No chunk of this request was ever deferred.</p>';
  const more =
    total > rows.length
      ? `<p class="meta">… and ${total - rows.length} more passes with deferred chunks.</p>`
      : '';
  return `<table class="deferrals"><caption>Passes that deferred chunks (first ${rows.length} of ${total})</caption><thead><tr><th>time</th><th>group</th><th>token chunks</th><th>keys</th><th>block chunks</th><th>ready</th><th>cursor</th><th>stored</th><th>deferred chunks</th><th>lagging</th></tr></thead><tbody>${rows.join('')}</tbody></table>${more}`;
}

/**
 * Keeps at most `max` passes, preferring the ones that tell the story: the
 * first and last, every store, every change of deferral or generation.
 */
export function decimate(passes: readonly ReportPass[], max: number): ReportPass[] {
  if (passes.length <= max) return passes.slice();
  const keep: number[] = [];
  for (let i = 0; i < passes.length; i += 1) {
    const p = passes[i]!;
    const prev = passes[i - 1];
    if (
      i === 0 ||
      i === passes.length - 1 ||
      p.stored > 0 ||
      !prev ||
      prev.generation !== p.generation ||
      prev.deferred > 0 !== p.deferred > 0
    ) {
      keep.push(i);
    }
  }
  const chosen = keep.length <= max ? keep : stride(keep, max);
  return chosen.map((i) => passes[i]!);
}

/**
 * Where a pass's unstored overshoot starts: the pass moved the cursor beyond
 * the ready prefix, past chunks it did not store. Undefined when it did not.
 * (A cursor that merely stays above a ready prefix that shrank — an EAGLE
 * group entering decode drops its trailing chunk — is not an overshoot: that
 * chunk was stored while it was ready.)
 */
export function passedFrom(p: ReportPass): number | undefined {
  if (p.cursorAfter <= p.cursorBefore || p.cursorAfter <= p.ready) return undefined;
  return Math.max(p.ready, p.cursorBefore + p.stored);
}

function stride(indices: readonly number[], max: number): number[] {
  const out: number[] = [];
  const step = (indices.length - 1) / (max - 1);
  for (let k = 0; k < max; k += 1) out.push(indices[Math.round(k * step)]!);
  return [...new Set(out)];
}

function stepPath(
  passes: readonly ReportPass[],
  px: (p: ReportPass) => number,
  py: (p: ReportPass) => number,
): string {
  let d = '';
  for (let i = 0; i < passes.length; i += 1) {
    const p = passes[i]!;
    d += i === 0 ? `M${f(px(p))} ${f(py(p))}` : `H${f(px(p))}V${f(py(p))}`;
  }
  return d;
}

function passTitle(p: ReportPass): string {
  return esc(
    `${fmtMs(p.tMs)} gen ${p.generation}: token chunks ${p.tokenChunks}, keys ${p.keys}, block chunks ${p.blockChunks}, ready ${p.ready}, cursor ${p.cursorBefore}→${p.cursorAfter}, stored ${p.stored}, deferred ${p.deferred}, skipped ${p.skipped}`,
  );
}

/** Round tick values between lo and hi, about `count` of them. */
export function ticks(lo: number, hi: number, count: number): number[] {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9 && out.length <= count * 3; v += step) {
    out.push(Number(v.toPrecision(12)));
  }
  return out;
}

function fmtMs(t: number): string {
  return t >= 10_000 ? `${(t / 1000).toFixed(1)} s` : `${Math.round(t)} ms`;
}

function f(n: number): string {
  return Number.isFinite(n) ? n.toFixed(1) : '0';
}

/** Escapes text for HTML element content and double-quoted attributes. */
export function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) =>
    c === '&' ? '&amp;' : c === '<' ? '&lt;' : c === '>' ? '&gt;' : c === '"' ? '&quot;' : '&#39;',
  );
}

const CSS = `
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px 32px; color: #1b1f24; background: #fff; max-width: 1180px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 4px; }
h3 { font-size: 13px; font-weight: 600; margin: 12px 0 2px; color: #444; }
.meta, .workload, .empty { color: #555; margin: 2px 0 8px; }
.summary h2 { margin-top: 16px; }
.stats { display: flex; flex-wrap: wrap; gap: 8px; }
.stat { border: 1px solid #d8dee4; border-radius: 6px; padding: 6px 10px; min-width: 120px; }
.stat .v { font-size: 18px; font-weight: 600; font-variant-numeric: tabular-nums; }
.stat .l { font-size: 12px; color: #555; }
.stat.bad { border-color: #e5484d; background: #fff0f0; }
.stat.bad .v { color: #c62a2f; }
.kv { display: inline-block; background: #f3f4f6; border-radius: 4px; padding: 0 6px; margin: 1px 0; }
.kv .k { color: #666; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; font-size: 12px; color: #333; }
.lg { display: inline-flex; gap: 5px; align-items: center; }
.request { border-top: 1px solid #d8dee4; margin-top: 18px; }
b.bad { color: #c62a2f; }
.status { font-size: 12px; font-weight: 500; background: #eef2f6; border-radius: 10px; padding: 1px 8px; vertical-align: middle; }
.chart { display: block; max-width: 100%; height: auto; background: #fcfcfd; border: 1px solid #eceff3; border-radius: 4px; }
.chart .grid { stroke: #eceff3; }
.chart .axis { stroke: #9aa4af; }
.chart .tick { font-size: 10px; fill: #667; }
.chart .series { fill: none; stroke-linejoin: round; }
.chart .deferred { fill: #e5484d; fill-opacity: 0.25; }
.chart .store { fill: #1a9a5a; }
.chart .passed { fill: #7a1020; fill-opacity: 0.7; }
.chart .preempt { stroke: #e5484d; stroke-dasharray: 3 3; }
.chart.strip { border-top: none; border-radius: 0 0 4px 4px; margin-top: -1px; }
.chart .lag { fill: #e5484d; fill-opacity: 0.75; }
.chart .storetick { stroke: #1a9a5a; stroke-width: 1.2; }
.chart .lane { font-size: 10px; fill: #888; }
.chart .axislabel { font-size: 11px; fill: #556; }
.chart .zoomed { fill: #2f6fd0; fill-opacity: 0.06; }
.caption { font-size: 12px; color: #556; margin: 0 0 3px; }
.note { font-size: 12px; }
table.deferrals { border-collapse: collapse; margin-top: 10px; font-size: 12px; font-variant-numeric: tabular-nums; }
table.deferrals caption { text-align: left; font-weight: 600; padding-bottom: 4px; }
table.deferrals th, table.deferrals td { border: 1px solid #e1e5ea; padding: 2px 8px; text-align: right; }
table.deferrals th { background: #f6f8fa; }
table.deferrals td.d { color: #c62a2f; }
`;
