// The soak's sample log keeps its figures in one array laid out before the
// run (the harness shares the main thread whose heap it judges) and gives
// them back as the points the judge reads.
import { describe, expect, it } from 'vitest';
import { SampleLog } from '../../bench/lib/soak-samples.js';
import type { RuntimeMemory } from '../../src/runtime/memory.js';

function memory(i: number, withStore: boolean): RuntimeMemory {
  // A live heap only from the second sample on and not for every worker: absent stays absent.
  const w = (k: number) => ({
    heapUsedBytes: 1_000_000 + i * 10 + k,
    externalBytes: 5_000 + k,
    ...(i > 0 && k % 2 === 0 ? { heapLiveBytes: 900_000 + i * 10 + k } : {}),
  });
  return {
    rssBytes: 300_000_000 + i,
    main: w(0),
    scheduler: w(1),
    hasher: w(2),
    allocator: w(3),
    ...(withStore ? { store: w(4) } : {}),
    transfer: [w(5), w(6)],
  };
}

describe('soak sample log', () => {
  it('gives back every sample as it was added, a worker that had not sampled left out', () => {
    const log = new SampleLog(10, 2);
    for (let i = 0; i < 4; i += 1) log.add(i + 0.5, i * 100, i % 3, memory(i, i !== 2));
    const points = log.points();
    expect(points).toHaveLength(4);
    points.forEach((p, i) => {
      expect(p).toEqual({
        atS: i + 0.5,
        lifecycles: i * 100,
        jobsHeld: i % 3,
        memory: memory(i, i !== 2),
      });
    });
  });

  it('a full log counts the samples it refused and keeps the ones it has', () => {
    const log = new SampleLog(2, 1);
    for (let i = 0; i < 5; i += 1) log.add(i, i, 0, memory(i, true));
    expect(log.dropped).toBe(3);
    expect(log.points().map((p) => p.atS)).toEqual([0, 1]);
  });
});
