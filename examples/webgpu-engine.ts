// An engine that holds its KV in WebGPU buffers (here: Dawn through the
// optional `webgpu` package) hands them to kvoff. A device belongs to the
// thread that opened it, so this thread serves the store's copies itself
// (WebGpuCopyServer.serve, on its event loop: nothing blocks); kvoff's store
// sends it copy jobs through shared rings. Run it with
// `node --import tsx examples/webgpu-engine.ts` (needs a Vulkan driver: on
// Debian 12, Mesa 25 from bookworm-backports; see scripts/webgpu-driver.sh).
import { OffloadRuntime, WebGpuCopyServer, loadHashing, promptKeys } from 'kvoff';
import { expandBlock } from 'kvoff/testing';
import { create, globals } from 'webgpu';

const rt = await OffloadRuntime.start({
  config: { groups: [{ kind: 'full', tokensPerBlock: 16 }], tokensPerHash: 16, blocksPerChunk: 2 },
  external: true,
  transferBackend: 'webgpu',
});
const { scheduler, allocator, pool } = rt.external;
const { gpuBlocks, bytesPerBlock } = rt.config;

// The engine's device and its KV: block b at byte b * bytesPerBlock of one buffer
// (several buffers: pass them all and blocksPerBuffer). Stores read it, loads write it.
Object.assign(globalThis, globals); // GPUBufferUsage and friends, as in a browser
const gpu = create([]);
const device = await (await gpu.requestAdapter())!.requestDevice();
const kv = device.createBuffer({
  size: gpuBlocks * bytesPerBlock,
  usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
});
const server = WebGpuCopyServer.serve(rt.webgpuRings!, { device, buffers: [kv] });

const prompt = Array.from({ length: 320 }, (_, i) => i % 1000);
const h = scheduler.open({ requestId: 1, promptTokens: prompt });
const blocks = pool.allocate(20);
if (blocks === undefined) throw new Error('GPU pool exhausted');

// The forward pass: each block gets bytes kvoff can verify (its chunk key's
// expansion). Written through the device's queue BEFORE the blocks are
// published: the store's copies are submitted to the same queue later, and a
// queue runs in submission order, so a copy reads what was written.
const keys = promptKeys(rt.config, await loadHashing(), prompt)[0]!;
const words = new Uint32Array(bytesPerBlock / 4);
blocks.forEach((block, position) => {
  const key = keys[Math.floor(position / rt.config.blocksPerChunk)]!;
  expandBlock(key, position % rt.config.blocksPerChunk, words);
  device.queue.writeBuffer(kv, block * bytesPerBlock, words);
});
allocator.appendBlocks(h, 0, blocks);
scheduler.progress(h, 0, 320);
rt.external.roles.wake();

scheduler.appendTokens(h, [7]);
await rt.external.whenHashed(h);
scheduler.finish(h);
allocator.settle(h);
await rt.external.whenDrained(h); // every copy's map was read into the tier
rt.external.release(h);

const report = await rt.verify(); // the tier holds what the GPU buffer held
await rt.close();
const served = await server.close(); // the engine's buffers and device stay its own
device.destroy();
console.log('stored', rt.stats().chunksStored, 'verified', report.ok); // stored 10 verified true
console.log('copy jobs served on this thread', served.storeJobs > 0); // copy jobs served on this thread true
if (rt.stats().chunksStored !== 10 || !report.ok) process.exit(1);
