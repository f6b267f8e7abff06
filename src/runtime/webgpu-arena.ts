// The KV arena in GPU memory, block-addressed: block b lives in buffer
// floor(b / blocksPerBuffer) at offset (b mod blocksPerBuffer) x bytesPerBlock.
// One buffer would be simplest, but a storage binding (what the KV kernel
// writes through) is limited (128 MiB by default), so the arena is as many
// buffers of whole blocks as it takes. Staging buffers for copies out of and
// into it come from pools, by power-of-two size class, so a steady stream of
// jobs allocates nothing.
import { InvalidArgumentError, invariant } from '../errors.js';
import { GPU_BUFFER_USAGE } from './webgpu-device.js';

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

  /** Whether destroy() frees the buffers (kvoff made them) or leaves them to their owner. */
  private readonly owned: boolean;

  private constructor(
    buffers: readonly GPUBuffer[],
    geometry: GpuArenaGeometry,
    blocksPerBuffer: number,
    owned: boolean,
  ) {
    this.buffers = buffers;
    this.blocks = geometry.blocks;
    this.bytesPerBlock = geometry.bytesPerBlock;
    this.blocksPerBuffer = blocksPerBuffer;
    this.owned = owned;
  }

  /** A new arena on `device`: buffers as large as a storage binding allows, of whole blocks. */
  static create(device: GPUDevice, geometry: GpuArenaGeometry): GpuArena {
    const { blocks, bytesPerBlock } = geometry;
    invariant(bytesPerBlock % 4 === 0, 'a block is whole words');
    const limit = Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize);
    const perBuffer = Math.max(1, Math.min(blocks, Math.floor(limit / bytesPerBlock)));
    const u = GPU_BUFFER_USAGE;
    const buffers: GPUBuffer[] = [];
    for (let first = 0; first < blocks; first += perBuffer) {
      const n = Math.min(perBuffer, blocks - first);
      buffers.push(
        device.createBuffer({
          size: n * bytesPerBlock,
          usage: u.STORAGE | u.COPY_SRC | u.COPY_DST,
          label: `kvoff arena blocks ${first}..${first + n - 1}`,
        }),
      );
    }
    return new GpuArena(buffers, geometry, perBuffer, true);
  }

  /**
   * An engine's own KV buffers as the arena: block b in buffer
   * floor(b / blocksPerBuffer) at (b mod blocksPerBuffer) x bytesPerBlock.
   * Each buffer must allow COPY_SRC and COPY_DST and hold its blocks; the
   * engine keeps owning them (destroy() leaves them alone).
   */
  static adopt(
    buffers: readonly GPUBuffer[],
    geometry: GpuArenaGeometry,
    blocksPerBuffer: number,
  ): GpuArena {
    const { blocks, bytesPerBlock } = geometry;
    const need = GPU_BUFFER_USAGE.COPY_SRC | GPU_BUFFER_USAGE.COPY_DST;
    const problem = adoptProblem(buffers, blocks, bytesPerBlock, blocksPerBuffer, need);
    if (problem !== undefined) throw new InvalidArgumentError('WebGPU KV buffers', problem);
    return new GpuArena(buffers, geometry, blocksPerBuffer, false);
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
    if (this.owned) for (const b of this.buffers) b.destroy();
  }
}

function adoptProblem(
  buffers: readonly GPUBuffer[],
  blocks: number,
  bytesPerBlock: number,
  blocksPerBuffer: number,
  usage: number,
): string | undefined {
  if (!Number.isInteger(blocksPerBuffer) || blocksPerBuffer < 1) {
    return 'blocksPerBuffer must be a positive integer';
  }
  const count = Math.ceil(blocks / blocksPerBuffer);
  if (buffers.length !== count) {
    return `${blocks} blocks at ${blocksPerBuffer} per buffer need ${count} buffers, got ${buffers.length}`;
  }
  for (let i = 0; i < count; i += 1) {
    const b = buffers[i]!;
    const n = Math.min(blocksPerBuffer, blocks - i * blocksPerBuffer);
    if (b.size < n * bytesPerBlock) {
      return `buffer ${i} holds ${b.size} bytes, ${n} blocks of ${bytesPerBlock} need ${n * bytesPerBlock}`;
    }
    if ((b.usage & usage) !== usage) return `buffer ${i} must allow COPY_SRC and COPY_DST`;
  }
  return undefined;
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

  constructor(device: GPUDevice, kind: 'read' | 'upload', idleBytesMax: number) {
    const u = GPU_BUFFER_USAGE;
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
