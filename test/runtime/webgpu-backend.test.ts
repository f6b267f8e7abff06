// The WebGPU transfer backend on a real device (in CI: Mesa's llvmpipe, a
// software Vulkan device, installed by scripts/webgpu-driver.sh): the KV arena
// in GPU buffers on the GPU thread, KV written by the WGSL kernel, stores
// through staging maps into the host tier, loads back through upload buffers,
// and the failures (a failed map, a lost device) that must fail a job and not
// the backend. One GPU thread serves the whole file: opening a device and
// compiling the kernels on llvmpipe takes seconds.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expandBlock } from '../../src/bytes.js';
import { tierBlockWords, tierChunkMatches } from '../../src/copy.js';
import { InvalidArgumentError, WebGpuUnavailableError } from '../../src/errors.js';
import type { StoreJob } from '../../src/job.js';
import { pinBlocks, pinCount } from '../../src/pins.js';
import type { TransferCompletion } from '../../src/runtime/backend.js';
import { Doorbell } from '../../src/runtime/doorbell.js';
import {
  RING_BELL,
  RING_STOP,
  TASK_FAULT,
  encodeLoadTask,
  encodeStoreTask,
} from '../../src/runtime/transfer.js';
import type { TransferArenas } from '../../src/runtime/transfer.js';
import { WebGpuTransferBackend, createGpuThreadSpec } from '../../src/runtime/webgpu-backend.js';
import { GPU_BUFFER_USAGE, GPU_MAP_MODE } from '../../src/runtime/webgpu-device.js';
import { WebGpuCopyServer } from '../../src/runtime/webgpu-host.js';
import { GpuArena } from '../../src/runtime/webgpu-arena.js';
import { GpuCopyLoop } from '../../src/runtime/webgpu-loop.js';
import { GpuKvClient } from '../../src/runtime/webgpu-kv.js';
import type { KvAnswer } from '../../src/runtime/webgpu-kv.js';
import { GPU_HOLD_MAPS, GPU_LOSE_DEVICE, GPU_MAPS_HELD } from '../../src/runtime/webgpu-loop.js';
import type { GpuThreadSpec } from '../../src/runtime/webgpu-thread.js';

const run = promisify(execFile);
const WORDS_PER_BLOCK = 64;
const BLOCKS_PER_CHUNK = 4;
const GPU_BLOCKS = 128;
const TIER_CHUNKS = 16;
const WAIT_MS_MAX = 30_000;

function makeArenas(): TransferArenas {
  return {
    gpuArena: new SharedArrayBuffer(GPU_BLOCKS * WORDS_PER_BLOCK * 4),
    tierArena: new SharedArrayBuffer(TIER_CHUNKS * BLOCKS_PER_CHUNK * WORDS_PER_BLOCK * 4),
    pins: new SharedArrayBuffer(GPU_BLOCKS * 4),
    wordsPerBlock: WORDS_PER_BLOCK,
    blocksPerChunk: BLOCKS_PER_CHUNK,
  };
}

const geometry = { wordsPerBlock: WORDS_PER_BLOCK, blocksPerChunk: BLOCKS_PER_CHUNK };

/** A store job of whole chunks: chunk i of `chunks` is `blocks[i]` into tier slot `slots[i]`. */
function storeJob(
  jobId: number,
  chunks: readonly { key: bigint; slot: number; blocks: number[] }[],
): StoreJob {
  return {
    jobId,
    slot: 0,
    generation: 1,
    requestId: 1,
    chunks: chunks.map((c, i) => ({
      group: 0,
      chunk: i,
      key: c.key,
      tierSlot: c.slot,
      blocks: c.blocks,
      positions: c.blocks.map((_, p) => i * BLOCKS_PER_CHUNK + p),
    })),
  };
}

function kvEntries(key: bigint, blocks: readonly number[]) {
  return blocks.map((block, position) => ({ block, key, position }));
}

async function until<T>(what: string, poll: () => T | undefined): Promise<T> {
  const deadline = Date.now() + WAIT_MS_MAX;
  for (;;) {
    const v = poll();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

describe('WebGPU transfer backend (GPU thread, real device)', () => {
  const arenas = makeArenas();
  const pins = new Int32Array(arenas.pins);
  const tier = new Uint32Array(arenas.tierArena);
  const bell = new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
  let backend: WebGpuTransferBackend;
  let spec: GpuThreadSpec;
  let kv: GpuKvClient;
  let words: Int32Array;
  let nextJob = 1;
  let nextTag = 1;

  beforeAll(async () => {
    backend = await WebGpuTransferBackend.start(arenas, { completionBell: bell });
    spec = backend.thread!.spec;
    kv = new GpuKvClient(spec, spec.words);
    words = new Int32Array(spec.words);
  });
  afterAll(async () => {
    await backend?.close();
  });

  async function completion(): Promise<TransferCompletion> {
    let got: TransferCompletion[] = [];
    return until('a completion', () => {
      if (got.length === 0) got = backend.takeCompletions();
      return got.shift();
    });
  }

  async function check(entries: ReturnType<typeof kvEntries>): Promise<KvAnswer> {
    const tag = nextTag++;
    expect(kv.check(tag, entries)).toBe(true);
    return until(`KV check ${tag}`, () => kv.takeAnswers().find((a) => a.tag === tag));
  }

  it('names its adapter', () => {
    expect(backend.name).toBe('webgpu');
    expect(backend.adapter?.name.length).toBeGreaterThan(0);
  });

  it('stores the KV its kernel wrote, and releases pins only after the GPU copy completed and its map was read', async () => {
    const a = { key: 0x1234_5678_9abc_def0n, slot: 2, blocks: [4, 5, 6, 7] };
    // Not contiguous: one copy per run (40-41, 43, 42).
    const b = { key: 0xfeed_beef_0000_0001n, slot: 5, blocks: [40, 41, 43, 42] };
    expect(kv.write([...kvEntries(a.key, a.blocks), ...kvEntries(b.key, b.blocks)])).toBe(8);
    const blocks = [...a.blocks, ...b.blocks];
    pinBlocks(pins, blocks);
    Atomics.store(words, GPU_HOLD_MAPS, 1);
    const heldBefore = Atomics.load(words, GPU_MAPS_HELD);
    backend.submit(encodeStoreTask(storeJob(nextJob++, [a, b]), true, 0));
    await until('the staging map', () =>
      Atomics.load(words, GPU_MAPS_HELD) > heldBefore ? true : undefined,
    );
    // The copy is done on the GPU and mapped, but not read: every source block is still pinned.
    expect(blocks.map((x) => pinCount(pins, x))).toEqual(blocks.map(() => 1));
    expect(backend.takeCompletions()).toEqual([]);
    Atomics.store(words, GPU_HOLD_MAPS, 0);
    const done = await completion();
    expect(done).toMatchObject({ kind: 'store', ok: true, bytes: 8 * WORDS_PER_BLOCK * 4 });
    expect(blocks.map((x) => pinCount(pins, x))).toEqual(blocks.map(() => 0));
    expect(tierChunkMatches(tier, geometry, a.slot, a.key, [0, 1, 2, 3])).toBe(true);
    expect(tierChunkMatches(tier, geometry, b.slot, b.key, [0, 1, 2, 3])).toBe(true);
    expect(backend.inFlight).toBe(0);
  });

  it('loads tier slots back into GPU blocks, which the GPU check finds to be their keys', async () => {
    const key = 0x0bad_cafe_1234_0000n;
    const slot = 9;
    for (let p = 0; p < BLOCKS_PER_CHUNK; p += 1) {
      expandBlock(key, p, tierBlockWords(tier, geometry, slot, p));
    }
    const blocks = [100, 101, 102, 110];
    const load = encodeLoadTask(
      -1,
      blocks.map((block, p) => ({ tierSlot: slot, chunkPosition: p, block })),
      0,
    );
    backend.submit(load);
    expect(await completion()).toMatchObject({ kind: 'load', ok: true, jobId: -1 });
    expect(await check(kvEntries(key, blocks))).toMatchObject({ mismatchedBlocks: 0 });
    // The check can fail: another key's expansion mismatches in every block.
    expect(await check(kvEntries(key + 1n, blocks))).toMatchObject({ mismatchedBlocks: 4 });
  });

  it('fails a job whose staging map fails, releasing its pins, and copies the next job', async () => {
    const c = { key: 77n, slot: 3, blocks: [20, 21, 22, 23] };
    kv.write(kvEntries(c.key, c.blocks));
    pinBlocks(pins, c.blocks);
    const task = encodeStoreTask(storeJob(nextJob++, [c]), true, 0);
    task[0] = TASK_FAULT; // its staging buffer is destroyed under the map
    backend.submit(task);
    const failed = await completion();
    expect(failed.ok).toBe(false);
    expect(String(failed.error)).toMatch(/staging map failed/);
    expect(c.blocks.map((x) => pinCount(pins, x))).toEqual([0, 0, 0, 0]);
    pinBlocks(pins, c.blocks);
    backend.submit(encodeStoreTask(storeJob(nextJob++, [c]), true, 0));
    expect(await completion()).toMatchObject({ ok: true });
    expect(tierChunkMatches(tier, geometry, c.slot, c.key, [0, 1, 2, 3])).toBe(true);
    expect(c.blocks.map((x) => pinCount(pins, x))).toEqual([0, 0, 0, 0]);
  });

  // Last: the device does not come back.
  it('fails every job after the device is lost, releasing pins, without failing the backend', async () => {
    const c = { key: 99n, slot: 7, blocks: [60, 61, 62, 63] };
    kv.write(kvEntries(c.key, c.blocks));
    pinBlocks(pins, c.blocks);
    // Held at the map, then the device goes: the copy in flight fails too.
    Atomics.store(words, GPU_HOLD_MAPS, 1);
    const heldBefore = Atomics.load(words, GPU_MAPS_HELD);
    backend.submit(encodeStoreTask(storeJob(nextJob++, [c]), true, 0));
    await until('the staging map', () =>
      Atomics.load(words, GPU_MAPS_HELD) > heldBefore ? true : undefined,
    );
    Atomics.store(words, GPU_LOSE_DEVICE, 1);
    Atomics.add(words, 0, 1);
    Atomics.notify(words, 0);
    Atomics.store(words, GPU_HOLD_MAPS, 0);
    const first = await completion();
    pinBlocks(pins, c.blocks);
    backend.submit(encodeStoreTask(storeJob(nextJob++, [c]), true, 0));
    const second = await completion();
    expect(second.ok).toBe(false);
    expect(String(second.error)).toMatch(/device lost/i);
    expect(c.blocks.map((x) => pinCount(pins, x))).toEqual([0, 0, 0, 0]);
    // The first either finished reading before the loss or failed with it: never pins left.
    expect(typeof first.ok).toBe('boolean');
    const answer = await check(kvEntries(c.key, c.blocks));
    expect(answer.mismatchedBlocks).toBe(-1);
    expect(backend.inFlight).toBe(0);
  });
});

describe('WebGPU backend start-up', () => {
  it('rejects with WebGpuUnavailableError naming the package when it cannot be imported', async () => {
    const err = await WebGpuTransferBackend.start(makeArenas(), {
      device: { packageName: 'kvoff-test-no-such-webgpu-package' },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WebGpuUnavailableError);
    expect(err).toMatchObject({ code: 'KVOFF_WEBGPU_UNAVAILABLE', missing: 'package' });
    expect((err as Error).message).toMatch(/npm install webgpu/);
  });
});

describe('WebGPU backend without a Vulkan driver', () => {
  it('rejects with WebGpuUnavailableError naming the driver when no adapter is found', async () => {
    // The Vulkan loader finds no driver at all: what a machine without Mesa's sees.
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', 'test/fixtures/webgpu-start.ts'],
      {
        env: {
          ...process.env,
          VK_ICD_FILENAMES: '/nonexistent/icd.json',
          VK_DRIVER_FILES: '/nonexistent/icd.json',
        },
        timeout: 60_000,
      },
    );
    const out = JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, string>;
    expect(out).toMatchObject({
      name: 'WebGpuUnavailableError',
      code: 'KVOFF_WEBGPU_UNAVAILABLE',
      missing: 'adapter',
    });
    expect(out.message).toMatch(/mesa-vulkan-drivers 25 or later/);
  });
});

describe("an engine's own WebGPU buffers, served on its own thread", () => {
  const arenas = makeArenas();
  const pins = new Int32Array(arenas.pins);
  const tier = new Uint32Array(arenas.tierArena);
  const BLOCKS_PER_BUFFER = 32;
  const BYTES = WORDS_PER_BLOCK * 4;
  let gpu: GPU | undefined;
  let device: GPUDevice;
  let buffers: GPUBuffer[];
  let rings: GpuThreadSpec;
  let backend: WebGpuTransferBackend;
  let server: WebGpuCopyServer;

  beforeAll(async () => {
    // The engine's side, as an engine in Node would have it: its own device from the package.
    const { create } = await import('webgpu');
    gpu = create([]);
    const adapter = await gpu.requestAdapter();
    device = await adapter!.requestDevice();
    buffers = Array.from({ length: GPU_BLOCKS / BLOCKS_PER_BUFFER }, () =>
      device.createBuffer({
        size: BLOCKS_PER_BUFFER * BYTES,
        usage: GPU_BUFFER_USAGE.STORAGE | GPU_BUFFER_USAGE.COPY_SRC | GPU_BUFFER_USAGE.COPY_DST,
      }),
    );
    rings = createGpuThreadSpec(arenas);
    backend = WebGpuTransferBackend.attach(rings);
    server = WebGpuCopyServer.serve(rings, { device, buffers, blocksPerBuffer: BLOCKS_PER_BUFFER });
  });
  afterAll(async () => {
    await server?.close();
    device?.destroy();
    gpu = undefined; // Dawn's instance keeps a process alive while referenced
  });

  /** What the engine's forward pass leaves in block `block`: its key's expansion. */
  function engineWrites(block: number, key: bigint, position: number): void {
    const words = new Uint32Array(WORDS_PER_BLOCK); // Dawn takes no SharedArrayBuffer views
    expandBlock(key, position, words);
    const buffer = buffers[Math.floor(block / BLOCKS_PER_BUFFER)]!;
    device.queue.writeBuffer(buffer, (block % BLOCKS_PER_BUFFER) * BYTES, words);
  }

  async function engineReads(block: number): Promise<Uint32Array> {
    const staging = device.createBuffer({
      size: BYTES,
      usage: GPU_BUFFER_USAGE.MAP_READ | GPU_BUFFER_USAGE.COPY_DST,
    });
    const encoder = device.createCommandEncoder();
    const buffer = buffers[Math.floor(block / BLOCKS_PER_BUFFER)]!;
    encoder.copyBufferToBuffer(buffer, (block % BLOCKS_PER_BUFFER) * BYTES, staging, 0, BYTES);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(GPU_MAP_MODE.READ);
    const words = new Uint32Array(staging.getMappedRange().slice(0));
    staging.destroy();
    return words;
  }

  async function completion(): Promise<TransferCompletion> {
    let got: TransferCompletion[] = [];
    return until('a completion', () => {
      if (got.length === 0) got = backend.takeCompletions();
      return got.shift();
    });
  }

  it('stores blocks that span two of its buffers into the tier, and loads them back into them', async () => {
    const key = 0x5eed_0000_1111_2222n;
    const blocks = [30, 31, 32, 33]; // buffer 0's last two, buffer 1's first two
    blocks.forEach((b, p) => engineWrites(b, key, p));
    pinBlocks(pins, blocks);
    backend.submit(encodeStoreTask(storeJob(1, [{ key, slot: 4, blocks }]), true, 0));
    expect(await completion()).toMatchObject({ kind: 'store', ok: true, bytes: 4 * BYTES });
    expect(tierChunkMatches(tier, geometry, 4, key, [0, 1, 2, 3])).toBe(true);
    expect(blocks.map((b) => pinCount(pins, b))).toEqual([0, 0, 0, 0]);

    const into = [90, 91, 100, 101];
    backend.submit(
      encodeLoadTask(
        -1,
        into.map((block, p) => ({ tierSlot: 4, chunkPosition: p, block })),
        0,
      ),
    );
    expect(await completion()).toMatchObject({ kind: 'load', ok: true });
    for (const [p, block] of into.entries()) {
      expect(Array.from(await engineReads(block))).toEqual(
        Array.from(tierBlockWords(tier, geometry, 4, p)),
      );
    }
  });

  it('starts a copy only after the KV writes pushed before it, even when both wait in the rings', async () => {
    // kvoff's own loop and arena on this thread: both pushes land before the loop's next turn.
    const own = makeArenas();
    const ownRings = createGpuThreadSpec(own);
    const loop = new GpuCopyLoop(
      ownRings,
      device,
      GpuArena.create(device, { blocks: GPU_BLOCKS, bytesPerBlock: BYTES }),
      true,
    );
    const running = loop.run();
    const ownBackend = WebGpuTransferBackend.attach(ownRings);
    const ownKv = new GpuKvClient(ownRings, ownRings.words);
    const key = 0x0dde_1234_5678_9abcn;
    const blocks = [8, 9, 10, 11];
    try {
      expect(ownKv.write(kvEntries(key, blocks))).toBe(4);
      ownBackend.submit(encodeStoreTask(storeJob(1, [{ key, slot: 6, blocks }]), false, 0));
      const done = await until('the store', () => ownBackend.takeCompletions()[0]);
      expect(done.ok).toBe(true);
      expect(tierChunkMatches(new Uint32Array(own.tierArena), geometry, 6, key, [0, 1, 2, 3])).toBe(
        true,
      );
    } finally {
      const words = new Int32Array(ownRings.words);
      Atomics.store(words, RING_STOP, 1);
      new Doorbell(words, RING_BELL).ring();
      await running;
    }
  });

  it('refuses buffers that do not hold the blocks or cannot be copied, serving nothing', () => {
    expect(() => WebGpuCopyServer.serve(rings, { device, buffers: buffers.slice(1) })).toThrow(
      InvalidArgumentError,
    );
    const readOnly = device.createBuffer({
      size: GPU_BLOCKS * BYTES,
      usage: GPU_BUFFER_USAGE.STORAGE | GPU_BUFFER_USAGE.COPY_SRC,
    });
    expect(() => WebGpuCopyServer.serve(rings, { device, buffers: [readOnly] })).toThrow(
      /COPY_SRC and COPY_DST/,
    );
    readOnly.destroy();
  });
});
