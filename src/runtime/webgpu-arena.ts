// The KV arena in GPU memory, block-addressed: block b lives in buffer
// floor(b / blocksPerBuffer) at offset (b mod blocksPerBuffer) x bytesPerBlock.
// One buffer would be simplest, but a storage binding (what the KV kernel
// writes through) is limited (128 MiB by default), so the arena is as many
// buffers of whole blocks as it takes. Staging buffers for copies out of and
// into it come from pools, by power-of-two size class, so a steady stream of
// jobs allocates nothing.
import { invariant } from '../errors.js';
import type { WebGpuFlags } from './webgpu-device.js';

/** Smallest staging buffer: below this, a pooled buffer costs more than its bytes. */
const STAGING_BYTES_MIN = 64 * 1024;

export interface GpuArenaGeometry {
  readonly blocks: number;
  readonly bytesPerBlock: number;
}

/** A contiguous run of blocks in one arena buffer, and where it goes in a staging buffer. */
export interface BlockRun {
  readonly buffer: number;
  /** Byte offset in the arena buffer. */
  readonly arenaOffset: number;
  /** Byte offset in the staging buffer. */
  readonly stagingOffset: number;
  readonly bytes: number;
}

export class GpuArena {
  readonly buffers: readonly GPUBuffer[];
  readonly blocks: number;
  readonly bytesPerBlock: number;
  readonly blocksPerBuffer: number;

  constructor(device: GPUDevice, flags: WebGpuFlags, geometry: GpuArenaGeometry) {
    const { blocks, bytesPerBlock } = geometry;
    invariant(bytesPerBlock % 4 === 0, 'a block is whole words');
    const limit = Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize);
    this.blocks = blocks;
    this.bytesPerBlock = bytesPerBlock;
    this.blocksPerBuffer = Math.max(1, Math.min(blocks, Math.floor(limit / bytesPerBlock)));
    const u = flags.BufferUsage;
    const buffers: GPUBuffer[] = [];
    for (let first = 0; first < blocks; first += this.blocksPerBuffer) {
      const n = Math.min(this.blocksPerBuffer, blocks - first);
      buffers.push(
        device.createBuffer({
          size: n * bytesPerBlock,
          usage: u.STORAGE | u.COPY_SRC | u.COPY_DST,
          label: `kvoff arena blocks ${first}..${first + n - 1}`,
        }),
      );
    }
    this.buffers = buffers;
  }

  bufferOf(block: number): number {
    return Math.floor(block / this.blocksPerBuffer);
  }

  indexInBuffer(block: number): number {
    return block % this.blocksPerBuffer;
  }

  /**
   * The copies that move `blocks` (in this order) to or from consecutive
   * slots of a staging buffer starting at `stagingOffset`: one per maximal
   * run of consecutive block IDs within one arena buffer.
   */
  runs(blocks: ArrayLike<number>, stagingOffset = 0): BlockRun[] {
    const out: BlockRun[] = [];
    const bpb = this.bytesPerBlock;
    let i = 0;
    while (i < blocks.length) {
      const first = blocks[i]!;
      if (!(first >= 0 && first < this.blocks)) invariant(false, `block ${first} is in the arena`);
      const buffer = this.bufferOf(first);
      let n = 1;
      while (
        i + n < blocks.length &&
        blocks[i + n] === first + n &&
        this.bufferOf(first + n) === buffer
      ) {
        n += 1;
      }
      out.push({
        buffer,
        arenaOffset: this.indexInBuffer(first) * bpb,
        stagingOffset: stagingOffset + i * bpb,
        bytes: n * bpb,
      });
      i += n;
    }
    return out;
  }

  destroy(): void {
    for (const b of this.buffers) b.destroy();
  }
}

/**
 * Staging buffers by power-of-two size class. A read pool's idle buffers are
 * unmapped (a copy lands in them, then they are mapped to be read); an upload
 * pool's idle buffers are mapped for writing, ready to be filled. At most
 * `idleBytesMax` of idle buffers are kept; the rest are destroyed.
 */
export class StagingPool {
  private readonly device: GPUDevice;
  private readonly usage: number;
  private readonly upload: boolean;
  private readonly idleBytesMax: number;
  private readonly idle = new Map<number, GPUBuffer[]>();
  private idleBytes = 0;
  /** Buffers handed out and not yet returned or discarded. */
  private busy = 0;

  constructor(
    device: GPUDevice,
    flags: WebGpuFlags,
    kind: 'read' | 'upload',
    idleBytesMax: number,
  ) {
    const u = flags.BufferUsage;
    this.device = device;
    this.upload = kind === 'upload';
    this.usage = this.upload ? u.MAP_WRITE | u.COPY_SRC : u.MAP_READ | u.COPY_DST;
    this.idleBytesMax = idleBytesMax;
  }

  get buffersBusy(): number {
    return this.busy;
  }

  /** A buffer of at least `bytes` (upload pool: mapped for writing). */
  acquire(bytes: number): GPUBuffer {
    const size = sizeClass(bytes);
    const list = this.idle.get(size);
    this.busy += 1;
    const reused = list?.pop();
    if (reused !== undefined) {
      this.idleBytes -= size;
      return reused;
    }
    return this.device.createBuffer({ size, usage: this.usage, mappedAtCreation: this.upload });
  }

  /** Back to the pool (read pool: unmapped; upload pool: mapped again). */
  release(buffer: GPUBuffer): void {
    this.busy -= 1;
    const size = buffer.size;
    if (this.idleBytes + size > this.idleBytesMax) {
      buffer.destroy();
      return;
    }
    let list = this.idle.get(size);
    if (list === undefined) this.idle.set(size, (list = []));
    list.push(buffer);
    this.idleBytes += size;
  }

  /** A buffer whose copy or map failed: never reused. */
  discard(buffer: GPUBuffer): void {
    this.busy -= 1;
    buffer.destroy();
  }

  destroy(): void {
    for (const list of this.idle.values()) for (const b of list) b.destroy();
    this.idle.clear();
    this.idleBytes = 0;
  }
}

function sizeClass(bytes: number): number {
  let size = STAGING_BYTES_MIN;
  while (size < bytes) size *= 2;
  return size;
}
