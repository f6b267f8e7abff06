// The event stream every design of benchmark 3 processes: R requests of C
// chunks in one full-attention group; for every chunk three sources publish
// independently (token progress, the offload key, the GPU block), so a chunk
// is ready only once all three have arrived: `storeWindow` in src/ready.ts
// decides, in every design. Writers walk chunks in order, requests round-robin.
// Each publication stamps the epoch time of its source into a shared table so
// the store can report publication -> dispatch latency per chunk (from the
// last of the three sources to the chunk's dispatch).
import { Doorbell } from '../../src/runtime/doorbell.js';
import { epochMs } from '../lib/clock.js';
import { quantile, sortedCopy } from '../lib/stats.js';

const SOURCES = ['tokens', 'keys', 'blocks'] as const;
export type Source = 0 | 1 | 2;
export const SOURCE_TOKENS: Source = 0;
export const SOURCE_KEYS: Source = 1;
export const SOURCE_BLOCKS: Source = 2;

export const TOKENS_PER_CHUNK = 16;

export interface StreamShape {
  readonly requests: number;
  readonly chunks: number;
}

/** Which sources each writer thread publishes, by writer count (the three roles split as evenly as possible). */
export function writerSources(writers: number): Source[][] {
  if (writers === 1) return [[0, 1, 2]];
  if (writers === 2) return [[0, 1], [2]];
  if (writers === 3) return [[0], [1], [2]];
  throw new Error(`designs bench: 1 to 3 writers, not ${writers}`);
}

/** Every source, in the order a writer that publishes all three takes them within a round. */
export const ALL_SOURCES: readonly Source[] = [SOURCE_TOKENS, SOURCE_KEYS, SOURCE_BLOCKS];

/** The publication-time table of a run (see pubIndex), shared by its writers and its store. */
export function newPubBuffer(s: StreamShape): SharedArrayBuffer {
  return new SharedArrayBuffer(s.requests * s.chunks * SOURCES.length * 8);
}

export function eventCount(s: StreamShape): number {
  return s.requests * s.chunks * SOURCES.length;
}

/** The block ID of chunk c of request r (never the null block 0). */
export function blockIdOf(s: StreamShape, r: number, c: number): number {
  return 1 + r * s.chunks + c;
}

/** A distinct numeric key per chunk, for the designs that carry keys as plain numbers. */
export function keyOf(s: StreamShape, r: number, c: number): number {
  return (r * s.chunks + c) * 2654435761 + 1;
}

/**
 * Where the publication time of (request, chunk, source) lives: source-major,
 * so each writer thread stamps its own region and the timestamps of the three
 * sources of one chunk never share a cache line (that would be false sharing
 * of the benchmark's own making).
 */
function pubIndex(s: StreamShape, r: number, c: number, source: Source): number {
  return source * s.requests * s.chunks + r * s.chunks + c;
}

/**
 * Stamps the publication time of one source's round (chunk `c` of every
 * request) before the writer publishes it: one clock read per source and
 * round, the same instrumentation in every design, so none pays a clock read
 * per event that another does not.
 */
export function stampRound(pub: Float64Array, s: StreamShape, c: number, source: Source): void {
  const now = epochMs();
  for (let r = 0; r < s.requests; r += 1) pub[pubIndex(s, r, c, source)] = now;
}

/** Publication time of the chunk's last-arriving source. */
export function readyAtMs(pub: Float64Array, s: StreamShape, r: number, c: number): number {
  const at = r * s.chunks + c;
  const n = s.requests * s.chunks;
  return Math.max(pub[at]!, pub[at + n]!, pub[at + 2 * n]!);
}

/** What a store reports after the last chunk is dispatched. */
export interface StoreOutcome {
  readonly dispatchedChunks: number;
  /** From the round's go to the last dispatch. */
  readonly elapsedMs: number;
  /** Publication -> dispatch of every chunk (summarised by the main thread, after the CPU reading). */
  readonly latenciesMs: Float64Array;
  readonly notes?: Record<string, number>;
  /** The store thread's own CPU from go to its last dispatch (NaN where unknown; see bench/lib/cpu.ts). */
  readonly threadCpuMs: number;
}

/** What a writer thread reports: its events and its own CPU from go to its last publication. */
export interface WriterOutcome {
  readonly events: number;
  readonly threadCpuMs: number;
}

/** Dispatch latencies, one per chunk, preallocated so recording never allocates. */
export class LatencyLog {
  private readonly values: Float64Array;
  private n = 0;

  constructor(capacity: number) {
    this.values = new Float64Array(capacity);
  }
  record(ms: number): void {
    if (this.n < this.values.length) this.values[this.n++] = ms;
  }
  get count(): number {
    return this.n;
  }
  /** The latencies recorded (a view, valid until the next record). */
  recorded(): Float64Array {
    return this.values.subarray(0, this.n);
  }
}

export function latencySummary(latenciesMs: Float64Array): { p50: number; p99: number } {
  const sorted = sortedCopy(latenciesMs);
  return { p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99) };
}

/** Longest any store may take to dispatch a whole stream before the run counts as hung. */
const STORE_DEADLINE_MS = 60_000;

export function checkDeadline(startMs: number, nowMs: number, what: string): void {
  if (nowMs - startMs > STORE_DEADLINE_MS) {
    throw new Error(`${what}: stream not dispatched within ${STORE_DEADLINE_MS} ms`);
  }
}

/**
 * The store's doorbell, as in the runtime (src/runtime/doorbell.ts): writers
 * ring it once per round of publications (one chunk index over every request),
 * and a store whose pass found nothing parks on it (bounded) instead of
 * spinning, so on 2 cores it leaves the CPU to the writers. Used by the shared
 * memory designs (a) and (c); (b) waits in its event loop instead.
 */
export const STORE_PARK_MS = 1;

export function newBellBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(64);
}

export function attachBell(buffer: SharedArrayBuffer): Doorbell {
  return new Doorbell(new Int32Array(buffer), 0);
}

/**
 * Offered load. A paced writer publishes its round k (one chunk index over
 * every request) no earlier than go + k * roundMs, so all writers together
 * offer a fixed number of events per second; 0 or absent: as fast as it can.
 * The wait is Atomics.wait (a bench worker thread, never the main thread).
 */
export function paceRound(startMs: number, roundMs: number | undefined, k: number): void {
  if (roundMs === undefined || roundMs <= 0) return;
  const due = startMs + k * roundMs;
  for (let spins = 0; spins < 1_000_000; spins += 1) {
    const waitMs = due - epochMs();
    if (waitMs <= 0) return;
    Atomics.wait(PACE_CELL, 0, 0, waitMs);
  }
}

const PACE_CELL = new Int32Array(new SharedArrayBuffer(4));

/** roundMs for a total offered load of `eventsPerSecond` over the stream's rounds. */
export function roundMsFor(s: StreamShape, eventsPerSecond: number): number {
  return ((s.requests * SOURCES.length) / eventsPerSecond) * 1000;
}
