// Transfer tasks: the copy between the GPU arena and tier slots, as plain
// functions over typed arrays so the piscina task file, the inline backend,
// the simulator and tests all run the same code.
//
// A task travels as a small Int32Array (no bigints, no objects):
//   store: [STORE, jobId, unpin, delayMs, chunkCount, (tierSlot, blockCount, (block, chunkPos)*)*]
//   load:  [LOAD,  jobId, 0,     delayMs, entryCount, (tierSlot, chunkPos, block)*]
// A store copies GPU -> tier and then unpins every source block exactly once
// (in `finally`, so a failed copy never leaks a pin); a load copies tier -> GPU.
import { copyChunkToTier, gpuBlockWords, tierBlockWords } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import { invariant } from '../errors.js';
import type { StoreJob } from '../job.js';
import { unpinBlocks } from '../pins.js';

export const TASK_STORE = 0;
export const TASK_LOAD = 1;
/** Test-only: a task that throws (see RuntimeOptions.faultInjection with role 'transfer'). */
export const TASK_FAULT = 2;

/** What a transfer thread attaches to once (piscina workerData). */
export interface TransferArenas {
  readonly gpuArena: SharedArrayBuffer;
  readonly tierArena: SharedArrayBuffer;
  readonly pins: SharedArrayBuffer;
  readonly wordsPerBlock: number;
  readonly blocksPerChunk: number;
}

export interface AttachedArenas {
  readonly gpu: Uint32Array;
  readonly tier: Uint32Array;
  readonly pins: Int32Array;
  readonly geometry: ArenaGeometry;
}

export function attachArenas(a: TransferArenas): AttachedArenas {
  return {
    gpu: new Uint32Array(a.gpuArena),
    tier: new Uint32Array(a.tierArena),
    pins: new Int32Array(a.pins),
    geometry: { wordsPerBlock: a.wordsPerBlock, blocksPerChunk: a.blocksPerChunk },
  };
}

export interface LoadEntry {
  readonly tierSlot: number;
  readonly chunkPosition: number;
  readonly block: number;
}

export function encodeStoreTask(job: StoreJob, unpin: boolean, delayMs: number): Int32Array {
  let n = 5;
  for (const c of job.chunks) n += 2 + 2 * c.blocks.length;
  const t = new Int32Array(n);
  t[0] = TASK_STORE;
  t[1] = job.jobId;
  t[2] = unpin ? 1 : 0;
  t[3] = delayMs;
  t[4] = job.chunks.length;
  let at = 5;
  for (const c of job.chunks) {
    t[at++] = c.tierSlot;
    t[at++] = c.blocks.length;
    for (let i = 0; i < c.blocks.length; i += 1) {
      t[at++] = c.blocks[i]!;
      t[at++] = c.positions[i]!;
    }
  }
  return t;
}

export function encodeLoadTask(
  jobId: number,
  entries: readonly LoadEntry[],
  delayMs: number,
): Int32Array {
  const t = new Int32Array(5 + 3 * entries.length);
  t[0] = TASK_LOAD;
  t[1] = jobId;
  t[3] = delayMs;
  t[4] = entries.length;
  let at = 5;
  for (const e of entries) {
    t[at++] = e.tierSlot;
    t[at++] = e.chunkPosition;
    t[at++] = e.block;
  }
  return t;
}

export function taskJobId(task: Int32Array): number {
  return task[1]!;
}

export function taskKind(task: Int32Array): number {
  return task[0]!;
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/** Runs one task; returns the bytes copied. Blocks its (transfer) thread for `delayMs` first. */
export function runTransferTask(arenas: AttachedArenas, task: Int32Array): number {
  const delayMs = task[3]!;
  // Test knob: a slow copy widens the window in which an unpinned block could be reused.
  if (delayMs > 0) Atomics.wait(sleepCell, 0, 0, delayMs);
  if (task[0] === TASK_FAULT) throw new Error('injected fault in a transfer task (test switch)');
  if (task[0] === TASK_LOAD) return runLoad(arenas, task);
  invariant(task[0] === TASK_STORE, `transfer task kind ${task[0]} is known`);
  const unpin = task[2] === 1;
  const blocks: number[] = [];
  let bytes = 0;
  try {
    const count = task[4]!;
    let at = 5;
    for (let c = 0; c < count; c += 1) {
      const tierSlot = task[at++]!;
      const n = task[at++]!;
      const chunkBlocks: number[] = [];
      const positions: number[] = [];
      for (let i = 0; i < n; i += 1) {
        chunkBlocks.push(task[at++]!);
        positions.push(task[at++]!);
      }
      blocks.push(...chunkBlocks);
      bytes += copyChunkToTier(arenas.gpu, arenas.tier, arenas.geometry, {
        group: 0,
        chunk: 0,
        key: 0n,
        tierSlot,
        blocks: chunkBlocks,
        positions,
      });
    }
  } finally {
    if (unpin) unpinBlocks(arenas.pins, blocks);
  }
  return bytes;
}

function runLoad(arenas: AttachedArenas, task: Int32Array): number {
  const count = task[4]!;
  const { gpu, tier, geometry } = arenas;
  let at = 5;
  for (let i = 0; i < count; i += 1) {
    const tierSlot = task[at++]!;
    const chunkPosition = task[at++]!;
    const block = task[at++]!;
    gpuBlockWords(gpu, geometry, block).set(
      tierBlockWords(tier, geometry, tierSlot, chunkPosition),
    );
  }
  return count * geometry.wordsPerBlock * 4;
}
