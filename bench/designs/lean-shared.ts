// Design (a-lean): kvoff's publication protocol alone, written by hand with
// the least work per event, as the other lean designs are: no role classes,
// no planner, no tier, no pins, precomputed keys.
//
// What it keeps of kvoff is the mechanism: every word has one writer (the
// token, key and block writers each own a count per request, in their own
// region so no two roles share a cache line); a writer writes its entries,
// then publishes the count with Atomics.store, then raises the requests'
// dirty bits (one Atomics.or per bitmap word per batch, as the role batch
// calls do); the store takes a bitmap word with Atomics.exchange only when a
// load of it is non-zero, reads the allocator's seqlock, the three counts,
// the entries of the window, and confirms the seqlock did not move (blocks
// here only grow by append, which kvoff's allocator publishes without
// touching the seqlock, so the store's two loads of it are all it costs);
// the store parks on the same doorbell as every design when a pass found
// nothing. The cursors are the store's own (no other thread reads them here).
//
// And the floor: the same stream on one thread over plain arrays, a window
// after every round. No handover between threads at all: the least CPU per
// event any design can spend, measured in the same run.
import { emptyWindow, storeWindow } from '../../src/ready.js';
import { DIRTY_SLOTS_PER_WORD, SNAPSHOT_RETRIES_MAX } from '../../src/layout.js';
import { epochMs } from '../lib/clock.js';
import { ThreadCpuClock, threadCpuMs } from '../lib/cpu.js';
import type { Round } from '../lib/threads.js';
import { hashStreamStandIn } from './kvoff.js';
import {
  ALL_SOURCES,
  LatencyLog,
  SOURCE_BLOCKS,
  SOURCE_KEYS,
  STORE_PARK_MS,
  attachBell,
  blockIdOf,
  checkDeadline,
  keyOf,
  newBellBuffer,
  newPubBuffer,
  paceRound,
  readyAtMs,
  stampRound,
} from './stream.js';
import type { Source, StoreOutcome, StreamShape, WriterOutcome } from './stream.js';

/** Int32 words per region of the count table: each region starts on its own 64-byte line. */
function regionWords(requests: number): number {
  return Math.ceil(requests / 16) * 16;
}

/** Regions of the count table, in order; each has one writer. */
const TOKENS = 0; // token writer: chunks whose tokens are computed
const KEYS = 1; // key writer: keys published
const SEQ = 2; // block writer: the seqlock (odd while block IDs change other than by append)
const BLOCKS = 3; // block writer: block IDs published
const REGIONS = 4;

export interface SharedLeanSetup {
  readonly shape: StreamShape;
  readonly counts: SharedArrayBuffer;
  readonly keys: SharedArrayBuffer;
  readonly blocks: SharedArrayBuffer;
  readonly dirty: SharedArrayBuffer;
  readonly pub: SharedArrayBuffer;
  readonly bell: SharedArrayBuffer;
}

export function setupSharedLeanDesign(shape: StreamShape): SharedLeanSetup {
  const n = shape.requests * shape.chunks;
  return {
    shape,
    counts: new SharedArrayBuffer(REGIONS * regionWords(shape.requests) * 4),
    keys: new SharedArrayBuffer(n * 8),
    blocks: new SharedArrayBuffer(n * 4),
    dirty: new SharedArrayBuffer(Math.ceil(shape.requests / DIRTY_SLOTS_PER_WORD) * 4),
    pub: newPubBuffer(shape),
    bell: newBellBuffer(),
  };
}

class SharedLean {
  readonly counts: Int32Array;
  readonly keys: Float64Array;
  readonly blocks: Int32Array;
  readonly dirty: Int32Array;
  readonly pub: Float64Array;
  readonly region: number;
  constructor(s: SharedLeanSetup) {
    this.counts = new Int32Array(s.counts);
    this.keys = new Float64Array(s.keys);
    this.blocks = new Int32Array(s.blocks);
    this.dirty = new Int32Array(s.dirty);
    this.pub = new Float64Array(s.pub);
    this.region = regionWords(s.shape.requests);
  }
}

/** One source's round: entries, then each count with Atomics.store, then the dirty bits of the batch. */
function publishSource(st: SharedLean, shape: StreamShape, c: number, source: Source): void {
  const R = shape.requests;
  const C = shape.chunks;
  const { counts, region } = st;
  if (source === SOURCE_KEYS) {
    for (let r = 0; r < R; r += 1) {
      st.keys[r * C + c] = keyOf(shape, r, c);
      Atomics.store(counts, KEYS * region + r, c + 1);
    }
  } else if (source === SOURCE_BLOCKS) {
    for (let r = 0; r < R; r += 1) {
      st.blocks[r * C + c] = blockIdOf(shape, r, c);
      Atomics.store(counts, BLOCKS * region + r, c + 1);
    }
  } else {
    for (let r = 0; r < R; r += 1) Atomics.store(counts, TOKENS * region + r, c + 1);
  }
  // Every request of the round was touched: whole words, the last one partial.
  for (let word = 0; word < st.dirty.length; word += 1) {
    const left = R - word * DIRTY_SLOTS_PER_WORD;
    Atomics.or(st.dirty, word, left >= DIRTY_SLOTS_PER_WORD ? -1 : (1 << left) - 1);
  }
}

export function sharedLeanWriterThread(
  p: SharedLeanSetup & { sources: readonly Source[]; roundMs?: number },
  round: Round,
  ready: () => void,
): WriterOutcome {
  const st = new SharedLean(p);
  const { shape } = p;
  const bell = attachBell(p.bell);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  let events = 0;
  for (let c = 0; c < shape.chunks; c += 1) {
    paceRound(round.startMs, p.roundMs, c);
    for (const source of p.sources) {
      stampRound(st.pub, shape, c, source);
      publishSource(st, shape, c, source);
      events += shape.requests;
    }
    bell.ring();
  }
  return { events, threadCpuMs: cpu.elapsed() };
}

/** The store's side: dirty slots only, a seqlock-confirmed snapshot of three counts, a job per window. */
class SharedLeanStore {
  dispatched = 0;
  jobs = 0;
  retries = 0;
  readonly latency: LatencyLog;
  private readonly cursor: Int32Array;
  private readonly window = emptyWindow();

  constructor(
    private readonly st: SharedLean,
    private readonly shape: StreamShape,
  ) {
    this.latency = new LatencyLog(shape.requests * shape.chunks);
    this.cursor = new Int32Array(shape.requests);
  }

  pass(): void {
    const { dirty } = this.st;
    for (let word = 0; word < dirty.length; word += 1) {
      if (Atomics.load(dirty, word) === 0) continue;
      let bits = Atomics.exchange(dirty, word, 0);
      while (bits !== 0) {
        const low = bits & -bits;
        bits ^= low;
        this.visit(word * DIRTY_SLOTS_PER_WORD + 31 - Math.clz32(low));
      }
    }
  }

  private visit(r: number): void {
    const { counts, region } = this.st;
    for (let attempt = 0; attempt < SNAPSHOT_RETRIES_MAX; attempt += 1) {
      const seq = Atomics.load(counts, SEQ * region + r);
      if ((seq & 1) === 1) {
        this.retries += 1;
        continue;
      }
      const w = storeWindow(
        'ready-prefix',
        Atomics.load(counts, TOKENS * region + r),
        Atomics.load(counts, KEYS * region + r),
        Atomics.load(counts, BLOCKS * region + r),
        this.cursor[r]!,
        0,
        1,
        this.window,
      );
      if (w.end === w.start) return;
      const C = this.shape.chunks;
      const job: number[] = [];
      for (let k = w.start; k < w.end; k += 1)
        job.push(this.st.keys[r * C + k]!, this.st.blocks[r * C + k]!);
      if (Atomics.load(counts, SEQ * region + r) !== seq) {
        this.retries += 1;
        continue;
      }
      const now = epochMs();
      for (let k = w.start; k < w.end; k += 1) {
        this.latency.record(now - readyAtMs(this.st.pub, this.shape, r, k));
      }
      this.dispatched += w.end - w.start;
      this.jobs += 1;
      this.cursor[r] = w.advanceTo;
      return;
    }
    // A writer kept changing the blocks: come back at the next pass.
    Atomics.or(this.st.dirty, r >>> 5, 1 << (r & 31));
  }
}

export function sharedLeanStoreThread(
  p: SharedLeanSetup,
  round: Round,
  ready: () => void,
): StoreOutcome {
  const st = new SharedLean(p);
  const { shape } = p;
  const store = new SharedLeanStore(st, shape);
  const total = shape.requests * shape.chunks;
  const bell = attachBell(p.bell);
  let passes = 0;
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  while (store.dispatched < total) {
    const seen = bell.read();
    const before = store.dispatched;
    store.pass();
    passes += 1;
    if (store.dispatched === before) bell.park(seen, STORE_PARK_MS);
    if ((passes & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design a-lean');
  }
  const elapsedMs = epochMs() - round.startMs;
  const threadCpuMs = cpu.elapsed();
  return {
    dispatchedChunks: store.dispatched,
    elapsedMs,
    latenciesMs: store.latency.recorded(),
    notes: { passes, jobs: store.jobs, snapshotRetries: store.retries },
    threadCpuMs,
  };
}

/**
 * The floor: one thread (a bench thread, as every design's store), plain
 * arrays, every publication first, then one window per request: each chunk
 * dispatched once, in the fewest jobs. Nothing crosses between threads, so
 * nothing is published: no atomic operation, lock, message or wake-up. Its
 * two phases are timed apart (publishCpuMs, then threadCpuMs): the least a
 * publication costs, and the least the store's side costs, per event. Its
 * latency is the whole run's and means nothing.
 *
 * Before it is ready (outside the run's CPU) it times the hash stand-in as
 * design a's hasher role calls it, once per chunk (hashCpuMs): work a does
 * and the lean designs do not, as they are handed precomputed keys.
 */
export function floorThread(
  p: { shape: StreamShape },
  round: Round,
  ready: () => void,
): StoreOutcome & { readonly publishCpuMs: number; readonly hashCpuMs: number } {
  const { shape } = p;
  const R = shape.requests;
  const C = shape.chunks;
  const total = R * C;
  const hashCpuMs = hashStandInCpuMs(shape);
  const tokens = new Int32Array(R);
  const keyCount = new Int32Array(R);
  const blockCount = new Int32Array(R);
  const cursor = new Int32Array(R);
  const keys = new Float64Array(total);
  const blocks = new Int32Array(total);
  const pub = new Float64Array(newPubBuffer(shape));
  const latency = new LatencyLog(total);
  const window = emptyWindow();
  let dispatched = 0;
  let jobs = 0;
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  for (let c = 0; c < C; c += 1) {
    for (const source of ALL_SOURCES) {
      stampRound(pub, shape, c, source);
      if (source === SOURCE_KEYS) {
        for (let r = 0; r < R; r += 1) {
          keys[r * C + c] = keyOf(shape, r, c);
          keyCount[r] = c + 1;
        }
      } else if (source === SOURCE_BLOCKS) {
        for (let r = 0; r < R; r += 1) {
          blocks[r * C + c] = blockIdOf(shape, r, c);
          blockCount[r] = c + 1;
        }
      } else {
        for (let r = 0; r < R; r += 1) tokens[r] = c + 1;
      }
    }
  }
  const publishCpuMs = cpu.elapsed();
  for (let r = 0; r < R; r += 1) {
    const w = storeWindow(
      'ready-prefix',
      tokens[r]!,
      keyCount[r]!,
      blockCount[r]!,
      cursor[r]!,
      0,
      1,
      window,
    );
    if (w.end === w.start) continue;
    const job: number[] = [];
    for (let k = w.start; k < w.end; k += 1) job.push(keys[r * C + k]!, blocks[r * C + k]!);
    const now = epochMs();
    for (let k = w.start; k < w.end; k += 1) latency.record(now - readyAtMs(pub, shape, r, k));
    dispatched += w.end - w.start;
    jobs += 1;
    cursor[r] = w.advanceTo;
  }
  const elapsedMs = epochMs() - round.startMs;
  return {
    dispatchedChunks: dispatched,
    elapsedMs,
    latenciesMs: latency.recorded(),
    notes: { jobs },
    publishCpuMs,
    hashCpuMs,
    threadCpuMs: cpu.elapsed() - publishCpuMs,
  };
}

/** The CPU of the stream's hashing alone (see hashStreamStandIn), ms. */
function hashStandInCpuMs(shape: StreamShape): number {
  // Parked first, so the running thread's total is current at the start too.
  const startMs = threadCpuMs(true);
  hashStreamStandIn(shape);
  return threadCpuMs(true) - startMs;
}
