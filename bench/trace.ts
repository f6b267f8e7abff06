// Benchmark: hit ratio against host tier capacity on Mooncake's public request
// traces, per cache policy. `npm run bench:trace`
//
// The cache mode of `kvoff simulate --trace` (the host tier's index and policy
// over the request sequence, no threads, no bytes) at 10^5 to 5 × 10^7 tokens
// and unlimited, for LRU, vLLM's ARC, S3-FIFO and LRU with vLLM's store
// threshold of 2, on both traces, with 512-token chunks (one per trace block).
// Single-threaded, deterministic: the figures do not depend on the machine, so
// one run is the result (the wall times do).
//
//   --traces DIR   where conversation_trace.jsonl and synthetic_trace.jsonl are
//                  (default ../shared/data/mooncake; Mooncake's repository,
//                  FAST25-release/traces/, has them)
//   --out DIR      where the JSON and the SVG go (default bench/results/latest/)
//   --publish      also refresh bench/results/trace.json, docs/trace-hit-ratio.svg
//                  and the tables in docs/benchmarks.md
//   --smoke        the fixture slices, three capacities: seconds (the test's)
//   --markdown F   run nothing: print the tables of a results file
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadHashing } from '../src/hashing.js';
import { replayCache } from '../src/trace/cache-replay.js';
import { readTrace } from '../src/trace/trace.js';
import type { Trace } from '../src/trace/trace.js';
import { commitInfo } from './lib/machine.js';
import { LATEST_DIR, PUBLISHED_DIR, shownPath, spliceBlock } from './lib/results-dir.js';
import { CAPACITIES, VARIANTS, renderChart, renderMarkdown } from './trace-report.js';
import type { SweepPoint, TraceResults, TraceSweep } from './trace-report.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TOKENS_PER_CHUNK = 512;
const SMOKE_CAPACITIES = [100_000, 300_000, 1_000_000];
/** The paper's Table 2 "cache ratio". */
const PAPER = { conversation: 0.4, synthetic: 0.66 } as const;
const DOCS = join(ROOT, 'docs', 'benchmarks.md');
const CHART = join(ROOT, 'docs', 'trace-hit-ratio.svg');
const BEGIN = '<!-- bench:trace tables (npm run bench:trace -- --publish rewrites them) -->';
const END = '<!-- end of bench:trace tables -->';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** What the hash IDs alone say, with no tier (see docs/benchmarks.md). */
function ideal(trace: Trace): TraceSweep['ideal'] {
  const seen = new Set<number>();
  let tokens = 0;
  let hit = 0;
  let whole = 0;
  let mean = 0;
  for (const r of trace.requests) {
    let k = 0;
    while (k < r.hashIds.length && seen.has(r.hashIds[k]!)) k += 1;
    const h = Math.min(k * trace.blockTokens, r.inputLength);
    hit += h;
    whole += Math.min(k, Math.floor(r.inputLength / trace.blockTokens)) * trace.blockTokens;
    tokens += r.inputLength;
    mean += h / r.inputLength;
    for (const id of r.hashIds) seen.add(id);
  }
  return {
    tokenWeighted: hit / tokens,
    wholeChunks: whole / tokens,
    perRequestMean: mean / trace.requests.length,
  };
}

async function sweep(
  name: 'conversation' | 'synthetic',
  trace: Trace,
  capacities: readonly number[],
) {
  const hashing = await loadHashing();
  const points: SweepPoint[] = [];
  const unlimited: TraceSweep['unlimited'][number][] = [];
  for (const v of VARIANTS) {
    for (const capacityTokens of [...capacities, 0]) {
      const r = replayCache(trace, hashing, {
        tokensPerChunk: TOKENS_PER_CHUNK,
        capacityTokens,
        policy: v.policy,
        storeThreshold: v.storeThreshold,
      });
      if (capacityTokens === 0) {
        unlimited.push({ variant: v.label, tokenHitRatio: r.trace.tokenHitRatio });
        continue;
      }
      points.push({
        variant: v.label,
        capacityTokens,
        tokenHitRatio: r.trace.tokenHitRatio,
        hitTokens: r.trace.hitTokens,
        evictions: r.evictions,
        admissionSkips: r.admissionSkips,
        chunksDroppedForCapacity: r.chunksDroppedForCapacity,
        wallSeconds: Math.round(r.wallSeconds * 1000) / 1000,
      });
      process.stdout.write(
        `${name} ${v.label} ${capacityTokens}: ${(r.trace.tokenHitRatio * 100).toFixed(2)}% (${r.wallSeconds.toFixed(2)} s)\n`,
      );
    }
  }
  let promptTokens = 0;
  for (const r of trace.requests) promptTokens += r.inputLength;
  const out: TraceSweep = {
    name,
    source: trace.source,
    requests: trace.requests.length,
    promptTokens,
    paperCacheRatio: PAPER[name],
    ideal: ideal(trace),
    unlimited,
    points,
  };
  return out;
}

/** Replaces the tables between the markers of docs/benchmarks.md. */
export function spliceTables(doc: string, tables: string): string {
  return spliceBlock(doc, BEGIN, END, tables);
}

async function main(): Promise<void> {
  const markdown = arg('--markdown');
  if (markdown !== undefined) {
    const r = JSON.parse(readFileSync(markdown, 'utf8')) as TraceResults;
    process.stdout.write(renderMarkdown(r));
    return;
  }
  const smoke = process.argv.includes('--smoke');
  const t0 = performance.now();
  const load0 = loadavg()[0] ?? 0;
  const files = smoke
    ? {
        conversation: join(ROOT, 'test/fixtures/mooncake/conversation-slice.jsonl'),
        synthetic: join(ROOT, 'test/fixtures/mooncake/synthetic-slice.jsonl'),
      }
    : (() => {
        const dir = resolve(arg('--traces') ?? '../shared/data/mooncake');
        return {
          conversation: join(dir, 'conversation_trace.jsonl'),
          synthetic: join(dir, 'synthetic_trace.jsonl'),
        };
      })();
  for (const f of Object.values(files)) {
    if (!existsSync(f)) {
      throw new Error(
        `${f} is missing: give --traces DIR, the folder of Mooncake's conversation_trace.jsonl and synthetic_trace.jsonl (kvcache-ai/Mooncake, FAST25-release/traces/)`,
      );
    }
  }
  const capacities = smoke ? SMOKE_CAPACITIES : CAPACITIES;
  const traces = [
    await sweep('conversation', readTrace(files.conversation), capacities),
    await sweep('synthetic', readTrace(files.synthetic), capacities),
  ];
  const git = commitInfo();
  const results: TraceResults = {
    schema: 'kvoff-bench-trace/1',
    mode: smoke ? 'smoke' : 'full',
    at: new Date().toISOString(),
    commit: git.commit,
    dirty: git.dirty,
    loadAverage: [Math.round(load0 * 100) / 100, Math.round((loadavg()[0] ?? 0) * 100) / 100],
    benchSeconds: Math.round((performance.now() - t0) / 100) / 10,
    tokensPerChunk: TOKENS_PER_CHUNK,
    traces,
  };
  const outDir = arg('--out') ?? LATEST_DIR;
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, smoke ? 'trace-smoke.json' : 'trace.json');
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  const chart = join(outDir, smoke ? 'trace-smoke.svg' : 'trace-hit-ratio.svg');
  writeFileSync(chart, renderChart(results));
  const tables = renderMarkdown(results);
  process.stdout.write(`\n${tables}\nwrote ${shownPath(file)} and ${shownPath(chart)}\n`);
  if (process.argv.includes('--publish') && !smoke) {
    const published = join(PUBLISHED_DIR, 'trace.json');
    writeFileSync(published, `${JSON.stringify(results, null, 2)}\n`);
    writeFileSync(CHART, renderChart(results));
    writeFileSync(DOCS, spliceTables(readFileSync(DOCS, 'utf8'), tables));
    process.stdout.write(
      `published ${shownPath(published)}, ${shownPath(CHART)} and the tables of ${shownPath(DOCS)}\n`,
    );
  }
}

await main();
