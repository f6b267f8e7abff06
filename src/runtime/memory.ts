// Each worker's own memory, sampled by the worker itself: a V8 isolate's heap
// is visible only from its own thread (process.memoryUsage() in main sees
// main's heap and the whole process's RSS, not a worker's heap). A worker
// that leaks shows here long before the process is killed for memory: the
// store worker once grew about a gigabyte a minute while main's heap stayed
// flat and every other figure looked healthy.
//
// Heap in use, read at an arbitrary moment, counts the garbage V8 has not
// collected yet, and how much of it waits depends on V8's heap sizing, which
// adapts over minutes: a soak's lowest sample per window rose steadily on a
// main thread whose heap snapshots, each after a full collection, differed by
// 7 KB over 340 s. What a leak grows is the live heap, so on request (and
// only under `node --expose-gc`) each thread runs a full collection and
// records what is left: heapLiveBytes.
//
// A header, then one slot per worker, three words each (heap used, external
// memory, live heap), written only by that worker with Atomics.store; main
// reads them with Atomics.load. The header's words are main's.
import { getHeapStatistics } from 'node:v8';

/** Role workers with a memory slot, in slot order; transfer threads follow. */
const MEMORY_ROLES = ['scheduler', 'hasher', 'allocator', 'store'] as const;
export type MemoryRole = (typeof MEMORY_ROLES)[number];

/** Transfer threads with a slot of their own (OffloadRuntime caps transferThreads at this). */
const TRANSFER_MEMORY_SLOTS = 64;

/** Header: full collections main asked for so far, and main's live heap after the last. */
const H_COLLECTIONS_ASKED = 0;
const H_MAIN_HEAP_LIVE = 1;
const HEADER_WORDS = 2;
const WORDS_PER_SLOT = 3;
const W_HEAP_USED = 0;
const W_EXTERNAL = 1;
const W_HEAP_LIVE = 2;
const SLOTS = MEMORY_ROLES.length + TRANSFER_MEMORY_SLOTS;
export const MEMORY_BUFFER_BYTES = (HEADER_WORDS + SLOTS * WORDS_PER_SLOT) * 8;

/** How often a worker refreshes its slot: often enough for a soak's slope, cheap (a few µs). */
const MEMORY_SAMPLE_MS = 250;

export interface WorkerMemory {
  /** V8 heap in use by the worker's isolate (bytes). */
  heapUsedBytes: number;
  /** Memory outside the V8 heap the isolate accounts for: ArrayBuffers' backing stores (shared ones included), native objects (bytes). */
  externalBytes: number;
  /**
   * V8 heap in use right after the last full collection asked for with
   * `runtime.collectMemory()` (bytes): what the isolate keeps alive, without
   * the garbage heapUsedBytes also counts. Absent until the first one.
   */
  heapLiveBytes?: number;
}

export function roleMemorySlot(role: MemoryRole): number {
  return MEMORY_ROLES.indexOf(role);
}

export function transferMemorySlot(thread: number): number {
  return MEMORY_ROLES.length + thread;
}

/** Samples the calling thread's isolate into its slot, at most every MEMORY_SAMPLE_MS. */
export class MemorySampler {
  private readonly words: BigInt64Array;
  private readonly base: number;
  private nextMs = 0;
  /** Collections asked for that this thread has run (or found it could not). */
  private collectionsSeen = 0n;

  constructor(memory: SharedArrayBuffer, slot: number) {
    this.words = new BigInt64Array(memory);
    this.base = HEADER_WORDS + slot * WORDS_PER_SLOT;
  }

  /** Call from the worker's loop; samples when due (one clock read otherwise). */
  tick(): void {
    const now = performance.now();
    if (now < this.nextMs) return;
    this.nextMs = now + MEMORY_SAMPLE_MS;
    this.sample();
  }

  sample(): void {
    // Asked since the last sample: collect first (one load when not asked).
    const asked = Atomics.load(this.words, H_COLLECTIONS_ASKED);
    if (asked !== this.collectionsSeen) {
      this.collectionsSeen = asked;
      const live = collectFully();
      if (live !== undefined) Atomics.store(this.words, this.base + W_HEAP_LIVE, BigInt(live));
    }
    const h = getHeapStatistics();
    Atomics.store(this.words, this.base + W_HEAP_USED, BigInt(h.used_heap_size));
    Atomics.store(this.words, this.base + W_EXTERNAL, BigInt(h.external_memory));
  }
}

/**
 * A full (mark-compact) collection of the calling thread's isolate, and the
 * heap in use after it; undefined when the process does not expose gc().
 */
function collectFully(): number | undefined {
  const gc = (globalThis as { gc?: unknown }).gc;
  if (typeof gc !== 'function') return undefined;
  (gc as () => void)();
  return getHeapStatistics().used_heap_size;
}

/**
 * Main's side of runtime.collectMemory(): collects main's own heap now and
 * asks every worker to do the same before its next sample (within
 * MEMORY_SAMPLE_MS of its loop's next turn). False, and nothing asked, when
 * the process runs without --expose-gc.
 */
export function requestCollection(memory: BigInt64Array): boolean {
  const live = collectFully();
  if (live === undefined) return false;
  Atomics.store(memory, H_MAIN_HEAP_LIVE, BigInt(live));
  Atomics.add(memory, H_COLLECTIONS_ASKED, 1n);
  return true;
}

function withLive(m: WorkerMemory, live: bigint): WorkerMemory {
  return live === 0n ? m : { ...m, heapLiveBytes: Number(live) };
}

/** A slot's last sample, or undefined when its worker never sampled (not running). */
function readWorkerMemory(memory: BigInt64Array, slot: number): WorkerMemory | undefined {
  const base = HEADER_WORDS + slot * WORDS_PER_SLOT;
  const heap = Number(Atomics.load(memory, base + W_HEAP_USED));
  if (heap === 0) return undefined;
  return withLive(
    {
      heapUsedBytes: heap,
      externalBytes: Number(Atomics.load(memory, base + W_EXTERNAL)),
    },
    Atomics.load(memory, base + W_HEAP_LIVE),
  );
}

/** The calling thread's own figures (main samples itself when asked). */
function ownMemory(memory: BigInt64Array): WorkerMemory {
  const h = getHeapStatistics();
  return withLive(
    { heapUsedBytes: h.used_heap_size, externalBytes: h.external_memory },
    Atomics.load(memory, H_MAIN_HEAP_LIVE),
  );
}

export interface RuntimeMemory {
  /** Resident memory of the whole process, every thread included (bytes). */
  rssBytes: number;
  main: WorkerMemory;
  scheduler?: WorkerMemory;
  hasher?: WorkerMemory;
  allocator?: WorkerMemory;
  store?: WorkerMemory;
  /** One entry per transfer thread of kvoff's pool that has sampled (a custom backend reports none). */
  transfer: WorkerMemory[];
}

export function readRuntimeMemory(memory: BigInt64Array): RuntimeMemory {
  const out: Partial<RuntimeMemory> = {
    rssBytes: process.memoryUsage.rss(),
    main: ownMemory(memory),
  };
  for (const role of MEMORY_ROLES) {
    const m = readWorkerMemory(memory, roleMemorySlot(role));
    if (m !== undefined) out[role] = m;
  }
  const transfer: WorkerMemory[] = [];
  for (let t = 0; t < TRANSFER_MEMORY_SLOTS; t += 1) {
    const m = readWorkerMemory(memory, transferMemorySlot(t));
    if (m === undefined) break;
    transfer.push(m);
  }
  return { ...out, transfer } as RuntimeMemory;
}
