// Store and load tasks (src/runtime/transfer.ts's layouts) against the GPU
// arena. A store is one command encoder of copyBufferToBuffer, one copy per
// contiguous run of source blocks, into pooled staging buffers; it is
// submitted, the staging buffers are mapped asynchronously, and only once the
// map resolved (the GPU copy has completed) are the bytes copied into the
// job's host-tier slots and the source blocks unpinned. A load fills mapped
// upload buffers from the tier slots, copies them into the arena's blocks and
// completes when the queue has done that work.
//
// Everything that reaches the queue is submitted synchronously, before the
// first await: the GPU thread relies on it to order the engine's KV writes
// before the copies that read them (one queue executes in submission order).
//
// No map may still be pending when the thread ends: Dawn's Node binding
// aborts the whole process ("Promise not resolved or rejected: mapAsync()")
// when it drops a map's callback at teardown. So a store waits for every one
// of its maps to settle, even after one failed, and the maps a load leaves
// running (its upload buffers mapping again) are counted in `mapsPending`,
// which the GPU thread waits out before it ends.
import { unpinBlocks } from '../pins.js';
import { TASK_FAULT, TASK_LOAD, TASK_STORE, taskUnpins } from './transfer.js';
import { GpuArena, StagingPool } from './webgpu-arena.js';
import type { BlockRun } from './webgpu-arena.js';
import { GPU_MAP_MODE, describe, openErrorScope } from './webgpu-device.js';

/** Largest staging buffer: a bigger job is cut into several (a block bigger than this gets its own). */
const SEGMENT_BYTES_MAX = 64 << 20;
/** Idle staging kept per pool. */
const IDLE_BYTES_MAX = 64 << 20;

/** The host side a copy reads and writes: the tier arena and the pin counts (shared memory). */
export interface HostArenas {
  readonly tier: Uint32Array;
  readonly pins: Int32Array;
  readonly wordsPerBlock: number;
  readonly blocksPerChunk: number;
}

/**
 * Test-only: lets a test see a store whose GPU copy has completed and whose
 * staging map resolved, before its bytes are read and its pins released.
 * `held()` is called then, and the read waits for `release()` to resolve.
 */
export interface MapHold {
  readonly active: () => boolean;
  readonly held: () => void;
  readonly release: () => Promise<void>;
}

interface Segment {
  readonly staging: GPUBuffer;
  readonly bytes: number;
  /** Items [from, to) of the task's block list. */
  readonly from: number;
  readonly to: number;
}

export class GpuCopier {
  readonly arena: GpuArena;
  private readonly device: GPUDevice;
  private readonly host: HostArenas;
  private readonly reads: StagingPool;
  private readonly uploads: StagingPool;
  private readonly hold: MapHold | undefined;
  private lost: string | undefined;
  /** Upload buffers mapping again after their load (see the head of this file). */
  private remaps = 0;

  constructor(device: GPUDevice, arena: GpuArena, host: HostArenas, hold?: MapHold) {
    this.device = device;
    this.arena = arena;
    this.host = host;
    this.hold = hold;
    this.reads = new StagingPool(device, 'read', IDLE_BYTES_MAX);
    this.uploads = new StagingPool(device, 'upload', IDLE_BYTES_MAX);
    void device.lost.then((info) => {
      this.lost ??= `WebGPU device lost (${info.reason}): ${info.message || 'no message'}`;
    });
  }

  /** The device is being destroyed on purpose: no copy starts from now on. */
  markLost(reason: string): void {
    this.lost ??= `WebGPU device lost (destroyed): ${reason}`;
  }

  /** Maps still pending that no task awaits: the thread must not end before they settle. */
  get mapsPending(): number {
    return this.remaps;
  }

  /** Why the device is gone, once it is. */
  get lostReason(): string | undefined {
    return this.lost;
  }

  /** Bytes a task moves (what the GPU thread budgets staging by). */
  taskBytes(task: Int32Array): number {
    const kind = task[0];
    const blocks = kind === TASK_LOAD ? task[4]! : storeBlockCount(task);
    return blocks * this.arena.bytesPerBlock;
  }

  /** Runs a store or load task; resolves with the bytes copied. A store's pins are released however it ends. */
  run(task: Int32Array): Promise<number> {
    const kind = task[0];
    if (kind === TASK_LOAD) return this.load(task);
    if (kind !== TASK_STORE && kind !== TASK_FAULT) {
      return Promise.reject(new Error(`transfer task kind ${kind} is unknown`));
    }
    return this.store(task);
  }

  destroy(): void {
    this.reads.destroy();
    this.uploads.destroy();
    this.arena.destroy();
  }

  private async store(task: Int32Array): Promise<number> {
    const { blocks, tierWords } = parseStore(task, this.host);
    const unpin = taskUnpins(task);
    const segments: Segment[] = [];
    let scope: ReturnType<typeof openErrorScope> | undefined;
    try {
      if (this.lost !== undefined) throw new Error(this.lost);
      const device = this.device;
      scope = openErrorScope(device);
      const encoder = device.createCommandEncoder();
      for (const seg of this.segment(blocks.length)) {
        const staging = this.reads.acquire(seg.bytes);
        segments.push({ ...seg, staging });
        for (const r of this.arena.runs(blocks.subarray(seg.from, seg.to))) {
          copyRun(encoder, this.arena.buffers[r.buffer]!, r, staging, 'out');
        }
      }
      device.queue.submit([encoder.finish()]);
      // Test-only: a map that fails, as it does when its buffer is destroyed under it.
      if (task[0] === TASK_FAULT) segments[0]?.staging.destroy();
      const read = GPU_MAP_MODE.READ;
      // Settled, all of them, before the task ends (see the head of this file).
      const maps = Promise.allSettled(segments.map((s) => s.staging.mapAsync(read, 0, s.bytes)));
      const rejected = scope.close();
      const [refusal, mapped] = await Promise.all([rejected, maps]);
      const failed = mapped.find((m) => m.status === 'rejected');
      if (failed !== undefined) throw new Error(`staging map failed: ${describe(failed.reason)}`);
      // A copy the device refused leaves the staging bytes stale: never read them.
      if (refusal !== undefined) throw new Error(`store copy refused: ${refusal}`);
      const delayMs = task[3]!;
      if (delayMs > 0) await sleep(delayMs);
      if (this.hold?.active()) {
        this.hold.held();
        await this.hold.release();
      }
      const w = this.host.wordsPerBlock;
      for (const s of segments) {
        const words = new Uint32Array(s.staging.getMappedRange(0, s.bytes));
        for (let i = s.from; i < s.to; i += 1) {
          const at = (i - s.from) * w;
          this.host.tier.set(words.subarray(at, at + w), tierWords[i]!);
        }
        s.staging.unmap();
      }
      for (const s of segments.splice(0)) this.reads.release(s.staging);
      return blocks.length * this.arena.bytesPerBlock;
    } finally {
      // Balanced even when encoding threw (a no-op once closed).
      void scope?.close();
      // A failed copy's staging may hold anything: never reused.
      for (const s of segments) this.reads.discard(s.staging);
      // After the map was read, or after the copy failed: the GPU reads the
      // block no more (a later write to it is queued after this copy).
      if (unpin) unpinBlocks(this.host.pins, blocks);
    }
  }

  private async load(task: Int32Array): Promise<number> {
    const { blocks, tierWords } = parseLoad(task, this.host);
    if (this.lost !== undefined) throw new Error(this.lost);
    const device = this.device;
    const segments: Segment[] = [];
    const w = this.host.wordsPerBlock;
    const scope = openErrorScope(device);
    const encoder = device.createCommandEncoder();
    try {
      for (const seg of this.segment(blocks.length)) {
        const staging = this.uploads.acquire(seg.bytes);
        segments.push({ ...seg, staging });
        // The tier is shared memory, which Dawn refuses: bytes cross through the mapped range.
        const words = new Uint32Array(staging.getMappedRange(0, seg.bytes));
        for (let i = seg.from; i < seg.to; i += 1) {
          const at = tierWords[i]!;
          words.set(this.host.tier.subarray(at, at + w), (i - seg.from) * w);
        }
        staging.unmap();
        for (const r of this.arena.runs(blocks.subarray(seg.from, seg.to))) {
          copyRun(encoder, this.arena.buffers[r.buffer]!, r, staging, 'in');
        }
      }
      device.queue.submit([encoder.finish()]);
      const rejected = scope.close();
      const [refusal] = await Promise.all([rejected, device.queue.onSubmittedWorkDone()]);
      if (refusal !== undefined) throw new Error(`load copy refused: ${refusal}`);
      if (this.lost !== undefined) throw new Error(this.lost);
    } catch (err) {
      scope.close();
      for (const s of segments.splice(0)) this.uploads.discard(s.staging);
      throw err;
    }
    // Mapped again in the background, then ready for the next load.
    const write = GPU_MAP_MODE.WRITE;
    for (const s of segments) {
      this.remaps += 1;
      s.staging.mapAsync(write).then(
        () => {
          this.remaps -= 1;
          this.uploads.release(s.staging);
        },
        () => {
          this.remaps -= 1;
          this.uploads.discard(s.staging);
        },
      );
    }
    return blocks.length * this.arena.bytesPerBlock;
  }

  /** Items [from, to) per staging buffer, each at most SEGMENT_BYTES_MAX (or one block). */
  private *segment(count: number): Generator<{ from: number; to: number; bytes: number }> {
    const bpb = this.arena.bytesPerBlock;
    const per = Math.max(1, Math.floor(SEGMENT_BYTES_MAX / bpb));
    for (let from = 0; from < count; from += per) {
      const to = Math.min(count, from + per);
      yield { from, to, bytes: (to - from) * bpb };
    }
  }
}

function copyRun(
  encoder: GPUCommandEncoder,
  arena: GPUBuffer,
  r: BlockRun,
  staging: GPUBuffer,
  direction: 'out' | 'in',
): void {
  if (direction === 'out') {
    encoder.copyBufferToBuffer(arena, r.arenaOffset, staging, r.stagingOffset, r.bytes);
  } else {
    encoder.copyBufferToBuffer(staging, r.stagingOffset, arena, r.arenaOffset, r.bytes);
  }
}

/** A store task's source blocks and each one's word offset in the tier arena, in task order. */
function parseStore(
  task: Int32Array,
  host: HostArenas,
): { blocks: Int32Array; tierWords: Float64Array } {
  const n = storeBlockCount(task);
  const blocks = new Int32Array(n);
  const tierWords = new Float64Array(n);
  const { wordsPerBlock: w, blocksPerChunk: bpc } = host;
  const count = task[4]!;
  let at = 5;
  let k = 0;
  for (let c = 0; c < count; c += 1) {
    const tierSlot = task[at++]!;
    const m = task[at++]!;
    for (let i = 0; i < m; i += 1) {
      blocks[k] = task[at++]!;
      tierWords[k] = (tierSlot * bpc + (task[at++]! % bpc)) * w;
      k += 1;
    }
  }
  return { blocks, tierWords };
}

/** A load task's target blocks and each one's source word offset in the tier arena. */
function parseLoad(
  task: Int32Array,
  host: HostArenas,
): { blocks: Int32Array; tierWords: Float64Array } {
  const n = task[4]!;
  const blocks = new Int32Array(n);
  const tierWords = new Float64Array(n);
  const { wordsPerBlock: w, blocksPerChunk: bpc } = host;
  let at = 5;
  for (let i = 0; i < n; i += 1) {
    const tierSlot = task[at++]!;
    const chunkPosition = task[at++]!;
    blocks[i] = task[at++]!;
    tierWords[i] = (tierSlot * bpc + (chunkPosition % bpc)) * w;
  }
  return { blocks, tierWords };
}

function storeBlockCount(task: Int32Array): number {
  const count = task[4]!;
  let at = 5;
  let n = 0;
  for (let c = 0; c < count; c += 1) {
    const m = task[at + 1]!;
    n += m;
    at += 2 + 2 * m;
  }
  return n;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
