// Regression: a host that never calls settle() (external mode, or the facade)
// left an ended request with lagging block IDs waiting up to 100,000 store
// visits. A store that keeps pace visits a waiting slot on every pass, so in
// threads that was minutes, and whenDrained() timed out after its 10 s bound
// with the request's blocks still held. The final wait is now bounded in time
// (finalWaitMsMax, 1 s by default); what is still missing then is counted as
// dropped (chunksDroppedUnready), never a hole.
import { describe, expect, it } from 'vitest';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { NO_LEAKS } from '../helpers/runtime.js';

const CONFIG = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  blocksPerChunk: 2,
  tokensPerHash: 4,
  maxRequests: 8,
  maxBlocksPerRequest: 128,
  gpuBlocks: 512,
  tierChunks: 256,
  bytesPerBlock: 64,
};

describe('an ended request whose host never settles', () => {
  it('drains within whenDrained()’s default bound; the chunks whose blocks never came are counted as dropped', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    const host = rt.external!;
    const hashing = await loadHashing();
    const tokens = Array.from({ length: 40 }, (_, i) => (i * 17 + 3) % 1000);
    const h = host.scheduler.open({ requestId: 1, promptTokens: tokens });
    // 10 blocks of 4 tokens make 5 chunks; the host publishes only 3 chunks' blocks.
    const blocks = host.pool.allocate(6)!;
    const keys = promptKeys(rt.config, hashing, tokens)[0]!;
    for (let p = 0; p < 6; p += 1) host.roles.writeBlock(blocks[p]!, keys[Math.floor(p / 2)]!, p);
    host.allocator.appendBlocks(h, 0, blocks);
    host.scheduler.progress(h, 40, 0);
    host.scheduler.appendTokens(h, [9]);
    host.scheduler.finish(h);
    host.roles.wake();
    // No settle(): the store cannot know no more block IDs will come. Before
    // the fix this rejected with TimeoutError after 10 s.
    await expect(host.whenDrained(h)).resolves.toBeUndefined();
    const stats = rt.stats();
    expect(stats.chunksStored).toBe(3);
    expect(stats.chunksDroppedUnready).toBe(2);
    expect(stats.holes).toBe(0);
    host.release(h);
    await rt.close();
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it('finalWaitMsMax is the bound: 0 drains at the first visit that finds a chunk lagging', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true, finalWaitMsMax: 0 });
    const host = rt.external!;
    const h = host.scheduler.open({
      requestId: 2,
      promptTokens: Array.from({ length: 16 }, (_, i) => i),
    });
    host.scheduler.progress(h, 16, 0);
    host.scheduler.appendTokens(h, [1]);
    host.scheduler.finish(h);
    host.roles.wake();
    await host.whenDrained(h, 5_000);
    expect(rt.stats().chunksDroppedUnready).toBe(2);
    host.release(h);
    await rt.close();
  });

  it('a bad finalWaitMsMax is refused before any worker starts', async () => {
    for (const bad of [-1, Number.NaN, '1000', 3_600_001]) {
      await expect(
        OffloadRuntime.start({ config: CONFIG, external: true, finalWaitMsMax: bad as number }),
      ).rejects.toMatchObject({ code: 'KVOFF_INVALID_ARGUMENT' });
    }
  });
});
