// The engine's side of the GPU thread: KV writes (the forward pass's output,
// computed by the GPU thread's kernel) and KV checks (were these blocks'
// bytes what their keys expand to?) travel through a single-producer ring,
// answers come back through another. Records:
//   write:  [KV_WRITE, count, (block, seed, 0, 0)*]
//   check:  [KV_CHECK, tag, count, (block, seed, 0, 0)*]
//   answer: [tag, blocks that mismatched, or -1 when the device could not check]
import { ringBufferBytes, SpscRing } from './rings.js';
import { RING_BELL } from './transfer.js';
import { blockSeed } from '../bytes.js';
import type { KvEntry, SeededBlock } from './webgpu-kernels.js';

export const KV_WRITE = 1;
export const KV_CHECK = 2;

/** Words of the KV ring and of the answer ring. */
const KV_RING_WORDS = 1 << 18;
const ANSWER_RING_WORDS = 1 << 12;

export interface KvRingBuffers {
  readonly kv: SharedArrayBuffer;
  readonly kvAnswers: SharedArrayBuffer;
}

export function createKvRingBuffers(): KvRingBuffers {
  return {
    kv: new SharedArrayBuffer(ringBufferBytes(KV_RING_WORDS)),
    kvAnswers: new SharedArrayBuffer(ringBufferBytes(ANSWER_RING_WORDS)),
  };
}

export function decodeKvEntries(r: Int32Array, at: number, count: number): SeededBlock[] {
  const out: SeededBlock[] = [];
  for (let i = 0; i < count; i += 1, at += 4) out.push({ block: r[at]!, seed: r[at + 1]! });
  return out;
}

export interface KvAnswer {
  readonly tag: number;
  /** Blocks whose bytes were not their key's expansion; -1 when the device could not check. */
  readonly mismatchedBlocks: number;
}

/**
 * The producer of one GPU thread's KV ring (one thread only: the engine's).
 * Nothing here waits: a full ring takes fewer entries and the caller retries.
 */
export class GpuKvClient {
  private readonly kv: SpscRing;
  private readonly answers: SpscRing;
  private readonly gpuWords: Int32Array;
  private readonly perRecord: number;

  /** `gpuWords`: the GPU thread's control words (its bell is rung after each push). */
  constructor(rings: KvRingBuffers, gpuWords: SharedArrayBuffer) {
    this.kv = new SpscRing(rings.kv);
    this.answers = new SpscRing(rings.kvAnswers);
    this.gpuWords = new Int32Array(gpuWords);
    this.perRecord = Math.floor((this.kv.recordWordsMax - 3) / 4);
  }

  /** Most blocks one check may hold. */
  get checkBlocksMax(): number {
    return this.perRecord;
  }

  /**
   * Queues the KV of `entries` to be computed into their blocks, in order;
   * returns how many were queued (all, unless the ring filled: queue the rest
   * later). Queued before the blocks are published, they are in the arena
   * before any copy of them.
   */
  write(entries: readonly KvEntry[]): number {
    let queued = 0;
    while (queued < entries.length) {
      const part = entries.slice(queued, queued + this.perRecord);
      if (!this.kv.pushParts([KV_WRITE, part.length], encodeEntries(part))) break;
      queued += part.length;
    }
    if (queued > 0) this.ringGpu();
    return queued;
  }

  /** Asks whether `entries`' blocks hold their keys' expansion; false (nothing queued) when the ring is full. */
  check(tag: number, entries: readonly KvEntry[]): boolean {
    if (entries.length > this.perRecord) {
      throw new RangeError(`a KV check holds at most ${this.perRecord} blocks`);
    }
    if (!this.kv.pushParts([KV_CHECK, tag, entries.length], encodeEntries(entries))) return false;
    this.ringGpu();
    return true;
  }

  /** Answers to checks, in the order their read-backs resolved. */
  takeAnswers(): KvAnswer[] {
    const out: KvAnswer[] = [];
    this.answers.drain((r) => out.push({ tag: r[0]!, mismatchedBlocks: r[1]! }), Infinity);
    return out;
  }

  private ringGpu(): void {
    Atomics.add(this.gpuWords, RING_BELL, 1);
    Atomics.notify(this.gpuWords, RING_BELL);
  }
}

function encodeEntries(entries: readonly KvEntry[]): Int32Array {
  const words = new Int32Array(entries.length * 4);
  entries.forEach((e, i) => {
    // The seed, not the key: a key is 256 bits, and the kernel needs only where its bytes start.
    words[i * 4] = e.block;
    words[i * 4 + 1] = blockSeed(e.key, e.position);
  });
  return words;
}
