// Design (a): kvoff's shared-memory roles. Writer threads publish through the
// real role classes (SchedulerRole.progress, HasherRole.hash, AllocatorRole.
// appendBlocks) into the SharedArrayBuffer layout; the store thread runs the
// real StorePlanner (snapshot, storeWindow, pin, stable, job, cursor) in a
// loop, parking on its doorbell when a pass finds nothing. No locks, no
// messages: each word has one writer.
// Designs (b), (c) and (d) run the very same role and planner code (the
// classes below) behind messages, behind one lock, and on one thread.
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import type { Hashing } from '../../src/hashing.js';
import { DIGEST_BYTES, groupMixBytes, writeIdentity } from '../../src/identity.js';
import { KEY_CHECK_WORDS } from '../../src/layout.js';
import type { StoreJob } from '../../src/job.js';
import type { SharedBuffers } from '../../src/layout.js';
import { StorePlanner } from '../../src/planner.js';
import type { PlannerOptions } from '../../src/planner.js';
import { AllocatorRole } from '../../src/roles/allocator.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { HasherRole } from '../../src/roles/hasher.js';
import { SchedulerRole } from '../../src/roles/scheduler.js';
import { SharedState } from '../../src/state.js';
import { epochMs } from '../lib/clock.js';
import { ThreadCpuClock } from '../lib/cpu.js';
import type { Round } from '../lib/threads.js';
import { AcceptAllTier } from './bench-tier.js';
import { BenchCopyEngine, COPY_LANES } from './copy-engine.js';
import {
  ALL_SOURCES,
  LatencyLog,
  STORE_PARK_MS,
  SOURCE_KEYS,
  SOURCE_TOKENS,
  TOKENS_PER_CHUNK,
  attachBell,
  blockIdOf,
  checkDeadline,
  newBellBuffer,
  newPubBuffer,
  paceRound,
  readyAtMs,
  stampRound,
} from './stream.js';
import type { Source, StoreOutcome, StreamShape, WriterOutcome } from './stream.js';

/**
 * A cheap stand-in for SHA-256: the comparison is about moving state between
 * threads, and the other designs receive precomputed keys. Still chained and
 * distinct per request and chunk, so no two chunks share a key. Two 32-bit
 * lanes read and written byte by byte: no BigInt or DataView per block, which
 * allocated on every call and charged design a's hasher for garbage no real
 * digest makes.
 */
const CHEAP_HASHING: Hashing = {
  algorithm: 'sha256',
  chain(parent, parentAt, tokens, tph, out, outAt) {
    let lo = readI32(parent, parentAt);
    let hi = readI32(parent, parentAt + 4);
    for (let i = 0; (i + 1) * tph <= tokens.length; i += 1) {
      lo = Math.imul(lo ^ (tokens[i * tph]! + 1), 0x01000193);
      hi = Math.imul(hi ^ lo, 0x5bd1e995) ^ (lo >>> 13);
      writeU32(out, outAt + i * 32, lo);
      writeU32(out, outAt + i * 32 + 4, hi);
    }
  },
};

function readI32(bytes: Uint8Array, at: number): number {
  return bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16) | (bytes[at + 3]! << 24);
}

function writeU32(bytes: Uint8Array, at: number, v: number): void {
  bytes[at] = v & 0xff;
  bytes[at + 1] = (v >>> 8) & 0xff;
  bytes[at + 2] = (v >>> 16) & 0xff;
  bytes[at + 3] = v >>> 24;
}

/**
 * The stream's hashing alone, as HasherRole.hash does it here: one chained
 * `chain` call over a request's tokens (one hash block per chunk), then each
 * chunk's identity written as a key word and its check (writeIdentity, as
 * publishKeys does), for the floor's thread to time: work design a's writers
 * do and the lean designs, handed precomputed keys, do not. Keep it in step
 * with the hasher when the Hashing interface changes.
 */
export function hashStreamStandIn(s: StreamShape): void {
  const tokens = new Int32Array(s.chunks * TOKENS_PER_CHUNK);
  const root = new Uint8Array(DIGEST_BYTES);
  const rootView = new DataView(root.buffer);
  const digests = new Uint8Array(s.chunks * DIGEST_BYTES);
  const keys = new Uint8Array(s.chunks * 8);
  const checks = new Uint8Array(s.chunks * KEY_CHECK_WORDS * 8);
  const mix = groupMixBytes(0);
  for (let r = 0; r < s.requests; r += 1) {
    rootView.setBigUint64(0, BigInt(r), true);
    CHEAP_HASHING.chain(root, 0, tokens, TOKENS_PER_CHUNK, digests, 0);
    for (let c = 0; c < s.chunks; c += 1) {
      writeIdentity(
        digests,
        c * DIGEST_BYTES,
        mix,
        64,
        keys,
        c * 8,
        checks,
        c * KEY_CHECK_WORDS * 8,
      );
    }
  }
}

/**
 * Design a's writer role calls alone, on one bench thread: every round of
 * every source through KvoffWriters (the same calls a's writer threads make,
 * the hash stand-in included), with no store and no other thread running.
 * What the role code costs per event before any thread is involved; run
 * apart from every design, so its set-up and garbage count in none of them.
 */
export function kvoffRoleCallsThread(
  p: { shape: StreamShape },
  round: Round,
  ready: () => void,
): { readonly events: number; readonly threadCpuMs: number } {
  const s = p.shape;
  const setup = setupKvoffDesign(s);
  const state = SharedState.attach(resolveConfig(setup.config), setup.buffers);
  const writers = new KvoffWriters(state, setup.pub, s, setup.handles);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  for (let c = 0; c < s.chunks; c += 1) writers.publishRound(c, ALL_SOURCES);
  return { events: s.requests * s.chunks * ALL_SOURCES.length, threadCpuMs: cpu.elapsed() };
}

function kvoffDesignConfig(s: StreamShape): ConfigInput {
  return {
    groups: [{ kind: 'full', tokensPerBlock: TOKENS_PER_CHUNK }],
    tokensPerHash: TOKENS_PER_CHUNK,
    maxRequests: s.requests,
    maxBlocksPerRequest: s.chunks,
    gpuBlocks: s.requests * s.chunks + 1,
    tierChunks: s.requests * s.chunks,
  };
}

export interface KvoffSetup {
  readonly config: ConfigInput;
  readonly buffers: SharedBuffers;
  readonly handles: RequestHandle[];
  readonly pub: SharedArrayBuffer;
  readonly bell: SharedArrayBuffer;
}

/** Main thread: open every request (prompt known up front, so the hasher never waits for tokens). */
export function setupKvoffDesign(s: StreamShape): KvoffSetup {
  const config = kvoffDesignConfig(s);
  const state = SharedState.create(resolveConfig(config));
  const scheduler = new SchedulerRole(state);
  const hasher = new HasherRole(state, CHEAP_HASHING);
  const allocator = new AllocatorRole(state);
  const handles: RequestHandle[] = [];
  const prompt = new Int32Array(s.chunks * TOKENS_PER_CHUNK);
  for (let r = 0; r < s.requests; r += 1) {
    for (let i = 0; i < prompt.length; i += 1) prompt[i] = r * prompt.length + i;
    const h = scheduler.open({ requestId: r, promptTokens: prompt });
    hasher.hash(h, 0);
    allocator.appendBlocks(h, 0, []);
    handles.push(h);
  }
  // The writers (another thread, or the single-thread design) drive the roles from here on.
  scheduler.handOff();
  allocator.handOff();
  return { config, buffers: state.buffers, handles, pub: newPubBuffer(s), bell: newBellBuffer() };
}

export interface KvoffWriterParams extends KvoffSetup {
  readonly shape: StreamShape;
  readonly sources: readonly Source[];
  /** Offered load (see paceRound); absent: as fast as possible. */
  readonly roundMs?: number;
}

/**
 * The writer roles' side, shared by every design that runs role code. Writers
 * publish a batch at a time (one round: a chunk index over every request, or
 * one message's deltas): the scheduler and allocator roles take one batch
 * call per source (their claim checked once, each handle once); the hasher
 * role has no claim and hashes per handle.
 */
export class KvoffWriters {
  private readonly scheduler: SchedulerRole;
  private readonly hasher: HasherRole;
  private readonly allocator: AllocatorRole;
  private readonly pub: Float64Array;
  /**
   * One batch of one source (at most one entry per request), reused: filled
   * by index and its length set at the flush, where `length = 0` and push
   * freed and grew its storage every batch (garbage charged to design a that
   * no engine driving the roles would make).
   */
  private readonly batchHandles: RequestHandle[] = [];
  private batchLength = 0;
  private readonly batchValues: Int32Array;

  constructor(
    state: SharedState,
    pub: SharedArrayBuffer,
    private readonly shape: StreamShape,
    private readonly handles: readonly RequestHandle[],
  ) {
    this.scheduler = new SchedulerRole(state);
    this.hasher = new HasherRole(state, CHEAP_HASHING);
    this.allocator = new AllocatorRole(state);
    this.pub = new Float64Array(pub);
    this.batchValues = new Int32Array(shape.requests);
  }

  /** One round: chunk `c` of every request from each of `sources`; publication times are stamped first. */
  publishRound(c: number, sources: readonly Source[]): void {
    for (const source of sources) {
      stampRound(this.pub, this.shape, c, source);
      for (let r = 0; r < this.shape.requests; r += 1) this.add(source, r, c);
      this.flush(source);
    }
  }

  /**
   * Applies the deltas in `d` (`words` words each: source, request, chunk
   * first), one batch per source. Each names a request at most once per
   * source (a message holds deltas of one round).
   */
  applyDeltas(d: Float64Array, words: number): void {
    const n = Math.floor(d.length / words);
    for (const source of ALL_SOURCES) {
      for (let at = 0; at < n * words; at += words) {
        if (d[at] === source) this.add(source, d[at + 1]!, d[at + 2]!);
      }
      this.flush(source);
    }
  }

  private add(source: Source, r: number, c: number): void {
    const h = this.handles[r]!;
    if (source === SOURCE_KEYS) {
      this.hasher.hash(h, 1);
      return;
    }
    this.batchValues[this.batchLength] =
      source === SOURCE_TOKENS ? (c + 1) * TOKENS_PER_CHUNK : blockIdOf(this.shape, r, c);
    this.batchHandles[this.batchLength] = h;
    this.batchLength += 1;
  }

  private flush(source: Source): void {
    const k = this.batchLength;
    if (k === 0) return;
    if (this.batchHandles.length !== k) this.batchHandles.length = k;
    const values = this.batchValues.subarray(0, k);
    if (source === SOURCE_TOKENS) this.scheduler.progressBatch(this.batchHandles, values);
    else this.allocator.appendBlocksBatch(this.batchHandles, 0, values);
    this.batchLength = 0;
  }
}

/**
 * A pass longer than this (wall time) is counted apart in the paced runs:
 * several times a normal loaded pass here (tens of microseconds), and short
 * enough to catch a pass the OS took the thread off the CPU in.
 */
const LONG_PASS_MS = 0.2;

/** The store side: the real planner plus latency accounting per dispatched chunk. */
export class KvoffStore {
  readonly planner: StorePlanner;
  readonly latency: LatencyLog;
  dispatched = 0;
  private readonly pub: Float64Array;
  private readonly onJob: (job: StoreJob) => void;

  /**
   * `engine`: jobs go to this copy engine and complete when it says (design
   * aSized); without one the copy completes at dispatch (an inline backend).
   */
  constructor(
    state: SharedState,
    pub: SharedArrayBuffer,
    shape: StreamShape,
    options: PlannerOptions = {},
    engine?: BenchCopyEngine,
  ) {
    this.planner = new StorePlanner(state, new AcceptAllTier(shape.chunks), options);
    this.latency = new LatencyLog(shape.requests * shape.chunks);
    this.pub = new Float64Array(pub);
    this.onJob = (job) => {
      const now = epochMs();
      for (const chunk of job.chunks) {
        this.latency.record(now - readyAtMs(this.pub, shape, job.requestId, chunk.chunk));
      }
      this.dispatched += job.chunks.length;
      if (engine) engine.submit(job, now);
      else this.planner.complete(job); // the transfer's part: publish and unpin
    };
  }

  /**
   * Wall time of each pass, kept only where asked (the paced runs, whose p99
   * it explains): passes over LONG_PASS_MS, their sum and the longest.
   */
  timePasses = false;
  private longPasses = 0;
  private longPassWallMs = 0;
  /** Chunks those passes dispatched: what work they had (a long pass with few did not compute all the while). */
  private longPassChunks = 0;
  private passWallMsMax = 0;

  pass(): void {
    if (!this.timePasses) {
      this.planner.pass(this.onJob);
      return;
    }
    const t0 = epochMs();
    const before = this.dispatched;
    this.planner.pass(this.onJob);
    const ms = epochMs() - t0;
    if (ms > this.passWallMsMax) this.passWallMsMax = ms;
    if (ms > LONG_PASS_MS) {
      this.longPasses += 1;
      this.longPassWallMs += ms;
      this.longPassChunks += this.dispatched - before;
    }
  }

  /** Plans one request only (a store that knows which request changed). */
  planSlot(slot: number): void {
    const job = this.planner.planSlot(slot);
    if (job !== undefined) this.onJob(job);
  }

  /** Call at the last dispatch. */
  outcome(elapsedMs: number, cpu: ThreadCpuClock): StoreOutcome {
    const threadCpuMs = cpu.elapsed();
    const c = this.planner.counters;
    return {
      dispatchedChunks: this.dispatched,
      elapsedMs,
      latenciesMs: this.latency.recorded(),
      notes: {
        passes: c.passes,
        jobs: c.jobs,
        snapshotRetries: c.snapshotRetries,
        ...(this.timePasses
          ? {
              longPasses: this.longPasses,
              longPassWallMs: this.longPassWallMs,
              longPassChunks: this.longPassChunks,
              passWallMsMax: this.passWallMsMax,
            }
          : {}),
      },
      threadCpuMs,
    };
  }
}

export function kvoffWriterThread(
  p: KvoffWriterParams,
  round: Round,
  ready: () => void,
): WriterOutcome {
  const state = SharedState.attach(resolveConfig(p.config), p.buffers);
  const writers = new KvoffWriters(state, p.pub, p.shape, p.handles);
  const bell = attachBell(p.bell);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  let events = 0;
  for (let c = 0; c < p.shape.chunks; c += 1) {
    paceRound(round.startMs, p.roundMs, c);
    writers.publishRound(c, p.sources);
    events += p.shape.requests * p.sources.length;
    bell.ring();
  }
  return { events, threadCpuMs: cpu.elapsed() };
}

export function kvoffStoreThread(
  p: KvoffSetup & { shape: StreamShape; timePasses?: boolean },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const state = SharedState.attach(resolveConfig(p.config), p.buffers);
  const store = new KvoffStore(state, p.pub, p.shape);
  store.timePasses = p.timePasses === true;
  const bell = attachBell(p.bell);
  const total = p.shape.requests * p.shape.chunks;
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  for (let pass = 0; store.dispatched < total; pass += 1) {
    const seen = bell.read();
    const before = store.dispatched;
    store.pass();
    if (store.dispatched === before) bell.park(seen, STORE_PARK_MS);
    if ((pass & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design a');
  }
  return store.outcome(epochMs() - round.startMs, cpu);
}

/**
 * Design aSized: a's store with a transfer backend that has a capacity
 * (BenchCopyEngine: COPY_LANES lanes), planning a pass only while a lane is
 * free, as the runtime's store does (StoreLoop.passAllowed): a ready chunk
 * leaves at once while a copy is free, and chunks that become ready while
 * every lane is busy leave together as one job per request when one frees.
 */
export function kvoffSizedStoreThread(
  p: KvoffSetup & { shape: StreamShape; timePasses?: boolean },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const state = SharedState.attach(resolveConfig(p.config), p.buffers);
  const total = p.shape.requests * p.shape.chunks;
  const engine = new BenchCopyEngine(COPY_LANES, total);
  const store = new KvoffStore(state, p.pub, p.shape, {}, engine);
  store.timePasses = p.timePasses === true;
  const complete = (job: StoreJob) => store.planner.complete(job);
  const bell = attachBell(p.bell);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  for (let pass = 0; store.dispatched < total; pass += 1) {
    const seen = bell.read();
    const now = epochMs();
    const completed = engine.collect(now, complete);
    const before = store.dispatched;
    if (engine.inFlight < engine.capacity) store.pass();
    if (store.dispatched === before && completed === 0) {
      // Nothing moved: wait for a publication, or for the next copy to finish.
      const untilCopyMs = engine.nextDueMs() - now;
      if (untilCopyMs > 0) bell.park(seen, Math.min(untilCopyMs, STORE_PARK_MS));
    }
    if ((pass & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design aSized');
  }
  return store.outcome(epochMs() - round.startMs, cpu);
}

/**
 * Design (d): the same roles and planner on one thread (a bench thread, as
 * every design's store); a planner pass after every round of publications.
 */
export function singleThreadDesignThread(
  p: { shape: StreamShape },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const s = p.shape;
  const setup = setupKvoffDesign(s);
  const state = SharedState.attach(resolveConfig(setup.config), setup.buffers);
  const writers = new KvoffWriters(state, setup.pub, s, setup.handles);
  const store = new KvoffStore(state, setup.pub, s);
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  for (let c = 0; c < s.chunks; c += 1) {
    writers.publishRound(c, ALL_SOURCES);
    store.pass();
  }
  store.pass();
  return store.outcome(epochMs() - round.startMs, cpu);
}
