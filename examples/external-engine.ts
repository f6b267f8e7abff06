// Your own engine: with `external: true` kvoff runs only the hasher, the store
// and the copy pool; this program is the scheduler and the allocator. It
// publishes tokens, block IDs and progress through the role views (one thread
// per role), writes its KV bytes into the GPU arena, and frees a request's
// blocks only after the store drained it. Run it with
// `node --import tsx examples/external-engine.ts` after `npm run build`.
import { OffloadRuntime, loadHashing, promptKeys } from 'kvoff';

const rt = await OffloadRuntime.start({
  config: { groups: [{ kind: 'full', tokensPerBlock: 16 }], tokensPerHash: 16, blocksPerChunk: 2 },
  external: true,
});
// `external: true` makes `rt.external` defined in the type, too.
const { scheduler, allocator, pool, roles } = rt.external;

const prompt = Array.from({ length: 320 }, (_, i) => i % 1000);
const h = scheduler.open({ requestId: 1, promptTokens: prompt });
const blocks = pool.allocate(20); // 320 tokens / 16 per block; undefined when the pool is short
if (blocks === undefined) throw new Error('GPU pool exhausted');

// The GPU arena is a SharedArrayBuffer (rt.buffers.gpuArena; roles.gpu views it):
// block b holds bytes [b * bytesPerBlock, (b + 1) * bytesPerBlock). A real
// engine's forward pass writes there (or your copy backend reads device memory
// instead). Here each block gets the bytes kvoff can verify: the expansion of
// its chunk's offload key, computed like the hasher computes it (the same
// namespace and cache salt: none here).
const keys = promptKeys(rt.config, await loadHashing(), prompt)[0]!;
blocks.forEach((block, position) => {
  roles.writeBlock(block, keys[Math.floor(position / rt.config.blocksPerChunk)]!, position);
});
allocator.appendBlocks(h, 0, blocks);
scheduler.progress(h, 0, 320); // 0 computed, 320 scheduled: 10 chunks offloadable
roles.wake(); // the hasher and the store look now (otherwise within 20 ms)

scheduler.appendTokens(h, [7]); // the sampled token
await rt.external.whenHashed(h); // optional: the hasher lags on purpose; a finish before
scheduler.finish(h); // its keys leaves the final pass waiting for them (bounded)
allocator.settle(h); // no more block IDs for this request: the final pass need not wait for any
await rt.external.whenDrained(h); // the store ran the request's final pass
rt.external.release(h); // blocks back to the pool (pinned ones wait), slot freed

const report = await rt.verify();
await rt.close(); // drains the copies, ends the workers
console.log('stored', rt.stats().chunksStored, 'verified', report.ok); // stored 10 verified true
if (rt.stats().chunksStored !== 10 || !report.ok) process.exit(1);
