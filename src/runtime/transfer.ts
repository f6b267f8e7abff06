// Transfer tasks: the copy between the GPU arena and tier slots, as plain
// functions over typed arrays so the piscina task file, the inline backend,
// the simulator and tests all run the same code.
//
// A task travels as a small Int32Array (no bigints, no objects):
//   store: [STORE, jobId, flags, delayMs, chunkCount, (tierSlot, blockCount, (block, chunkPos)*)*]
//   load:  [LOAD,  jobId, flags, delayMs, entryCount, (tierSlot, chunkPos, block)*, fault?]
// flags: bit 0 unpin (stores), bit 1 replicated rank layout, bits 8-15 the
// rank, bits 16-23 the rank count less one. flags 0 or 1 is a one-rank task
// that copies whole blocks, as every task did before ranks existed; a rank's
// task copies only its shard of each block (rankShard in copy.ts).
// fault: test-only, present only when set: 1 + the entry at which the load
// copy throws (see LoadCopyError); a task without it is what it was before.
// A store copies GPU -> tier and then unpins every source block exactly once
// (in `finally`, so a failed copy never leaks a pin); a load copies tier -> GPU.
import type { Config } from '../config.js';
import { gpuBlockWords, rankShard, tierBlockWords } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import { invariant } from '../errors.js';
import type { StoreJob } from '../job.js';
import { unpinBlocks } from '../pins.js';
import { Doorbell } from './doorbell.js';
import { MemorySampler } from './memory.js';
import { PARK_MS_MAX } from './thread-words.js';
import { SpscRing } from './rings.js';

export const TASK_STORE = 0;
export const TASK_LOAD = 1;
/**
 * Test-only: a store task that throws part-way, after its first chunk (see
 * RuntimeOptions.faultInjection with role 'transfer'); like any failed copy it
 * still releases every source pin.
 */
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

/** Which rank a task copies for (a one-rank task: rank 0 of 1). */
export interface TaskRank {
  readonly rank: number;
  readonly ranks: number;
  readonly replicated: boolean;
}

const ONE_RANK: TaskRank = { rank: 0, ranks: 1, replicated: false };
const FLAG_UNPIN = 1;
const FLAG_REPLICATED = 2;

function taskFlags(unpin: boolean, r: TaskRank): number {
  return (
    (unpin ? FLAG_UNPIN : 0) |
    (r.replicated ? FLAG_REPLICATED : 0) |
    (r.rank << 8) |
    ((r.ranks - 1) << 16)
  );
}

/** True when a store task releases its source pins itself. */
export function taskUnpins(task: Int32Array): boolean {
  return (task[2]! & FLAG_UNPIN) !== 0;
}

/** The rank a task copies for. */
export function taskRank(task: Int32Array): number {
  return (task[2]! >> 8) & 0xff;
}

/** The words of each block a task copies: its rank's shard, or the whole block for a one-rank task. */
export function taskShard(task: Int32Array, wordsPerBlock: number): { from: number; to: number } {
  const ranks = ((task[2]! >> 16) & 0xff) + 1;
  const layout = (task[2]! & FLAG_REPLICATED) !== 0 ? 'replicated' : 'sharded';
  return rankShard(wordsPerBlock, ranks, layout, taskRank(task));
}

export function encodeStoreTask(
  job: StoreJob,
  unpin: boolean,
  delayMs: number,
  rank: TaskRank = ONE_RANK,
): Int32Array {
  let n = 5;
  for (const c of job.chunks) n += 2 + 2 * c.blocks.length;
  const t = new Int32Array(n);
  t[0] = TASK_STORE;
  t[1] = job.jobId;
  t[2] = taskFlags(unpin, rank);
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
  rank: TaskRank = ONE_RANK,
  /** Test-only: the copy throws at this entry (see RuntimeOptions.faultInjection, target 'load'). */
  faultAtEntry = -1,
): Int32Array {
  const t = new Int32Array(5 + 3 * entries.length + (faultAtEntry >= 0 ? 1 : 0));
  t[0] = TASK_LOAD;
  t[1] = jobId;
  t[2] = taskFlags(false, rank);
  t[3] = delayMs;
  t[4] = entries.length;
  let at = 5;
  for (const e of entries) {
    t[at++] = e.tierSlot;
    t[at++] = e.chunkPosition;
    t[at++] = e.block;
  }
  if (faultAtEntry >= 0) t[at] = faultAtEntry + 1;
  return t;
}

/** Words of the largest store or load task a job of this config can make. */
export function transferTaskWordsMax(
  config: Pick<Config, 'groups' | 'maxChunksPerRequest' | 'blocksPerChunk'>,
): number {
  const chunks = config.groups.length * config.maxChunksPerRequest;
  const bpc = config.blocksPerChunk;
  // A load's test-only fault word is one more.
  return 5 + Math.max(chunks * (2 + 2 * bpc), 3 * chunks * bpc + 1);
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
  const kind = task[0];
  if (kind === TASK_LOAD) return runLoad(arenas, task);
  if (kind !== TASK_STORE && kind !== TASK_FAULT)
    invariant(false, `transfer task kind ${kind} is known`);
  const unpin = taskUnpins(task);
  const { gpu, tier, geometry } = arenas;
  const w = geometry.wordsPerBlock;
  const bpc = geometry.blocksPerChunk;
  const count = task[4]!;
  const { from, to } = taskShard(task, w);
  let bytes = 0;
  try {
    // Straight from the task's words, one subarray per block (as a memcpy loop
    // would): building a chunk object and its block lists per chunk cost about
    // a microsecond per block, a sixth of a 64 KiB block's copy.
    let at = 5;
    const faultAt = kind === TASK_FAULT ? Math.min(1, count - 1) : -1;
    for (let c = 0; c < count; c += 1) {
      if (c === faultAt) throw new Error('injected fault in a transfer task (test switch)');
      const tierSlot = task[at++]!;
      const n = task[at++]!;
      for (let i = 0; i < n; i += 1) {
        const block = task[at++]!;
        const position = task[at++]!;
        // A rank's shard only: a non-writing rank (an empty shard) copies nothing.
        if (to === from) continue;
        const src = block * w;
        tier.set(
          gpu.subarray(src + from, src + to),
          (tierSlot * bpc + (position % bpc)) * w + from,
        );
      }
      bytes += n * (to - from) * 4;
    }
  } finally {
    // Every block of the task, also after a failed copy: nothing copies them any more.
    if (unpin) unpinBlocks(arenas.pins, storeTaskBlocks(task));
  }
  return bytes;
}

/** Source blocks of a store task, in task order (see the task layout above). */
export function storeTaskBlocks(task: Int32Array): number[] {
  const blocks: number[] = [];
  const count = task[4]!;
  let at = 5;
  for (let c = 0; c < count; c += 1) {
    at += 1; // tier slot
    const n = task[at++]!;
    for (let i = 0; i < n; i += 1) {
      blocks.push(task[at]!);
      at += 2;
    }
  }
  return blocks;
}

/**
 * A load copy that failed part-way: `bytes` were copied, entry by entry in
 * task order, before it (the store keeps the chunks wholly before the first
 * failed entry, see loadedPrefixChunks). Any other throw counts as 0 bytes.
 */
class LoadCopyError extends Error {
  constructor(readonly bytes: number) {
    super('injected fault in a load copy (test switch)');
  }
}

/** Bytes a failed task copied before it failed (0 unless it says, as a load does). */
export function bytesBeforeFailure(err: unknown): number {
  return err instanceof LoadCopyError ? err.bytes : 0;
}

function runLoad(arenas: AttachedArenas, task: Int32Array): number {
  const count = task[4]!;
  const { gpu, tier, geometry } = arenas;
  const { from, to } = taskShard(task, geometry.wordsPerBlock);
  if (to === from) return 0;
  const faultAt = task.length > 5 + 3 * count ? task[5 + 3 * count]! - 1 : -1;
  let at = 5;
  for (let i = 0; i < count; i += 1) {
    if (i === faultAt) throw new LoadCopyError(i * (to - from) * 4);
    const tierSlot = task[at++]!;
    const chunkPosition = task[at++]!;
    const block = task[at++]!;
    // Each rank restores its own shard of the block from the whole entry.
    gpuBlockWords(gpu, geometry, block).set(
      tierBlockWords(tier, geometry, tierSlot, chunkPosition).subarray(from, to),
      from,
    );
  }
  return count * (to - from) * 4;
}

// ---------------------------------------------------------------------------
// The job ring of one transfer thread. piscina keeps the threads; each runs one
// long-lived task (runTransferRing) that drains its own ring of tasks and
// publishes completions into its own completion ring, then rings the store's
// doorbell. No message crosses per job, so a thread takes its next task the
// moment it finished the last one, not after a round trip through the event
// loop of the thread that submitted it.
//
// A job record:        [ticket, ...task]
// A completion record: [ticket, ok, bytes (Float64, 2 words), doneAtEpochMs
//                       (Float64, 2 words), errorLength, ...error char codes]
// The ticket is the backend's own number for one submission (job IDs of stores
// and loads come from different counters).

/** Words of a transfer thread's control buffer: its bell, its stop flag, its ready flag. */
export const RING_BELL = 0;
export const RING_STOP = 16;
export const RING_READY = 32;
export const RING_WORDS_BYTES = 48 * 4;
/** Longest error text carried back in a completion record. */
export const RING_ERROR_CHARS_MAX = 240;
export const COMPLETION_HEAD_WORDS = 7;

/** What one transfer thread's long-lived task is given (structured-cloned: the buffers are shared). */
export interface TransferRingSpec {
  readonly jobs: SharedArrayBuffer;
  readonly done: SharedArrayBuffer;
  readonly words: SharedArrayBuffer;
  /** The doorbell rung after completions are published (the store's, so its park ends). */
  readonly completionBell: SharedArrayBuffer;
  readonly completionBellIndex: number;
  /** Where this thread samples its own heap (the runtime's memory words), if anywhere. */
  readonly memory?: { readonly buffer: SharedArrayBuffer; readonly slot: number };
}

/**
 * The long-lived task of a transfer thread: drains its job ring until the stop
 * flag is raised, parking (bounded) on its bell when the ring is empty.
 * Returns the tasks it ran.
 */
export function runTransferRing(arenas: AttachedArenas, spec: TransferRingSpec): number {
  const jobs = new SpscRing(spec.jobs);
  const done = new SpscRing(spec.done);
  const words = new Int32Array(spec.words);
  const bell = new Doorbell(new Int32Array(spec.completionBell), spec.completionBellIndex);
  const record = new Int32Array(COMPLETION_RECORD_WORDS_MAX);
  let tasks = 0;
  let ticket = 0;
  let ok = 1;
  let bytes = 0;
  let error = '';
  const run = (payload: Int32Array) => {
    ticket = payload[0]!;
    try {
      bytes = runTransferTask(arenas, payload.subarray(1));
      ok = 1;
    } catch (err) {
      ok = 0;
      bytes = bytesBeforeFailure(err);
      error = err instanceof Error ? err.message : String(err);
    }
  };
  const memory = spec.memory ? new MemorySampler(spec.memory.buffer, spec.memory.slot) : undefined;
  Atomics.store(words, RING_READY, 1);
  Atomics.notify(words, RING_READY);
  while (Atomics.load(words, RING_STOP) === 0) {
    memory?.tick();
    const seen = Atomics.load(words, RING_BELL);
    if (!jobs.pop(run)) {
      Atomics.wait(words, RING_BELL, seen, PARK_MS_MAX);
      continue;
    }
    tasks += 1;
    const n = encodeCompletion(record, ticket, ok === 1, bytes, ok === 1 ? '' : error);
    // The backend bounds tasks in flight so completions fit; a full ring only
    // means the store has not collected yet: wait for it (bounded, stop-aware).
    while (!done.push(record.subarray(0, n))) {
      bell.ring();
      if (Atomics.load(words, RING_STOP) === 1) return tasks;
      Atomics.wait(words, RING_BELL, Atomics.load(words, RING_BELL), 1);
    }
    bell.ring();
  }
  return tasks;
}

/** Words of the longest completion record (an error's text cut to RING_ERROR_CHARS_MAX). */
export const COMPLETION_RECORD_WORDS_MAX = COMPLETION_HEAD_WORDS + RING_ERROR_CHARS_MAX;

const encodeF64 = new Float64Array(1);
const encodeWords = new Int32Array(encodeF64.buffer);

/**
 * Writes a completion record (layout above) into `record`, stamped with the
 * time now; returns its length in words. Every thread that answers through a
 * completion ring (a transfer thread, the GPU thread) encodes it here.
 */
export function encodeCompletion(
  record: Int32Array,
  ticket: number,
  ok: boolean,
  bytes: number,
  error: string,
): number {
  record[0] = ticket;
  record[1] = ok ? 1 : 0;
  encodeF64[0] = bytes;
  record[2] = encodeWords[0]!;
  record[3] = encodeWords[1]!;
  encodeF64[0] = performance.timeOrigin + performance.now();
  record[4] = encodeWords[0]!;
  record[5] = encodeWords[1]!;
  let n = COMPLETION_HEAD_WORDS;
  const text = ok ? '' : error.slice(0, RING_ERROR_CHARS_MAX);
  record[6] = text.length;
  for (let i = 0; i < text.length; i += 1) record[n++] = text.charCodeAt(i);
  return n;
}

/** A decoded completion record (see runTransferRing). */
export interface RingCompletion {
  readonly ticket: number;
  readonly ok: boolean;
  readonly bytes: number;
  readonly doneAtEpochMs: number;
  readonly error: string;
}

const decodeF64 = new Float64Array(1);
const decodeWords = new Int32Array(decodeF64.buffer);

export function decodeCompletion(r: Int32Array): RingCompletion {
  decodeWords[0] = r[2]!;
  decodeWords[1] = r[3]!;
  const bytes = decodeF64[0]!;
  decodeWords[0] = r[4]!;
  decodeWords[1] = r[5]!;
  const doneAtEpochMs = decodeF64[0]!;
  let error = '';
  const n = r[6]!;
  for (let i = 0; i < n; i += 1) error += String.fromCharCode(r[COMPLETION_HEAD_WORDS + i]!);
  return { ticket: r[0]!, ok: r[1] === 1, bytes, doneAtEpochMs, error };
}
