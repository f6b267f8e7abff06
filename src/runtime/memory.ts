// Each worker's own memory, sampled by the worker itself: a V8 isolate's heap
// is visible only from its own thread (process.memoryUsage() in main sees
// main's heap and the whole process's RSS, not a worker's heap). A worker
// that leaks shows here long before the process is killed for memory: the
// store worker once grew about a gigabyte a minute while main's heap stayed
// flat and every other figure looked healthy.
//
// One slot per worker, two words each (heap used, external memory), written
// only by that worker with Atomics.store; main reads them with Atomics.load.
import { getHeapStatistics } from 'node:v8';

/** Role workers with a memory slot, in slot order; transfer threads follow. */
const MEMORY_ROLES = ['scheduler', 'hasher', 'allocator', 'store'] as const;
export type MemoryRole = (typeof MEMORY_ROLES)[number];

/** Transfer threads with a slot of their own (OffloadRuntime caps transferThreads at this). */
const TRANSFER_MEMORY_SLOTS = 64;

const WORDS_PER_SLOT = 2;
const W_HEAP_USED = 0;
const W_EXTERNAL = 1;
const SLOTS = MEMORY_ROLES.length + TRANSFER_MEMORY_SLOTS;
export const MEMORY_BUFFER_BYTES = SLOTS * WORDS_PER_SLOT * 8;

/** How often a worker refreshes its slot: often enough for a soak's slope, cheap (a few µs). */
const MEMORY_SAMPLE_MS = 250;

export interface WorkerMemory {
  /** V8 heap in use by the worker's isolate (bytes). */
  heapUsedBytes: number;
  /** Memory outside the V8 heap the isolate accounts for: ArrayBuffers' backing stores (shared ones included), native objects (bytes). */
  externalBytes: number;
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

  constructor(memory: SharedArrayBuffer, slot: number) {
    this.words = new BigInt64Array(memory);
    this.base = slot * WORDS_PER_SLOT;
  }

  /** Call from the worker's loop; samples when due (one clock read otherwise). */
  tick(): void {
    const now = performance.now();
    if (now < this.nextMs) return;
    this.nextMs = now + MEMORY_SAMPLE_MS;
    this.sample();
  }

  sample(): void {
    const h = getHeapStatistics();
    Atomics.store(this.words, this.base + W_HEAP_USED, BigInt(h.used_heap_size));
    Atomics.store(this.words, this.base + W_EXTERNAL, BigInt(h.external_memory));
  }
}

/** A slot's last sample, or undefined when its worker never sampled (not running). */
function readWorkerMemory(memory: BigInt64Array, slot: number): WorkerMemory | undefined {
  const heap = Number(Atomics.load(memory, slot * WORDS_PER_SLOT + W_HEAP_USED));
  if (heap === 0) return undefined;
  return {
    heapUsedBytes: heap,
    externalBytes: Number(Atomics.load(memory, slot * WORDS_PER_SLOT + W_EXTERNAL)),
  };
}

/** The calling thread's own figures (main samples itself when asked). */
function ownMemory(): WorkerMemory {
  const h = getHeapStatistics();
  return { heapUsedBytes: h.used_heap_size, externalBytes: h.external_memory };
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
  const out: Partial<RuntimeMemory> = { rssBytes: process.memoryUsage.rss(), main: ownMemory() };
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
