// Regression (issue 10, item 5): two threads driving one role were not
// detected. Two schedulers opened the same slot (an even generation, both
// handles stale, tokens overwritten); two allocators appending 60,000 blocks
// ended with 30,530 and 38,908. Now each role's views claim the role's owner
// word with compareExchange at their first write; a second claimant is
// refused with RoleClaimedError before it writes anything.
import { describe, expect, it } from 'vitest';
import { RoleClaimedError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { spawnWorker } from '../../src/runtime/worker-files.js';
import { SchedulerRole } from '../../src/roles/scheduler.js';
import { AllocatorRole } from '../../src/roles/allocator.js';
import { local, tokens } from '../helpers/local.js';

const CONFIG = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  blocksPerChunk: 2,
  tokensPerHash: 4,
  maxRequests: 16,
  maxBlocksPerRequest: 4096,
  gpuBlocks: 8192,
  tierChunks: 64,
  bytesPerBlock: 16,
};

interface Result {
  done: number;
  error?: string;
}

/** Starts two claimant workers, releases them together, returns what each did. */
async function race(
  rt: OffloadRuntime,
  role: 'scheduler' | 'allocator',
  extra: (i: number) => Record<string, unknown>,
): Promise<Result[]> {
  const start = new SharedArrayBuffer(8);
  const flag = new Int32Array(start);
  const workers = [0, 1].map((i) =>
    spawnWorker(new URL('../fixtures/role-claimant-worker.ts', import.meta.url), {
      workerData: { config: rt.config, buffers: rt.buffers, role, start, ...extra(i) },
    }),
  );
  const results = workers.map(
    (w) =>
      new Promise<Result>((resolve, reject) => {
        w.once('message', resolve);
        w.once('error', reject);
      }),
  );
  const deadline = Date.now() + 20_000;
  while (Atomics.load(flag, 1) < 2 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 2));
  }
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
  try {
    return await Promise.all(results);
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

describe('regression: two threads driving one role', () => {
  it('two scheduler threads: one opens its requests, the other is refused with RoleClaimedError', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    try {
      const results = await race(rt, 'scheduler', () => ({ firstBlock: 0, count: 4 }));
      const winners = results.filter((r) => r.error === undefined);
      const losers = results.filter((r) => r.error !== undefined);
      expect(winners).toHaveLength(1);
      expect(winners[0]!.done).toBe(4);
      expect(losers).toEqual([{ done: 0, error: 'RoleClaimedError' }]);
      // Exactly the winner's four requests hold slots, each with an odd generation.
      const state = rt.external!.roles.state;
      let held = 0;
      for (let s = 0; s < CONFIG.maxRequests; s += 1) {
        const gen = Atomics.load(state.control, state.schedulerWord(s, 0));
        if (gen % 2 === 1) held += 1;
        expect(gen).toBeLessThanOrEqual(1);
      }
      expect(held).toBe(4);
      // The runtime's own view (main thread) is refused too: the role is taken.
      expect(() => rt.external!.scheduler.open({ requestId: 9, promptTokens: [1, 2, 3] })).toThrow(
        RoleClaimedError,
      );
    } finally {
      await rt.close();
    }
  });

  it('two allocator threads appending to one request: only the claimant appends, the count is exact', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    try {
      const h = rt.external!.scheduler.open({ requestId: 1, promptTokens: tokens(8) });
      const results = await race(rt, 'allocator', (i) => ({
        handle: h,
        firstBlock: 1 + i * 2048,
        count: 2000,
      }));
      const winners = results.filter((r) => r.error === undefined);
      expect(winners).toHaveLength(1);
      expect(winners[0]!.done).toBe(2000);
      expect(results.filter((r) => r.error !== undefined)).toEqual([
        { done: 0, error: 'RoleClaimedError' },
      ]);
      expect(rt.external!.allocator.count(h, 0)).toBe(2000);
    } finally {
      await rt.close();
    }
  });

  it('one thread, two views of a role: the second view may read but not write', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    const second = new SchedulerRole(lo.state);
    expect(() => second.open({ requestId: 2, promptTokens: tokens(8) })).toThrow(RoleClaimedError);
    expect(() => second.finish(h)).toThrow(RoleClaimedError);
    lo.appendBlocks(h, 0, [3]);
    const otherAllocator = new AllocatorRole(lo.state);
    expect(otherAllocator.count(h, 0)).toBe(1);
    expect(() => otherAllocator.appendBlocks(h, 0, [4])).toThrow(RoleClaimedError);
    expect(lo.groupProgress(h, 0).blocks).toBe(1);
  });
});
