// The store task as a transfer thread runs it (runTransferTask): each source
// block lands at its chunk position in its tier slot, every block is unpinned
// after the copy, and after a copy that failed part-way too (nothing copies
// them any more; a pin left behind would hold a GPU block forever).
import { describe, expect, it } from 'vitest';
import type { StoreJob } from '../../src/job.js';
import { attachArenas, encodeStoreTask, runTransferTask } from '../../src/runtime/transfer.js';

const WORDS = 4;
const BPC = 2;

function arenas(gpuBlocks: number, tierSlots: number) {
  const a = attachArenas({
    gpuArena: new SharedArrayBuffer(gpuBlocks * WORDS * 4),
    tierArena: new SharedArrayBuffer(tierSlots * BPC * WORDS * 4),
    pins: new SharedArrayBuffer(gpuBlocks * 4),
    wordsPerBlock: WORDS,
    blocksPerChunk: BPC,
  });
  for (let b = 0; b < gpuBlocks; b += 1) a.gpu.fill(100 + b, b * WORDS, (b + 1) * WORDS);
  return a;
}

function job(chunks: { tierSlot: number; blocks: number[]; positions: number[] }[]): StoreJob {
  return {
    jobId: 7,
    slot: 0,
    generation: 1,
    requestId: 1,
    chunks: chunks.map((c, i) => ({ group: 0, chunk: i, key: BigInt(i + 1), ...c })),
  };
}

describe('runTransferTask (store)', () => {
  it('copies each block to its chunk position in its tier slot and unpins every block', () => {
    const a = arenas(8, 4);
    for (const b of [3, 4, 6]) a.pins[b] = 1;
    const task = encodeStoreTask(
      // Chunk 0 whole (positions 0, 1), chunk 1 only its second block (position 3: slot position 1).
      job([
        { tierSlot: 2, blocks: [3, 4], positions: [0, 1] },
        { tierSlot: 0, blocks: [6], positions: [3] },
      ]),
      true,
      0,
    );
    expect(runTransferTask(a, task)).toBe(3 * WORDS * 4);
    const tierBlock = (slot: number, p: number) => [
      ...a.tier.subarray((slot * BPC + p) * WORDS, (slot * BPC + p + 1) * WORDS),
    ];
    expect(tierBlock(2, 0)).toEqual([103, 103, 103, 103]);
    expect(tierBlock(2, 1)).toEqual([104, 104, 104, 104]);
    expect(tierBlock(0, 1)).toEqual([106, 106, 106, 106]);
    expect(tierBlock(0, 0)).toEqual([0, 0, 0, 0]);
    expect([...a.pins]).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it('unpins every block of the task when the copy fails part-way', () => {
    const a = arenas(8, 2);
    for (const b of [1, 2, 5]) a.pins[b] = 1;
    // The second chunk's tier slot is past the arena: its copy throws after the first copied.
    const task = encodeStoreTask(
      job([
        { tierSlot: 0, blocks: [1], positions: [0] },
        { tierSlot: 9, blocks: [2, 5], positions: [0, 1] },
      ]),
      true,
      0,
    );
    expect(() => runTransferTask(a, task)).toThrow(RangeError);
    expect([...a.pins]).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it('leaves pins to the caller when the task does not unpin', () => {
    const a = arenas(4, 2);
    a.pins[1] = 1;
    runTransferTask(
      a,
      encodeStoreTask(job([{ tierSlot: 1, blocks: [1], positions: [0] }]), false, 0),
    );
    expect(a.pins[1]).toBe(1);
  });
});
