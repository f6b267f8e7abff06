// Regression: the soak failed a runtime that leaked nothing. It judged each
// thread's heap by the lowest heap-in-use sample per window, and that figure
// also counts garbage V8 has not collected yet: as V8 resized its heap over
// the run, main's floor rose 56 KB a minute (1.27x in 50 minutes) and the
// store's 1.35x in 8 minutes on a loaded machine, while a full collection
// left main's heap flat (1.001x; +7 KB between heap snapshots 340 s apart,
// all of it compiled code). Now every thread runs a full collection when
// asked (runtime.collectMemory(), under --expose-gc) and reports what is
// left (heapLiveBytes); the soak judges that. With the old judge the first
// case below fails (it saw 1.27x); the live heap of a real leak still fails.
import { describe, expect, it } from 'vitest';
import { judgeWorkers } from '../../bench/lib/soak.js';
import type { MemoryPoint } from '../../bench/lib/soak-samples.js';
import type { WorkerMemory } from '../../src/runtime/memory.js';
import { runNode } from '../helpers/cli.js';

const MIB = 1024 * 1024;

/** One sample a second for 600 s; each worker's figures a function of the time. */
function run(
  main: (atS: number) => WorkerMemory,
  store: (atS: number) => WorkerMemory,
): MemoryPoint[] {
  const points: MemoryPoint[] = [];
  for (let atS = 0; atS <= 600; atS += 1) {
    points.push({
      atS,
      lifecycles: atS * 900,
      jobsHeld: 8,
      memory: { rssBytes: 400 * MIB, main: main(atS), store: store(atS), transfer: [] },
    });
  }
  return points;
}

/** Heap in use saws between collections; its floor climbs 1.27x over the run (garbage V8 keeps longer). */
function sawing(atS: number): number {
  const floor = 8.5 * MIB * (1 + (0.27 * atS) / 600);
  return floor + (atS % 20) * 0.5 * MIB;
}

describe('regression: the soak counts uncollected garbage as heap growth', () => {
  it('a live heap that stays flat passes however the heap in use drifts', () => {
    const flat = (atS: number): WorkerMemory => ({
      heapUsedBytes: sawing(atS),
      externalBytes: MIB,
      heapLiveBytes: 8.6 * MIB + (atS % 7) * 1024,
    });
    const verdicts = judgeWorkers(run(flat, flat), 60, 0.1);
    expect(verdicts.map((v) => v.worker)).toEqual(['main', 'store']);
    for (const v of verdicts) {
      expect(v.ok).toBe(true);
      expect(v.heapRatioMax).toBeLessThan(1.01);
      // The drift is still reported, not judged: about 2.3 MiB over 9 minutes.
      expect(v.heapUsedFloorSlopeBytesPerMinute).toBeGreaterThan(200_000);
    }
  });

  it('a live heap that grows fails its worker, and a worker never collected fails too', () => {
    const flat = (atS: number): WorkerMemory => ({
      heapUsedBytes: sawing(atS),
      externalBytes: MIB,
      heapLiveBytes: 8.6 * MIB,
    });
    const leaking = (atS: number): WorkerMemory => ({
      heapUsedBytes: sawing(atS),
      externalBytes: MIB,
      heapLiveBytes: 8.6 * MIB * (1 + (0.3 * atS) / 600),
    });
    const [main, store] = judgeWorkers(run(flat, leaking), 60, 0.1);
    expect(main!.ok).toBe(true);
    expect(store!.ok).toBe(false);
    expect(store!.heapRatioMax).toBeGreaterThan(1.2);
    expect(store!.heapSlopeBytesPerMinute).toBeGreaterThan(200_000);

    const uncollected = (atS: number): WorkerMemory => ({
      heapUsedBytes: 8.6 * MIB + atS,
      externalBytes: MIB,
    });
    const [never] = judgeWorkers(run(uncollected, flat), 60, 0.1);
    expect(never!.ok).toBe(false);
    expect(never!.heapBaselineBytes).toBe(0);
  });
});

/**
 * A host that runs requests until every thread reported a live heap (at most
 * 50 rounds), then prints what collectMemory() returned and each thread's
 * figures. Each round ends a request, so every loop turns at least once.
 */
const HOST = `
const { OffloadRuntime } = await import(${JSON.stringify(new URL('../../src/runtime/runtime.ts', import.meta.url).href)});
const rt = await OffloadRuntime.start({ config: {
  groups: [{ kind: 'full', tokensPerBlock: 4 }], blocksPerChunk: 2, tokensPerHash: 4,
  maxRequests: 4, maxBlocksPerRequest: 64, gpuBlocks: 256, tierChunks: 64, bytesPerBlock: 16,
}, transferThreads: 1 });
const threads = (m) => [m.main, m.scheduler, m.hasher, m.allocator, m.store, ...m.transfer];
await rt.submit({ promptLength: 64, maxDecodeTokens: 4 });
const asked = rt.collectMemory();
let rounds = 0;
while (rounds < 50 && !threads(rt.stats().memory).every((w) => w?.heapLiveBytes !== undefined)) {
  await rt.submit({ promptLength: 64, maxDecodeTokens: 4 });
  await new Promise((r) => setTimeout(r, 100));
  rounds += 1;
}
const memory = threads(rt.stats().memory);
await rt.close();
console.log(JSON.stringify({ asked, memory }));
`;

interface HostOut {
  asked: boolean;
  memory: (WorkerMemory | undefined)[];
}

async function host(flags: string[]): Promise<HostOut> {
  const r = await runNode([...flags, '--import', 'tsx', '--input-type=module', '-e', HOST], {
    timeoutMs: 90_000,
  });
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout.trim()) as HostOut;
}

describe.concurrent('runtime.collectMemory()', () => {
  it('under --expose-gc every thread collects and reports its live heap', async () => {
    const out = await host(['--expose-gc']);
    expect(out.asked).toBe(true);
    // main, four roles, one copy thread.
    expect(out.memory).toHaveLength(6);
    for (const w of out.memory) {
      expect(w?.heapLiveBytes).toBeGreaterThan(MIB);
      expect(w?.heapLiveBytes).toBeLessThan(512 * MIB);
    }
  }, 120_000);

  it('without --expose-gc nothing is asked and no thread reports a live heap', async () => {
    const out = await host([]);
    expect(out.asked).toBe(false);
    expect(out.memory).toHaveLength(6);
    for (const w of out.memory) {
      expect(w?.heapUsedBytes).toBeGreaterThan(MIB);
      expect(w?.heapLiveBytes).toBeUndefined();
    }
  }, 120_000);
});
