// Keeps the benchmark harness from rotting and its claims tied to its data:
// runs `bench/index.ts --smoke` (every benchmark at a tiny size, seconds) in a
// child process, exactly as `npm run bench` does, and checks the shape of the
// JSON it writes (the figures themselves are noise at this size); then checks
// that every target of that file, and of the committed quick results,
// recomputes from the figures the file stores, and that docs/benchmarks.md
// shows the committed quick results exactly as they are drawn from the file.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { QUICK_BLOCK_BEGIN, QUICK_BLOCK_END, renderMarkdown } from '../../bench/markdown.js';
import type { BenchResults } from '../../bench/suite.js';
import { allTargets } from '../../bench/targets.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const out = mkdtempSync(path.join(os.tmpdir(), 'kvoff-bench-smoke-'));

afterAll(() => rmSync(out, { recursive: true, force: true }));

const figureShape = {
  median: expect.any(Number),
  unit: expect.any(String),
  samples: expect.any(Number),
  spread: {
    min: expect.any(Number),
    p25: expect.any(Number),
    p75: expect.any(Number),
    max: expect.any(Number),
    mad: expect.any(Number),
  },
};

describe('bench harness (smoke)', () => {
  it(
    'runs every benchmark at a tiny size and writes the results JSON',
    { timeout: 180_000 },
    async () => {
      const { stdout } = await run(
        process.execPath,
        ['--import', 'tsx', 'bench/index.ts', '--smoke', '--out', out],
        { cwd: root, timeout: 170_000, maxBuffer: 16 << 20 },
      );
      for (const title of [
        '1. Planner pass',
        '2. Snapshots',
        '3. Designs',
        '4. Copy',
        '5. Overflow',
        '6. Event-loop',
        '9. Key hashing',
        '10. WebGPU',
        'Targets',
      ]) {
        expect(stdout).toContain(title);
      }
      const results = JSON.parse(readFileSync(path.join(out, 'kvoff-bench-smoke.json'), 'utf8'));
      expect(results).toMatchObject({
        schema: 'kvoff-bench/1',
        mode: 'smoke',
        date: expect.any(String),
        machine: {
          cpuModel: expect.any(String),
          cores: expect.any(Number),
          memoryBytes: expect.any(Number),
          nodeVersion: process.version,
        },
        git: { commit: expect.any(String), dirty: expect.any(Boolean) },
      });
      // No machine paths or host names in the file.
      const text = JSON.stringify(results);
      expect(text).not.toContain(root);
      // As a word: a short host name ("vm") is also part of words ("llvmpipe", the adapter).
      const host = os.hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      expect(text).not.toMatch(new RegExp(`\\b${host}\\b`));

      expect(results.planner.rows.length).toBeGreaterThan(0);
      for (const row of results.planner.rows) {
        expect(row.nsPerRequestGroup).toMatchObject(figureShape);
        expect(row.heapBytesPerPass).toMatchObject(figureShape);
      }
      for (const row of results.snapshot.rows)
        expect(row.snapshotsPerSecond).toMatchObject(figureShape);
      const designs = results.designs.rows.map((r: { design: string }) => r.design);
      expect(designs).toEqual(
        expect.arrayContaining(['a', 'b', 'c', 'd', 'aLean', 'bLeanBatched', 'cLean', 'floor']),
      );
      for (const row of results.designs.rows) {
        expect(row.eventsPerSecond).toMatchObject(figureShape);
        expect(row.latencyMsP99).toMatchObject(figureShape);
        expect(row.aSpeedup).toMatchObject(figureShape);
        expect(row.cpuNsPerEvent).toMatchObject(figureShape);
        expect(row.cpuOverFloor).toMatchObject(figureShape);
        expect(row.aLeanCpuAdvantage).toMatchObject(figureShape);
      }
      // The floor is the least any design spends: its two phases are measured apart.
      const floor = results.designs.rows.find((r: { design: string }) => r.design === 'floor');
      expect(floor.cpuOverFloor.median).toBe(1);
      // The hash stand-in a's hasher runs (the lean designs are handed keys), timed on the floor's thread.
      if (process.platform === 'linux') {
        expect(floor.hashCpuNsPerEvent).toMatchObject(figureShape);
        expect(floor.hashCpuNsPerEvent.median).toBeGreaterThan(0);
      }
      for (const row of results.copy.rows) expect(row.ratio).toMatchObject(figureShape);
      expect(results.scenario.offloadOn.holes).toBe(0);
      expect(results.scenario.offloadOn.verifyOk).toBe(true);
      expect(results.scenario.eventLoop.offloadOn.delayMsP99).toMatchObject(figureShape);
      // Both key hashes at every geometry, with the SHA-256 ÷ xxHash64 ratio.
      expect(results.hashing.rows).toHaveLength(6);
      for (const row of results.hashing.rows) expect(row.nsPerToken).toMatchObject(figureShape);
      expect(results.hashing.sha256OverXxh64).toHaveLength(3);
      const ids = results.targets.map((t: { id: string }) => t.id);
      expect(ids).toEqual(
        expect.arrayContaining([
          'designs-cpu-3w',
          'designs-latency-3w',
          'mechanism-cpu-3w',
          'full-path-cpu-3w',
          'latency-load-clean-3w',
          'latency-max-3w',
          'planner-idle-ns',
          'planner-idle-heap',
          'copy-ratio',
          'copy-scaling',
          'event-loop-p99',
          'scenario-on-over-off',
          'scenario-lookup-nonblocking',
          'scenario-holes',
          'hashing-16',
          'hashing-256',
        ]),
      );
      // Every design row carries the CPU figure; every threaded one the latency at load.
      for (const row of results.designs.rows) {
        expect(row.eventsPerCpuSecond).toMatchObject(figureShape);
        if (row.design !== 'd' && row.design !== 'floor')
          expect(row.loadLatencyMsP99).toMatchObject(figureShape);
      }
      expect(results.copy.scaling.length).toBeGreaterThan(0);
      // Both directions through the GPU thread beside the shared-memory backend.
      expect(results.webgpu.rows.map((r: { direction: string }) => r.direction)).toEqual([
        'gpu-to-host',
        'host-to-gpu',
      ]);
      for (const row of results.webgpu.rows) {
        expect(row.webgpuGbPerSecond).toMatchObject(figureShape);
        expect(row.ratio).toMatchObject(figureShape);
      }
      expect(results.webgpu.adapter.name).toEqual(expect.any(String));
      if (results.webgpu.adapter.software) expect(results.webgpu.note).toMatch(/not a GPU/);
      // The scenario on the WebGPU backend, paired on and off: clean, and a ratio.
      expect(results.webgpu.scenario).toMatchObject({
        wallOnOverOff: figureShape,
        holes: 0,
        mismatches: 0,
        verifyOk: true,
        leaksZero: true,
      });

      for (const row of results.copy.scaling)
        expect(row.poolOverBaselineScaling).toMatchObject(figureShape);

      // Every target (what was measured, why a miss) recomputes from the stored figures.
      const { targets, ...figures } = results as BenchResults;
      expect(allTargets(figures)).toEqual(targets);
      expect(renderMarkdown(results)).toContain(targets[0]!.measured);
    },
  );

  it('the committed quick results recompute from their figures, and docs/benchmarks.md shows them as drawn', () => {
    const file = JSON.parse(
      readFileSync(path.join(root, 'bench/results/kvoff-bench-quick.json'), 'utf8'),
    ) as BenchResults;
    const { targets, ...figures } = file;
    expect(allTargets(figures)).toEqual(targets);
    const doc = readFileSync(path.join(root, 'docs/benchmarks.md'), 'utf8');
    const from = doc.indexOf(QUICK_BLOCK_BEGIN);
    const to = doc.indexOf(QUICK_BLOCK_END);
    expect(from).toBeGreaterThan(0);
    expect(doc.slice(from + QUICK_BLOCK_BEGIN.length, to).trim()).toBe(renderMarkdown(file).trim());
  });
});
