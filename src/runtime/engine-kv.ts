// Where the simulated engine's KV lives: what its forward pass writes and
// what it checks after a load. In host memory (the shared GPU arena, the
// default) both are plain writes and reads on the engine's thread. On a
// WebGPU device the GPU thread owns the arena: a write is queued on its KV
// ring (its kernel computes the bytes, submitted ahead of any copy the store
// asks for later), and a check is a kernel plus a read-back whose answer the
// engine waits for, bounded, on its own worker thread (never main), so a
// load's mismatches are counted before the request goes on.
import type { ArenaGeometry } from '../copy.js';
import { gpuBlockMatches, writeComputedBlock } from '../copy.js';
import { invariant } from '../errors.js';
import type { Doorbell } from './doorbell.js';
import { GpuKvClient } from './webgpu-kv.js';
import type { KvRingBuffers } from './webgpu-kv.js';
import type { KvEntry } from './webgpu-kernels.js';

export type { KvEntry } from './webgpu-kernels.js';

export interface EngineKv {
  /** Writes the KV of each entry's block (the bytes its key expands to at its position). */
  write(entries: readonly KvEntry[]): void;
  /** Blocks among `entries` that do not hold their key's expansion (the device's answer). */
  mismatches(entries: readonly KvEntry[]): number;
}

/** The engine's KV in the shared GPU arena (host memory). */
export class HostEngineKv implements EngineKv {
  constructor(
    private readonly gpu: Uint32Array,
    private readonly geometry: ArenaGeometry,
  ) {}

  write(entries: readonly KvEntry[]): void {
    for (const e of entries)
      writeComputedBlock(this.gpu, this.geometry, e.block, e.key, e.position);
  }

  mismatches(entries: readonly KvEntry[]): number {
    let n = 0;
    for (const e of entries) {
      if (!gpuBlockMatches(this.gpu, this.geometry, e.block, e.key, e.position)) n += 1;
    }
    return n;
  }
}

/** Longest the engine waits for the GPU thread: a KV ring with room, a check's answer. */
const GPU_WAIT_MS_MAX = 30_000;
/** Each bounded wait for the KV ring to make room. */
const RING_ROOM_WAIT_MS = 1;

/** What the engine's thread needs of a GPU thread's rings. */
export interface GpuEngineRings extends KvRingBuffers {
  /** The GPU thread's control words (its bell). */
  readonly words: SharedArrayBuffer;
}

/**
 * The engine's KV on kvoff's GPU thread. Worker threads only: it waits with
 * Atomics.wait. `answerBell` is rung by the GPU thread after an answer is
 * published (the engine's doorbell).
 */
export class GpuEngineKv implements EngineKv {
  private readonly client: GpuKvClient;
  private readonly sleepCell = new Int32Array(new SharedArrayBuffer(4));
  private nextTag = 1;

  constructor(
    rings: GpuEngineRings,
    private readonly answerBell: Doorbell,
  ) {
    this.client = new GpuKvClient(rings, rings.words);
  }

  write(entries: readonly KvEntry[]): void {
    let queued = 0;
    const deadline = performance.now() + GPU_WAIT_MS_MAX;
    for (;;) {
      queued += this.client.write(entries.slice(queued));
      if (queued === entries.length) return;
      invariant(performance.now() < deadline, 'the GPU thread takes KV writes within 30 s');
      Atomics.wait(this.sleepCell, 0, 0, RING_ROOM_WAIT_MS);
    }
  }

  mismatches(entries: readonly KvEntry[]): number {
    let n = 0;
    const per = this.client.checkBlocksMax;
    for (let at = 0; at < entries.length; at += per) n += this.check(entries.slice(at, at + per));
    return n;
  }

  private check(entries: readonly KvEntry[]): number {
    const tag = this.nextTag++;
    const deadline = performance.now() + GPU_WAIT_MS_MAX;
    const waitOrFail = (what: string, seen: number) => {
      const left = deadline - performance.now();
      if (left <= 0) invariant(false, `the GPU thread ${what} within ${GPU_WAIT_MS_MAX} ms`);
      this.answerBell.park(seen, left);
    };
    while (!this.client.check(tag, entries)) {
      waitOrFail('takes a KV check', this.answerBell.read());
    }
    for (;;) {
      const seen = this.answerBell.read();
      // Answers come back in the order their read-backs resolved; the engine waits on one at a time.
      const answer = this.client.takeAnswers().find((a) => a.tag === tag);
      // -1: the device could not check (it was lost); no block is proven, so all count.
      if (answer !== undefined) {
        return answer.mismatchedBlocks < 0 ? entries.length : answer.mismatchedBlocks;
      }
      waitOrFail('answers a KV check', seen);
    }
  }
}
