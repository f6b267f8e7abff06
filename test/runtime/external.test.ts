// A host program feeding real events: the runtime runs the hasher, the store
// and the transfer pool; the test is the engine (scheduler and allocator roles)
// on the main thread, through runtime.external. Its chunks reach the tier with
// the right bytes, and the drain protocol frees everything.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import {
  IllegalTransitionError,
  InvalidArgumentError,
  RoleClaimedError,
} from '../../src/errors.js';
import { loadHashing, promptKeys } from '../../src/hashing.js';
import { attachExternal } from '../../src/runtime/external.js';
import { spawnWorker } from '../../src/runtime/worker-files.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { settle } from '../helpers/runtime.js';

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

describe('OffloadRuntime with external events', () => {
  it('stores exactly the chunks a host publishes, with verifiable bytes, and frees them after the drain', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    const host = rt.external!;
    expect(host).toBeDefined();
    await expect(rt.submit({ promptLength: 16 })).rejects.toBeInstanceOf(InvalidArgumentError);

    const hashing = await loadHashing();
    const tokens = Array.from({ length: 100 }, (_, i) => (i * 31 + 7) % 1000);
    const h = host.scheduler.open({ requestId: 42, promptTokens: tokens });
    // The engine's forward pass: 25 blocks of 4 tokens; each chunk (2 blocks) keyed like the hasher will.
    const blocks = host.pool.allocate(25)!;
    const keys = promptKeys(rt.config, hashing, tokens)[0]!;
    for (let p = 0; p < 24; p += 1) {
      const key = keys[Math.floor(p / 2)]!;
      host.roles.writeBlock(blocks[p]!, key, p);
    }
    // Blocks lag tokens: publish only 10 block IDs first (5 chunks ready), then the rest.
    host.allocator.appendBlocks(h, 0, blocks.slice(0, 10));
    host.scheduler.progress(h, 0, 100);
    host.roles.wake();
    await new Promise((r) => setTimeout(r, 30));
    host.allocator.appendBlocks(h, 0, blocks.slice(10));
    host.scheduler.progress(h, 100, 0);
    host.scheduler.appendTokens(h, [5]);
    host.scheduler.finish(h);
    await host.whenDrained(h);
    host.release(h);
    // A request that has not ended is never drained: releasing it is refused.
    const live = host.scheduler.open({ requestId: 43, promptTokens: [1, 2, 3] });
    expect(() => host.release(live)).toThrow(IllegalTransitionError);
    host.scheduler.abort(live);
    await host.whenDrained(live);
    host.release(live);
    await settle(rt);

    const report = await rt.verify();
    // 100 tokens -> 12 full chunks of 8 tokens (the 13th has 4 tokens).
    expect(report.entriesChecked).toBe(12);
    expect(report.mismatches).toBe(0);
    expect(report.holes).toBe(0);
    expect(rt.stats().chunksStored).toBe(12);
    await rt.close();
    expect(rt.leakReport()).toMatchObject({ blocksInUse: 0, pinsOutstanding: 0, slotsInUse: 0 });
  });

  it('attachExternal gives another thread the same views over the same memory', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    const other = attachExternal(resolveConfig(CONFIG), rt.buffers);
    const h = other.scheduler.open({ requestId: 7, promptTokens: [1, 2, 3, 4] });
    // The runtime's own views see the request the other attachment opened...
    expect(rt.external!.allocator.count(h, 0)).toBe(0);
    // ...but may not write the role the other attachment drives.
    expect(() => rt.external!.scheduler.appendTokens(h, [5])).toThrow(RoleClaimedError);
    other.scheduler.abort(h);
    await rt.external!.whenDrained(h);
    other.allocator.clear(h);
    other.scheduler.release(h);
    await rt.close();
    expect(rt.leakReport()?.slotsInUse).toBe(0);
  });

  it('a host engine in its own worker thread feeds events over the same memory', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    const worker = spawnWorker(new URL('../fixtures/external-host-worker.ts', import.meta.url), {
      workerData: { config: rt.config, buffers: rt.buffers, requests: 4 },
    });
    const result = await new Promise<{ chunks: number; inUse: number }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    await worker.terminate();
    expect(result.inUse).toBe(0);
    // 64, 80, 96, 112 tokens: 8 + 10 + 12 + 14 full chunks of 8 tokens.
    expect(result.chunks).toBe(44);
    await settle(rt);
    const report = await rt.verify();
    expect(report.entriesChecked).toBe(44);
    expect(report.mismatches).toBe(0);
    expect(report.holes).toBe(0);
    await rt.close();
    expect(rt.leakReport()).toMatchObject({ pinsOutstanding: 0, slotsInUse: 0 });
  });
});
