// An engine that already holds its KV in WebGPU buffers hands them to kvoff
// here. A device belongs to the thread that created it, so kvoff cannot copy
// from the engine's buffers on a thread of its own: the engine's thread
// serves the store's copy jobs itself, on its own event loop, with the same
// loop kvoff's GPU thread runs (GpuCopyLoop). Nothing blocks that thread: a
// copy's completion is a map's promise, and the loop parks with
// Atomics.waitAsync when idle.
import { InvalidArgumentError } from '../errors.js';
import { GpuArena } from './webgpu-arena.js';
import { GpuCopyLoop } from './webgpu-loop.js';
import type { GpuCopyReport, GpuRings } from './webgpu-loop.js';
import { RING_BELL, RING_STOP } from './transfer.js';

/** The engine's KV: its device and the buffers its blocks live in. */
export interface WebGpuKvBuffers {
  /** The engine's device; it must belong to the thread that calls serve(). */
  readonly device: GPUDevice;
  /**
   * Block b lives in buffers[floor(b / blocksPerBuffer)] at byte offset
   * (b mod blocksPerBuffer) x bytesPerBlock (the config's). Each buffer needs
   * COPY_SRC (stores read it) and COPY_DST (loads write it).
   */
  readonly buffers: readonly GPUBuffer[];
  /** Blocks per buffer; default: all of them in one buffer. */
  readonly blocksPerBuffer?: number;
}

/** Serving the store's copies from an engine's WebGPU buffers on the calling thread. */
export class WebGpuCopyServer {
  /** Resolves with the loop's counters once it stopped (close(), or the runtime's). */
  readonly done: Promise<GpuCopyReport>;
  private readonly words: Int32Array;

  private constructor(rings: GpuRings, loop: GpuCopyLoop) {
    this.words = new Int32Array(rings.words);
    this.done = loop.run();
  }

  /**
   * Starts serving `rings` (the runtime's WebGPU copy rings) from `kv`.
   * Throws InvalidArgumentError, and serves nothing, when the buffers do not
   * hold the config's blocks or lack COPY_SRC or COPY_DST.
   */
  static serve(rings: GpuRings, kv: WebGpuKvBuffers): WebGpuCopyServer {
    if (typeof kv !== 'object' || kv === null || typeof kv.device?.createBuffer !== 'function') {
      throw new InvalidArgumentError(
        'WebGPU KV buffers',
        'must be { device, buffers, blocksPerBuffer? }',
      );
    }
    const buffers = Array.isArray(kv.buffers) ? kv.buffers : [];
    const arena = GpuArena.adopt(
      buffers,
      { blocks: rings.gpuBlocks, bytesPerBlock: rings.wordsPerBlock * 4 },
      kv.blocksPerBuffer ?? rings.gpuBlocks,
    );
    return new WebGpuCopyServer(rings, new GpuCopyLoop(rings, kv.device, arena, false));
  }

  /**
   * Stops serving: jobs not yet started fail (a store releases its pins),
   * copies in flight finish (bounded), and so do the staging maps no copy
   * awaits; resolves with the counters. The engine's buffers and device are
   * left as they are. Let the thread end only after it resolved: Dawn's Node
   * binding aborts the process when a thread ends with a map pending.
   */
  close(): Promise<GpuCopyReport> {
    Atomics.store(this.words, RING_STOP, 1);
    Atomics.add(this.words, RING_BELL, 1);
    Atomics.notify(this.words, RING_BELL);
    return this.done;
  }
}
