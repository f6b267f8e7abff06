// Keeps the trace benchmark from rotting and its published figures honest:
// `bench/trace.ts --smoke` (the fixture slices) writes a results file of the
// documented shape and a chart, and the tables in docs/benchmarks.md and the
// chart in docs/ are exactly what the committed bench/results/trace.json draws.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { VARIANTS, renderChart, renderMarkdown } from '../../bench/trace-report.js';
import type { TraceResults } from '../../bench/trace-report.js';
import { ROOT } from '../helpers/cli.js';

const run = promisify(execFile);
const out = mkdtempSync(path.join(os.tmpdir(), 'kvoff-bench-trace-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const read = (f: string) => readFileSync(path.join(ROOT, f), 'utf8');

describe('bench:trace', () => {
  it('--smoke sweeps the fixture slices and writes the results and the chart', async () => {
    await run(process.execPath, ['--import', 'tsx', 'bench/trace.ts', '--smoke', '--out', out], {
      cwd: ROOT,
      timeout: 120_000,
    });
    const r = JSON.parse(readFileSync(path.join(out, 'trace-smoke.json'), 'utf8')) as TraceResults;
    expect(r).toMatchObject({ schema: 'kvoff-bench-trace/1', mode: 'smoke', tokensPerChunk: 512 });
    expect(r.traces.map((t) => [t.name, t.requests])).toEqual([
      ['conversation', 300],
      ['synthetic', 300],
    ]);
    for (const t of r.traces) {
      expect(t.points).toHaveLength(VARIANTS.length * 3);
      expect(t.unlimited.map((u) => u.variant)).toEqual(VARIANTS.map((v) => v.label));
      // Unlimited, LRU evicts nothing: it reaches what the hash IDs allow over whole chunks.
      expect(t.unlimited[0]!.tokenHitRatio).toBeCloseTo(t.ideal.wholeChunks, 9);
      for (const p of t.points) expect(p.tokenHitRatio).toBeLessThanOrEqual(t.ideal.wholeChunks);
    }
    expect(readFileSync(path.join(out, 'trace-smoke.svg'), 'utf8')).toMatch(/^<svg [^]*<\/svg>\n$/);
  });

  it('docs/benchmarks.md and docs/trace-hit-ratio.svg are drawn from bench/results/trace.json', () => {
    const r = JSON.parse(read('bench/results/trace.json')) as TraceResults;
    expect(r.mode).toBe('full');
    expect(read('docs/benchmarks.md')).toContain(renderMarkdown(r));
    expect(read('docs/trace-hit-ratio.svg')).toBe(renderChart(r));
  });
});
