// The store role's loop body. It owns the host tier and the transfer backend:
// each step it answers the scheduler's lookups and loads, collects finished
// copies (publishing a tier entry only after its bytes are there), and runs one
// StorePlanner pass whose jobs go to the backend. It also keeps what the
// runtime's checks need, on this thread only: which tier entries are readable
// and which chunk positions they hold (verify), which chunks each request
// generation dispatched or covered (double stores, holes).
import { tierChunkMatches } from '../copy.js';
import { InvalidArgumentError, TransferBackendFailedError, invariant } from '../errors.js';
import type { StoreJob } from '../job.js';
import { S_GENERATION, S_HIT_CHUNKS, S_REQUEST_ID, S_STATUS, Status, T_EPOCH } from '../layout.js';
import { DEFER, RETRY, asksAgain, loadPlan, lookupHitTokens, touchRanges } from '../lookup.js';
import type { LookupUnsafe } from '../lookup.js';
import type { ChunkState, ChunkStateOf, LookupResult } from '../lookup.js';
import { StorePlanner } from '../planner.js';
import type { ChunkOutcome, PlannerObserver, PlanPoint } from '../planner.js';
import { offloadableTokens, tokenChunks } from '../ready.js';
import type { StorePolicy } from '../ready.js';
import type { RequestSnapshot } from '../roles/store.js';
import { HostTier } from '../tier/host-tier.js';
import type { CacheOptions } from '../tier/policy/index.js';
import type { TierCascade } from '../tier/cascade.js';
import { zeroCounters } from '../tier/lower.js';
import type { TierStoreSample } from '../tier/lower.js';
import { publishTierCounters } from '../tier/tier-stats.js';
import { LowerLookups } from './lower-lookup.js';
import type { ReadableEntry } from './lower-lookup.js';
import type { TransferBackend, TransferCompletion } from './backend.js';
import type { RuntimeViews } from './buffers.js';
import { Outbox } from './outbox.js';
import { decodeLookup } from './lookup-record.js';
import type { DecodedLookup } from './lookup-record.js';
import {
  ANS_LOADED,
  ANS_LOOKED_UP,
  LOOKUP_DEFERRED,
  LOOKUP_RETRY,
  OP_LOAD,
  OP_LOOKUP,
  OP_UNLOCK,
} from './protocol.js';
import type { SpscRing } from './rings.js';
import { publishStat } from './stats.js';
import { TASK_FAULT, encodeLoadTask, encodeStoreTask } from './transfer.js';
import type { LoadEntry } from './transfer.js';
import { TraceRecorder } from './trace-recorder.js';
import { EventCapture } from '../events/capture.js';
import { LookupTiming } from './lookup-timing.js';
import type { LookupSample } from './lookup-timing.js';
import type { TierCounters, TierName } from '../tier/lower.js';
import type { TracedRequest } from './trace-recorder.js';

export interface StoreLoopOptions {
  policy?: StorePolicy;
  /** The host tier's cache policy and store threshold (default LRU, every chunk admitted). */
  cache?: CacheOptions;
  /** Test-only: the planner does not pin and the transfer does not unpin. */
  unsafeSkipPins?: boolean;
  /** Test-only: the planner skips its snapshot re-validation (see PlannerOptions.unsafeSkipRevalidate). */
  unsafeSkipRevalidate?: boolean;
  /** Test-only: no end-of-request protocol (see PlannerOptions.unsafeSkipSettle); chunks are lost silently. */
  unsafeSkipSettle?: boolean;
  /** Test-only: failure class F2 re-created (see PlannerOptions.unsafeEagleCursorUnexcluded). */
  unsafeEagleCursorUnexcluded?: boolean;
  /** Test-only: failure class F4 re-created (see PlannerOptions.unsafeStoreLastSampledToken). */
  unsafeStoreLastSampledToken?: boolean;
  /** Test knob: every transfer task sleeps this long before copying. */
  transferDelayMs?: number;
  /** Jobs in flight before a pass is skipped (bounds the backend's queue). */
  jobsInFlightMax?: number;
  /** Test-only: the store job dispatched after this many becomes a task that throws. */
  faultAfterTasks?: number;
  /** Test-only: with faultAfterTasks, this many store tasks from there on throw (default every one). */
  faultTasks?: number;
  /**
   * Consecutive failed store copies after which the backend is taken as
   * broken and the store stops with TransferBackendFailedError; default
   * TRANSFER_FAILURES_MAX. One failed copy only fails its job.
   */
  transferFailuresMax?: number;
  /** The clock of the planner's final wait (ms); default performance.now. */
  now?: () => number;
  /** How long an ended request waits for its last keys and blocks (PlannerOptions.finalWaitMsMax). */
  finalWaitMsMax?: number;
  /** Record per-pass windows of requests with id below this (0: none). */
  traceRequests?: number;
  /**
   * Test-only: a lookup counts tier entries still being written as hits and
   * loads them at once, so a load overlaps the store writing the same chunks.
   * Exists so the runtime fuzzer can show what deferring on pending entries
   * prevents; never turn it on otherwise.
   */
  unsafeLoadWhileWriting?: boolean;
  /** Test-only: the host tier evicts entries being written or read (HostTierOptions.unsafeEvictInUse, class F7). */
  unsafeEvictInUse?: boolean;
  /**
   * Test-only: a failed load keeps its tier read references (and its lock), so
   * the entries it read are never evictable again (class F8). Exists so the
   * runtime fuzzer can show the release on failure is load-bearing.
   */
  unsafeLeakOnLoadFailure?: boolean;
  /** Test-only: PlannerOptions.unsafeAckOnAllocFailure (class F9). */
  unsafeAckOnAllocFailure?: boolean;
  /** Test-only: PlannerOptions.unsafeDropDeferred (class F10). */
  unsafeDropDeferred?: boolean;
  /** Test-only: PlannerOptions.unsafeReachabilityOneShort (rule-reachability). */
  unsafeReachabilityOneShort?: boolean;
  /** Test-only: LookupUnsafe.unsafeEagleTailKept (rule-lookup-long). */
  unsafeEagleTailKept?: boolean;
  /** Test-only: LookupUnsafe.unsafeLastTokenLoaded, in the lookup and in the store's cap (rule-last-token). */
  unsafeLastTokenLoaded?: boolean;
  /** Test-only: PlannerOptions.unsafePublishStaleJobs (no job-id threshold at a reset). */
  unsafePublishStaleJobs?: boolean;
  /** Called inside each planning pass where other threads' writes can land (a single-thread driver runs them here). */
  onPlanPoint?: (point: PlanPoint, snap: Readonly<RequestSnapshot>) => void;
  /** Levels below the host tier (disk, Redis), opened by the caller; none by default. */
  cascade?: TierCascade;
  /** Wakes this loop when a lower-level resolution finished (its own doorbell). */
  wake?: () => void;
  /**
   * Called with every lookup answer at the moment it is given (the runtime
   * fuzzer's oracle checks it against the lookup decision); never throws
   * into a real store thread, since only the fuzzer sets it.
   */
  onLookupAnswered?: (answered: LookupAnswered) => void;
}

/** One lookup answer, as the store role gave it, with the tier state it was decided from. */
export interface LookupAnswered {
  readonly lookup: DecodedLookup;
  /** The store's per-key state at that moment (what lookupHitTokens read). */
  readonly state: ChunkStateOf;
  /** Hit tokens, DEFER or RETRY. */
  readonly answer: LookupResult;
  /** Deferred while the levels below host resolve (not a lookup decision). */
  readonly lower: boolean;
  /** The chunks a hit protects for its load, with their tier slots. */
  readonly locked: readonly {
    readonly key: bigint;
    readonly slot: number;
    readonly group: number;
    readonly chunk: number;
  }[];
}

/** One finished store job, as `rt.on('job')` reports it (loads are not reported there). */
export interface JobEvent {
  jobId: number;
  chunks: number;
  bytes: number;
  latencyMs: number;
}

/** Sent to main once per request generation, just before it is marked drained. */
export interface DrainedRequest {
  requestId: number;
  slot: number;
  generation: number;
  status: 'finished' | 'aborted';
  chunksStored: number;
  chunksDeferred: number;
  /** Chunks token-ready when the request ended, summed over groups. */
  tokenChunks: number;
  /**
   * Of those, chunks accounted for without this generation storing them:
   * loaded at admission, already in the tier, slid out of the window, or
   * counted as dropped (for capacity, or never ready).
   */
  chunksCounted: number;
  holes: number;
  doubleStores: number;
  /** Per-pass windows, for a traced request only (options.traceRequests). */
  trace?: TracedRequest;
}

export interface VerifyReport {
  ok: boolean;
  entriesChecked: number;
  /**
   * Entries whose store copy was still in flight when the check ran, so not
   * checked: verify() waits (bounded) for the copies dispatched before it was
   * called, so this is 0 unless a copy took longer than that wait or new
   * copies were dispatched meanwhile.
   */
  entriesInFlight: number;
  blocksChecked: number;
  mismatches: number;
  holes: number;
  doubleStores: number;
  /** The first few mismatching keys, as hex. */
  mismatchKeys: string[];
}

export interface StoreLoopEvents {
  jobs(events: JobEvent[]): void;
  drained(request: DrainedRequest): void;
}

/** An entry whose store copy is in flight: `task` numbers the copies in dispatch order. */
interface Writing {
  readonly slot: number;
  readonly positions: readonly number[];
  /** The KV group the chunk belongs to (KV events name it). */
  readonly group: number;
  readonly task: number;
}

interface HitLock {
  readonly keys: bigint[];
  /** Per loaded (group, chunk), group-major: tier slot. */
  readonly slots: number[];
  readonly chunks: { group: number; chunk: number }[];
  readonly hit: number;
  /** The store's reset count when the hit was answered: from an earlier one, its slots are retired. */
  readonly resets: number;
}

/**
 * Consecutive failed store copies (no success between them) after which the
 * store gives up on the transfer backend. A copy can fail for a reason of its
 * own (a device error, a bad block); this many in a row means the backend
 * itself is broken, and a store that kept dispatching to it would drop every
 * chunk of every request while reporting a healthy runtime.
 */
const TRANSFER_FAILURES_MAX = 16;

/** Store jobs in flight before a pass is skipped (bounds the backend's queue), by default. */
export const JOBS_IN_FLIGHT_MAX = 256;

// Per chunk coverage flags of the current generation of a slot.
const COVERED = 1;
const STORED = 2;
const DEFERRED = 4;

const RECORDS_PER_STEP_MAX = 64;

export class StoreLoop {
  readonly tier: HostTier;
  readonly planner: StorePlanner;
  private readonly views: RuntimeViews;
  private readonly backend: TransferBackend;
  private readonly events: StoreLoopEvents;
  private readonly requests: SpscRing;
  private readonly answers: Outbox;
  private readonly skipPins: boolean;
  private readonly delayMs: number;
  private readonly jobsInFlightMax: number;
  private readonly faultAfterTasks: number;
  private readonly loadWhileWriting: boolean;
  private readonly onLookupAnswered: ((answered: LookupAnswered) => void) | undefined;
  /** Test-only rule bugs of the lookup (all off in a real runtime). */
  private readonly lookupUnsafe: LookupUnsafe;
  private readonly leakOnLoadFailure: boolean;
  private readonly faultTasks: number;
  private readonly transferFailuresMax: number;
  private tasks = 0;
  /** Failed store copies since the last one that succeeded. */
  private transferFailuresInRow = 0;
  private jobsTransferFailed = 0;
  private readonly loads = new Map<number, { lock: HitLock; tag: number }>();
  private readonly locks = new Map<number, HitLock>();
  /** Locks of failed loads under unsafeLeakOnLoadFailure: never released. */
  private readonly leaked: HitLock[] = [];
  /** Keys locked by a looked-up hit or read by a load in flight, with how many hold them. */
  private readonly beingLoaded = new Map<bigint, number>();
  private lookupsDeferred = 0;
  private lookupsRetried = 0;
  private readonly loadingRequests = new Set<number>();
  private readonly readable = new Map<bigint, ReadableEntry>();
  /** Positions of keys being written, until their job completes. */
  private readonly writing = new Map<bigint, Writing>();
  // Per slot bookkeeping of the generation in slotGeneration.
  private readonly slotGeneration: Int32Array;
  private readonly coverage: Uint8Array[];
  private readonly markedTo: Int32Array;
  private readonly slotStored: Int32Array;
  private readonly slotDeferred: Int32Array;
  private readonly slotDoubles: Int32Array;
  /** Per slot: the store epoch the coverage below belongs to (a reset starts a new one). */
  private readonly slotEpoch: Int32Array;
  /** Per slot: a reset came during this generation, so its admission hit is no longer in the tier. */
  private readonly hitVoid: Uint8Array;
  /** Resets this loop ran (HitLock.resets compares against it). */
  private resets = 0;
  private holes = 0;
  private doubleStores = 0;
  private deferredThenStored = 0;
  private bytesCopied = 0;
  private jobsCompleted = 0;
  private nextLoadId = 1;
  private jobEvents: JobEvent[] = [];
  private readonly recorder: TraceRecorder | undefined;
  /** Lookups, write-through and promotion over the levels below host; undefined without them. */
  private readonly lower: LowerLookups | undefined;
  /** The host level's lookup counters (the rest come from the tier and the planner). */
  private readonly hostCounters = zeroCounters();
  private hostBytesRead = 0;
  /** KV events of every tier change, when the runtime publishes them. */
  private readonly capture: EventCapture | undefined;
  private readonly lookupTiming = new LookupTiming();
  private hostStoreUs = 0;
  private hostLoadUs = 0;
  /** Tokens of lookup hits per level that served them (the first full-attention group's chunks). */
  private readonly hitTokens: Record<TierName, number> = { host: 0, disk: 0, redis: 0 };
  /** The group whose chunks count hit tokens: the first full-attention one (-1: none). */
  private readonly tokenGroup: number;

  constructor(
    views: RuntimeViews,
    backend: TransferBackend,
    events: StoreLoopEvents,
    options: StoreLoopOptions = {},
  ) {
    this.views = views;
    this.backend = backend;
    this.events = events;
    const { config } = views;
    this.tier = new HostTier(config.tierChunks, {
      ...(options.unsafeEvictInUse ? { unsafeEvictInUse: true } : {}),
      ...(options.cache?.policy !== undefined ? { policy: options.cache.policy } : {}),
      ...(options.cache?.storeThreshold !== undefined
        ? { storeThreshold: options.cache.storeThreshold }
        : {}),
    });
    this.leakOnLoadFailure = options.unsafeLeakOnLoadFailure ?? false;
    this.skipPins = options.unsafeSkipPins ?? false;
    this.delayMs = options.transferDelayMs ?? 0;
    this.jobsInFlightMax = options.jobsInFlightMax ?? JOBS_IN_FLIGHT_MAX;
    this.faultAfterTasks = options.faultAfterTasks ?? Infinity;
    this.faultTasks = options.faultTasks ?? Infinity;
    this.transferFailuresMax = options.transferFailuresMax ?? TRANSFER_FAILURES_MAX;
    if (!Number.isInteger(this.transferFailuresMax) || this.transferFailuresMax < 1) {
      throw new InvalidArgumentError('transferFailuresMax', 'must be a positive integer');
    }
    this.loadWhileWriting = options.unsafeLoadWhileWriting ?? false;
    this.onLookupAnswered = options.onLookupAnswered;
    this.lookupUnsafe = {
      unsafeEagleTailKept: options.unsafeEagleTailKept ?? false,
      unsafeLastTokenLoaded: options.unsafeLastTokenLoaded ?? false,
    };
    const groups = views.state.groupCount;
    this.slotGeneration = new Int32Array(config.maxRequests);
    this.coverage = Array.from(
      { length: config.maxRequests * groups },
      () => new Uint8Array(config.maxChunksPerRequest),
    );
    this.markedTo = new Int32Array(config.maxRequests * groups);
    this.slotStored = new Int32Array(config.maxRequests);
    this.slotDeferred = new Int32Array(config.maxRequests);
    this.slotDoubles = new Int32Array(config.maxRequests);
    this.slotEpoch = new Int32Array(config.maxRequests);
    this.hitVoid = new Uint8Array(config.maxRequests);
    const traceRequests = options.traceRequests ?? 0;
    const recorder = traceRequests > 0 ? new TraceRecorder(views.state, traceRequests) : undefined;
    this.recorder = recorder;
    const observer: PlannerObserver = {
      chunk: (slot, generation, group, chunk, outcome) => {
        if (outcome === 'stored') recorder?.onStored(slot, group);
        this.onChunk(slot, generation, group, chunk, outcome);
      },
      deferred: (slot, generation, group, from, to) =>
        this.onDeferred(slot, generation, group, from, to),
      draining: (snap) => this.onDraining(snap),
    };
    this.planner = new StorePlanner(views.state, this.tier, {
      policy: options.policy ?? 'ready-prefix',
      // The transfer thread unpins each source block as its copy finishes.
      transferUnpins: true,
      ...(options.now ? { now: options.now } : {}),
      ...(options.finalWaitMsMax !== undefined ? { finalWaitMsMax: options.finalWaitMsMax } : {}),
      unsafeSkipPins: this.skipPins,
      unsafeSkipSettle: options.unsafeSkipSettle ?? false,
      ...(options.unsafeSkipRevalidate ? { unsafeSkipRevalidate: true } : {}),
      ...(options.unsafeEagleCursorUnexcluded ? { unsafeEagleCursorUnexcluded: true } : {}),
      ...(options.unsafeStoreLastSampledToken ? { unsafeStoreLastSampledToken: true } : {}),
      ...(options.unsafeAckOnAllocFailure ? { unsafeAckOnAllocFailure: true } : {}),
      ...(options.unsafeDropDeferred ? { unsafeDropDeferred: true } : {}),
      ...(options.unsafeReachabilityOneShort ? { unsafeReachabilityOneShort: true } : {}),
      ...(options.unsafePublishStaleJobs ? { unsafePublishStaleJobs: true } : {}),
      observer,
      ...(recorder || options.onPlanPoint
        ? {
            onPlanPoint: (point: PlanPoint, snap: Readonly<RequestSnapshot>) => {
              if (point === 'snapshot') recorder?.onSnapshot(snap);
              options.onPlanPoint?.(point, snap);
            },
          }
        : {}),
    });
    this.requests = views.ring('storeRequest');
    this.answers = new Outbox(views.ring('storeAnswer'));
    this.tokenGroup = config.groups.findIndex((g) => g.windowChunks === null);
    const queue = views.buffers.events;
    this.capture = queue ? new EventCapture(queue, views.state, config) : undefined;
    const capture = this.capture;
    this.lower = options.cascade
      ? new LowerLookups(
          options.cascade,
          views,
          this.tier,
          this.readable,
          () => this.takeTierEvents(),
          options.wake ?? (() => {}),
          () => this.resets,
          capture ? (key, group, parent) => capture.promoted(key, group, parent) : undefined,
        )
      : undefined;
    if (capture) for (const level of options.cascade?.levels ?? []) level.events.enabled = true;
  }

  /** Store jobs the planner holds (dispatched, not completed) plus loads in flight. */
  get jobsInFlight(): number {
    return this.planner.jobsHeld + this.loads.size;
  }

  /** Lookup timings since the last call (bounded), for the /metrics histograms. */
  takeLookupSamples(): LookupSample[] {
    return this.lookupTiming.take();
  }

  /** Store latencies of the lower levels since the last call, per chunk (the host's are the job events). */
  takeTierSamples(): TierStoreSample[] {
    return this.lower ? this.lower.cascade.takeSamples() : [];
  }

  /**
   * Work left after a step that no doorbell will announce: records past the
   * per-step bound, answers the full answer ring refused, and slots whose
   * dirty bit is set (the pass raises it itself for a visit that must come
   * back: a busy seqlock, a full tier, an ended request waiting for its last
   * keys). Everything else that makes work (a role's publication, a lookup,
   * a copy's completion, a lower level's answer) rings the store's bell. The
   * store worker steps again at once when this is true, and parks otherwise.
   */
  hasWorkLeft(): boolean {
    if (this.requests.used > 0 || this.answers.pending > 0) return true;
    // At the bound on jobs in flight a pass is skipped; a completion rings the bell.
    if (this.planner.jobsHeld >= this.jobsInFlightMax) return false;
    const dirty = this.views.state.dirty;
    for (let word = 0; word < dirty.length; word += 1) {
      if (Atomics.load(dirty, word) !== 0) return true;
    }
    return false;
  }

  /** One bounded unit of work; true when anything happened. */
  step(): boolean {
    let did = this.answers.flush() > 0;
    if (this.requests.drain((r) => this.handle(r), RECORDS_PER_STEP_MAX) > 0) did = true;
    if (this.collect()) did = true;
    if (this.planner.jobsHeld < this.jobsInFlightMax) {
      const before = this.planner.counters.jobs;
      this.planner.pass((job) => this.dispatch(job));
      this.recorder?.endPass();
      if (this.planner.counters.jobs !== before) did = true;
    }
    this.takeTierEvents();
    this.publishStats();
    return did;
  }

  /** Jobs completed since the last call, for the runtime's 'job' event. */
  takeJobEvents(): JobEvent[] {
    const out = this.jobEvents;
    this.jobEvents = [];
    return out;
  }

  /** Store copies dispatched so far; verify() waits for those up to this one. */
  get copiesDispatched(): number {
    return this.tasks;
  }

  /** True while a store copy dispatched at or before copy number `task` is in flight (O(1)). */
  copiesInFlightUpTo(task: number): boolean {
    for (const w of this.writing.values()) return w.task <= task;
    return false;
  }

  /** Every readable tier entry's bytes against the expansion of its key. */
  verify(): VerifyReport {
    const { tier, geometry } = this.views;
    let blocks = 0;
    let mismatches = 0;
    const mismatchKeys: string[] = [];
    for (const [key, e] of this.readable) {
      blocks += e.positions.length;
      if (!tierChunkMatches(tier, geometry, e.slot, key, e.positions)) {
        mismatches += 1;
        if (mismatchKeys.length < 8) mismatchKeys.push(key.toString(16));
      }
    }
    return {
      ok: mismatches === 0 && this.holes === 0 && this.doubleStores === 0,
      entriesChecked: this.readable.size,
      entriesInFlight: this.writing.size,
      blocksChecked: blocks,
      mismatches,
      holes: this.holes,
      doubleStores: this.doubleStores,
      mismatchKeys,
    };
  }

  /** Resets this loop ran. */
  get resetCount(): number {
    return this.resets;
  }

  /**
   * The reset count at which `key`'s host entry became readable, or undefined
   * when it is not readable (for the runtime fuzzer's oracle: an entry served
   * after a reset must have become readable after it).
   */
  readableSince(key: bigint): number | undefined {
    return this.readable.get(key)?.resets;
  }

  /** Leftovers after a run: entries still being written or read, slots a reset retired (0 after close). */
  leftovers(): { writing: number; reading: number; locks: number } {
    const s = this.tier.stats();
    return {
      writing: s.writing + (s.retired ?? 0),
      reading: s.reading,
      locks: this.locks.size + this.loads.size,
    };
  }

  /**
   * vLLM's reset_cache, run between two steps on this thread: the host tier
   * is emptied (the planner's reset: stores in flight become stale by job id,
   * live requests start a new store epoch at cursor 0); a load in flight, or
   * a hit answered and not loaded yet, goes on reading the slots the reset
   * retired and publishes nothing; a lower-level resolution under way
   * promotes nothing. With `shared`, the levels below first move their
   * scope's epoch, which retires this namespace's entries for every instance
   * (rejects with SharedResetFailedError when a level could not store it;
   * the host tier is reset either way), and the host tier is reset after
   * that, so nothing promoted from below while the epoch moved survives.
   */
  async reset(shared: boolean): Promise<void> {
    let failure: unknown;
    if (shared && this.lower) {
      this.lower.reset();
      try {
        await this.lower.cascade.retire();
      } catch (err) {
        failure = err;
      }
    }
    this.planner.reset();
    this.resets += 1;
    // Whatever the tier's own removals said, subscribers drop everything (vLLM's AllBlocksCleared).
    this.takeTierEvents();
    this.capture?.cleared();
    this.readable.clear();
    this.writing.clear();
    this.beingLoaded.clear();
    this.lower?.reset();
    // Before the caller hears of it: stats() after reset() sees it.
    this.publishStats();
    if (failure !== undefined) throw failure;
  }

  private dispatch(job: StoreJob): void {
    // One load xor stores per request (vLLM's §7.6): a loading request has computed nothing to store.
    if (this.loadingRequests.has(job.requestId))
      invariant(false, `request ${job.requestId} stores while it loads`);
    const bpc = this.views.config.blocksPerChunk;
    this.tasks += 1;
    for (const c of job.chunks) {
      // Deleted first so the map stays in dispatch order: its first entry is the oldest copy.
      this.writing.delete(c.key);
      this.writing.set(c.key, {
        slot: c.tierSlot,
        positions: c.positions.map((p) => p % bpc),
        group: c.group,
        task: this.tasks,
      });
    }
    this.capture?.dispatched(job);
    const task = encodeStoreTask(job, !this.skipPins, this.delayMs);
    if (this.tasks >= this.faultAfterTasks && this.tasks < this.faultAfterTasks + this.faultTasks)
      task[0] = TASK_FAULT;
    this.backend.submit(task);
  }

  private collect(): boolean {
    const done = this.backend.takeCompletions();
    for (const c of done) {
      if (c.kind === 'store') this.completeStore(c);
      else this.completeLoad(c);
    }
    return done.length > 0;
  }

  /**
   * A store copy finished: the planner ends the job (its one completion path)
   * and then the entries become readable. A failed copy fails its job only:
   * its chunks are counted (chunksTransferFailed), its tier reservations
   * discarded, its pins were released by the copy, and later jobs go on, as
   * vLLM treats a failed transfer. Only transferFailuresMax failures in a row
   * stop the store.
   */
  private completeStore(c: TransferCompletion): void {
    const job = this.planner.issuedJob(c.jobId);
    if (job === undefined) invariant(false, `store job ${c.jobId} was in flight`);
    // In flight at a reset: the planner publishes nothing and gives its retired slots back.
    const stale = this.planner.isStale(job);
    this.planner.complete(job, c.ok);
    if (!c.ok) {
      this.capture?.settled(job);
      this.storeFailed(job, c.error, stale);
      return;
    }
    this.transferFailuresInRow = 0;
    if (stale) {
      this.bytesCopied += c.bytes;
      this.jobsCompleted += 1;
      return;
    }
    const bpc = this.views.config.blocksPerChunk;
    for (const chunk of job.chunks) {
      const k = chunk.key;
      const w = this.writing.get(k);
      if (w === undefined) continue;
      this.writing.delete(k);
      this.readable.set(k, { ...w, resets: this.resets });
      // Write-through from the published host copy (whole chunks only): GPU blocks are already unpinned.
      if (this.lower && w.positions.length === bpc) this.lower.writeThrough(k, w.slot);
    }
    // Announced now, while the chunks' captured tokens are at hand.
    if (this.capture) {
      this.takeTierEvents();
      this.capture.settled(job);
    }

    this.bytesCopied += c.bytes;
    this.hostStoreUs += c.latencyMs * 1000;
    this.jobsCompleted += 1;
    this.jobEvents.push({
      jobId: c.jobId,
      chunks: job.chunks.length,
      bytes: c.bytes,
      latencyMs: c.latencyMs,
    });
  }

  private storeFailed(job: StoreJob, error: unknown, stale: boolean): void {
    // A stale job's keys may name entries of the new epoch: only its failure counts.
    if (!stale) for (const chunk of job.chunks) this.writing.delete(chunk.key);
    this.jobsTransferFailed += 1;
    this.transferFailuresInRow += 1;
    // The request's summary counts these as dropped, not stored, if it has not drained yet.
    if (!stale && this.slotGeneration[job.slot] === job.generation) {
      const groups = this.views.state.groupCount;
      for (const chunk of job.chunks) {
        const cov = this.coverage[job.slot * groups + chunk.group]!;
        if ((cov[chunk.chunk]! & STORED) === 0) continue;
        cov[chunk.chunk] = cov[chunk.chunk]! & ~STORED;
        this.slotStored[job.slot]! -= 1;
      }
    }
    if (this.transferFailuresInRow >= this.transferFailuresMax) {
      throw new TransferBackendFailedError(this.transferFailuresInRow, error);
    }
  }

  /**
   * The host tier's events: evicted entries stop being readable; with KV
   * events on, every change is announced (removals before their entries are
   * forgotten, so their group is still known), and so are the lower levels'.
   */
  private takeTierEvents(): void {
    const events = this.tier.takeEvents();
    if (this.capture) {
      this.capture.host(events, (k) => this.readable.get(k)?.group ?? this.writing.get(k)?.group);
      for (const level of this.lower?.cascade.levels ?? []) {
        const { events: changes, lost } = level.events.take();
        if (changes.length > 0 || lost > 0) this.capture.lower(level.name, changes, lost);
      }
    }
    for (const e of events) {
      if (e.kind === 'removed') for (const k of e.keys) this.readable.delete(k);
    }
  }

  private handle(r: Int32Array): void {
    const op = r[0];
    if (op === OP_LOOKUP) {
      const t0 = performance.now();
      this.lookupTiming.answered(r[1]!, t0, this.lookup(r));
    } else if (op === OP_LOAD) this.load(r);
    else if (op === OP_UNLOCK) this.unlock(r[1]!, r[2]!, r[3]!);
    else invariant(false, `store opcode ${op} is known`);
  }

  /**
   * Answers a lookup with the one lookup decision (src/lookup.ts): the hit in
   * chunks, or LOOKUP_DEFERRED when an entry it depends on is still being
   * written or is being read by another request's load (the scheduler asks
   * again later, so hits never depend on how fast the copy threads ran), or
   * LOOKUP_RETRY while a tier level below the host has not answered yet. Only
   * whole chunks count (every block position stored). Every lookup touches
   * the request's keys, group by group; hit entries are protected from
   * eviction until loaded or unlocked. The request's own limits apply: a
   * maxLoadTokens cap (rounded down to whole chunks) and skipReadingPrefixCache
   * (a hit of 0 that never defers; the keys are still touched, and the request
   * still stores, as in vLLM). The runtime loads whole chunks from a chunk
   * boundary, so groups must share tokensPerChunk (OffloadRuntime.start
   * refuses other configs with the load path on; here they hit 0) and the hit
   * is a whole number of chunks.
   */
  private lookup(r: Int32Array): boolean {
    const { config } = this.views;
    const groups = config.groups;
    const decoded = decodeLookup(config, r);
    const { tag, numTokens, force, keys, maxLoadTokens, skipReadingPrefixCache } = decoded;
    const state = (k: bigint) => this.chunkState(k, force);
    const tpc = groups[0]!.tokensPerChunk;
    // The runtime loads whole chunks, so the lookup itself must only consider
    // hits that end on a chunk boundary: rounding an unaligned hit down after
    // the fact would move a sliding-window group's window onto chunks that
    // were never checked (the store then threw on a key it could not load).
    const anyWindow =
      !this.lookupUnsafe.unsafeLastTokenLoaded && groups.some((g) => g.windowChunks !== null);
    const loadable = Math.min(numTokens - (anyWindow ? 1 : 0), maxLoadTokens ?? Infinity);
    const request = {
      numTokens,
      keys,
      maxLoadTokens: Math.floor(Math.max(0, loadable) / tpc) * tpc,
      skipReadingPrefixCache,
      maxRecomputePendingTokens: config.maxRecomputePendingTokens,
    };
    const result = groups.every((g) => g.tokensPerChunk === tpc)
      ? lookupHitTokens(groups, request, state, this.lookupUnsafe)
      : 0;
    invariant(
      asksAgain(result) || result % tpc === 0,
      'a runtime lookup hit ends on a chunk boundary',
    );
    invariant(
      asksAgain(result) || result <= request.maxLoadTokens,
      'a runtime lookup hit is within the cap',
    );
    const hitTokens = asksAgain(result) ? 0 : result;
    for (const t of touchRanges(
      groups,
      keys.map((k) => k.length),
      hitTokens,
    )) {
      if (t.to > t.from) this.tier.touch?.(keys[t.group]!.slice(t.from, t.to));
    }
    // Below a host prefix shorter than asked: the lower levels resolve (and
    // promote) first; ask again meanwhile. Not for a request that reads
    // nothing; a capped request asks up to its cap (and the EAGLE tail chunk
    // a widened query reads).
    const capChunks =
      maxLoadTokens === undefined
        ? Infinity
        : Math.floor(maxLoadTokens / tpc) + (groups.some((g) => g.eagle) ? 1 : 0);
    const asked = Math.min(capChunks, ...keys.map((k) => k.length));
    if (
      !asksAgain(result) &&
      this.lower &&
      !force &&
      !skipReadingPrefixCache &&
      hitTokens / tpc < asked
    ) {
      const prefixHit = (present: (k: bigint) => boolean) => {
        const t = lookupHitTokens(
          groups,
          request,
          (k) => (present(k) ? 'hit' : 'miss'),
          this.lookupUnsafe,
        );
        return asksAgain(t) ? 0 : Math.floor(t / tpc);
      };
      const view = { count: asked, key: (g: number, c: number) => keys[g]![c]!, prefixHit };
      const wait = this.lower.mustWait(tag, view);
      if (wait !== null) {
        this.askAgain(wait === 'retry' ? RETRY : DEFER, tag);
        this.onLookupAnswered?.({
          lookup: decoded,
          state,
          answer: wait === 'retry' ? RETRY : DEFER,
          lower: true,
          locked: [],
        });
        return true;
      }
    }
    const promoted = this.lower?.finish(tag);
    if (asksAgain(result)) {
      this.askAgain(result, tag);
      this.onLookupAnswered?.({ lookup: decoded, state, answer: result, lower: false, locked: [] });
      return true;
    }
    // One sighting per answered lookup, of every key it carries (the store threshold's count).
    for (const k of keys) this.tier.recordLookup(k);
    const hit = hitTokens / tpc;
    if (hit < asked) this.hostCounters.missChunks += 1;
    const lockedChunks: LookupAnswered['locked'][number][] = [];
    // The state the decision read, before this hit's lock makes its keys 'being read'.
    const decidedFrom = this.onLookupAnswered ? snapshotState(keys, state) : state;
    if (hit > 0) {
      const locked: bigint[] = [];
      const chunks: { group: number; chunk: number }[] = [];
      for (const plan of loadPlan(groups, 0, hitTokens)) {
        for (let c = plan.firstChunk; c < plan.endChunk; c += 1) {
          locked.push(keys[plan.group]![c]!);
          chunks.push({ group: plan.group, chunk: c });
        }
      }
      const { keys: prepared, slots } = this.protect(locked);
      for (const k of prepared) this.beingLoaded.set(k, (this.beingLoaded.get(k) ?? 0) + 1);
      this.locks.set(tag, { keys: prepared, slots, chunks, hit, resets: this.resets });
      for (const k of prepared) if (promoted?.has(k) !== true) this.hostCounters.hitChunks += 1;
      for (let i = 0; i < chunks.length; i += 1) {
        const g = chunks[i]!.group;
        if (g !== this.tokenGroup) continue;
        const level = promoted?.get(locked[i]!) ?? 'host';
        this.hitTokens[level] += groups[g]!.tokensPerChunk;
      }
      if (this.onLookupAnswered) {
        chunks.forEach((c, i) =>
          lockedChunks.push({ key: keys[c.group]![c.chunk]!, slot: slots[i]!, ...c }),
        );
      }
    }
    this.onLookupAnswered?.({
      lookup: decoded,
      state: decidedFrom,
      answer: hitTokens,
      lower: false,
      locked: lockedChunks,
    });
    this.answers.send([ANS_LOOKED_UP, tag, hit]);
    return false;
  }

  /** Answers a lookup "ask again later", counting a deferral (pending) apart from a retry (unknown). */
  private askAgain(why: typeof DEFER | typeof RETRY, tag: number): void {
    if (why === RETRY) this.lookupsRetried += 1;
    else {
      this.lookupsDeferred += 1;
      this.hostCounters.pendingChunks += 1;
    }
    this.answers.send([ANS_LOOKED_UP, tag, why === RETRY ? LOOKUP_RETRY : LOOKUP_DEFERRED]);
  }

  /** Tier slots of a hit's keys, each protected from eviction (entries being written only under the unsafe switch: unprotected). */
  private protect(keys: bigint[]): { keys: bigint[]; slots: number[] } {
    if (!this.loadWhileWriting) return { keys, slots: this.tier.prepareLoad(keys) };
    const prepared: bigint[] = [];
    const slots: number[] = [];
    for (const k of keys) {
      const w = this.writing.get(k);
      if (w !== undefined) slots.push(w.slot);
      else {
        prepared.push(k);
        slots.push(this.tier.prepareLoad([k])[0]!);
      }
    }
    return { keys: prepared, slots };
  }

  /** A key's state for lookups: whole and readable, being written or read (pending), or missing. */
  private chunkState(k: bigint, force: boolean): ChunkState {
    const bpc = this.views.config.blocksPerChunk;
    if (this.loadWhileWriting && this.writing.get(k)?.positions.length === bpc) return 'hit';
    if (this.readable.get(k)?.positions.length === bpc) {
      return !force && this.beingLoaded.has(k) ? 'pending' : 'hit';
    }
    if (this.writing.get(k)?.positions.length === bpc) return force ? 'miss' : 'pending';
    return 'miss';
  }

  /** [LOAD, tag, slot, generation, ...block IDs for each locked (group, chunk) in order, bpc per chunk]. */
  private load(r: Int32Array): void {
    const tag = r[1]!;
    const lock = this.locks.get(tag);
    if (lock === undefined) invariant(false, `load ${tag} follows a lookup hit`);
    this.locks.delete(tag);
    const bpc = this.views.config.blocksPerChunk;
    invariant(r.length === 4 + lock.chunks.length * bpc, 'a block per loaded position');
    const entries: LoadEntry[] = [];
    for (let i = 0; i < lock.chunks.length; i += 1) {
      for (let p = 0; p < bpc; p += 1) {
        const block = r[4 + i * bpc + p]!;
        // 0: a window's leading null block the engine left out of the load (and never a
        // copy into the null block, whatever a host sends).
        if (block === 0) continue;
        entries.push({ tierSlot: lock.slots[i]!, chunkPosition: p, block });
      }
    }
    for (const job of this.planner.issuedJobs()) {
      if (job.requestId === tag)
        invariant(false, `request ${tag} loads while its stores are in flight`);
    }
    // A hit answered before a reset loads from its retired slots; the request's
    // cursor started after that hit, which the tier no longer holds: from 0 again.
    if (lock.resets !== this.resets) this.restartRequest(r[2]!, r[3]!);
    const jobId = -this.nextLoadId++;
    this.loads.set(jobId, { lock, tag });
    this.loadingRequests.add(tag);
    this.backend.submit(encodeLoadTask(jobId, entries, 0));
  }

  private completeLoad(c: TransferCompletion): void {
    const load = this.loads.get(c.jobId);
    if (load === undefined) invariant(false, `load job ${c.jobId} was in flight`);
    this.loads.delete(c.jobId);
    this.loadingRequests.delete(load.tag);
    // The unsafe variant parks the failed load's lock where nothing ever releases it.
    if (!c.ok && this.leakOnLoadFailure) this.leaked.push(load.lock);
    else this.release(load.lock);
    this.hostBytesRead += c.bytes;
    this.hostLoadUs += c.latencyMs * 1000;
    this.answers.send([ANS_LOADED, load.tag, c.ok ? 1 : 0]);
  }

  private unlock(tag: number, slot: number, generation: number): void {
    const lock = this.locks.get(tag);
    if (lock === undefined) {
      // A request that ended while it waited to ask again: its resolution reads nothing more.
      this.lower?.forget(tag);
      return;
    }
    this.locks.delete(tag);
    // Given up: the request recomputes from its cursor, which a stale hit placed past chunks the tier lost.
    if (lock.resets !== this.resets) this.restartRequest(slot, generation);
    this.release(lock);
  }

  /** The request in `slot` (if it is still `generation`) starts a new store epoch from cursor 0. */
  private restartRequest(slot: number, generation: number): void {
    const { state, config } = this.views;
    if (!(Number.isInteger(slot) && slot >= 0 && slot < config.maxRequests)) return;
    const now = Atomics.load(state.control, state.schedulerWord(slot, S_GENERATION));
    if (now === generation) this.planner.restart(slot);
  }

  private release(lock: HitLock): void {
    if (lock.resets !== this.resets) {
      // Read from slots a reset retired: they go back; the entries are gone.
      this.tier.releaseRetired(lock.slots);
      return;
    }
    this.tier.completeLoad(lock.keys);
    for (const k of lock.keys) {
      const n = this.beingLoaded.get(k)!;
      if (n <= 1) this.beingLoaded.delete(k);
      else this.beingLoaded.set(k, n - 1);
    }
  }

  // --- planner observer: this thread only ---

  private adopt(slot: number, generation: number): void {
    const { state } = this.views;
    // The store line is this thread's own: a plain read of the epoch.
    const epoch = state.control[state.storeWord(slot, T_EPOCH)]!;
    const fresh = this.slotGeneration[slot] !== generation;
    if (!fresh && this.slotEpoch[slot] === epoch) return;
    this.slotGeneration[slot] = generation;
    // A new epoch (a reset) starts the coverage over: its chunks are stored again.
    this.hitVoid[slot] = fresh ? 0 : 1;
    this.slotEpoch[slot] = epoch;
    const groups = state.groupCount;
    for (let g = 0; g < groups; g += 1) {
      this.coverage[slot * groups + g]!.fill(0);
      this.markedTo[slot * groups + g] = 0;
    }
    if (!fresh) return;
    this.slotStored[slot] = 0;
    this.slotDeferred[slot] = 0;
    this.slotDoubles[slot] = 0;
  }

  private onChunk(
    slot: number,
    generation: number,
    group: number,
    chunk: number,
    outcome: ChunkOutcome,
  ): void {
    this.adopt(slot, generation);
    const cov = this.coverage[slot * this.views.state.groupCount + group]!;
    const was = cov[chunk]!;
    if (outcome === 'stored') {
      if ((was & STORED) !== 0) {
        this.doubleStores += 1;
        this.slotDoubles[slot]! += 1;
      }
      if ((was & DEFERRED) !== 0) this.deferredThenStored += 1;
      this.slotStored[slot]! += 1;
      cov[chunk] = was | STORED | COVERED;
    } else {
      cov[chunk] = was | COVERED;
    }
  }

  private onDeferred(
    slot: number,
    generation: number,
    group: number,
    from: number,
    to: number,
  ): void {
    this.adopt(slot, generation);
    const i = slot * this.views.state.groupCount + group;
    const cov = this.coverage[i]!;
    this.slotDeferred[slot]! += to - from;
    const end = Math.min(to, cov.length);
    for (let c = Math.max(from, this.markedTo[i]!); c < end; c += 1) cov[c] = cov[c]! | DEFERRED;
    this.markedTo[i] = Math.max(this.markedTo[i]!, end);
  }

  /**
   * Runs before the drained mark: the allocator cannot free (or the slot be
   * reused) yet. A hole is a chunk that was token-ready when the request ended
   * and was neither stored (or present, or slid out) nor counted as dropped,
   * whether or not its keys or block IDs were ever published.
   */
  private onDraining(snap: Readonly<RequestSnapshot>): void {
    const { state, config } = this.views;
    const slot = snap.slot;
    this.adopt(slot, snap.generation);
    let holes = 0;
    let tokenReady = 0;
    let counted = 0;
    const offloadable = offloadableTokens(snap, config);
    for (let g = 0; g < state.groupCount; g += 1) {
      // After a reset the admission hit is gone from the tier: those chunks count as anything else.
      const hit =
        this.hitVoid[slot] === 1
          ? 0
          : Atomics.load(state.control, state.schedulerWord(slot, S_HIT_CHUNKS + g));
      const cov = this.coverage[slot * state.groupCount + g]!;
      const end = Math.min(tokenChunks(snap, config.groups[g]!, offloadable), cov.length);
      tokenReady += Math.max(end, 0);
      counted += Math.min(hit, end); // loaded from the tier at admission
      for (let c = hit; c < end; c += 1) {
        const was = cov[c]!;
        if ((was & COVERED) === 0) holes += 1;
        else if ((was & STORED) === 0) counted += 1;
      }
      // Passed by the cursor beyond the end's token chunks (an abort's horizon shrank): still checked.
      for (let c = Math.max(hit, end); c < Math.min(snap.cursor[g]!, cov.length); c += 1)
        if ((cov[c]! & COVERED) === 0) holes += 1;
    }
    this.holes += holes;
    this.publishStats(); // before the drained event: main may read stats as soon as it arrives
    const status = Atomics.load(state.control, state.schedulerWord(slot, S_STATUS));
    const requestId = Atomics.load(state.control, state.schedulerWord(slot, S_REQUEST_ID));
    const ended = status === Status.finished ? 'finished' : 'aborted';
    const trace = this.recorder?.take(requestId, slot, ended);
    this.events.drained({
      requestId,
      slot,
      generation: snap.generation,
      status: ended,
      chunksStored: this.slotStored[slot]!,
      chunksDeferred: this.slotDeferred[slot]!,
      tokenChunks: tokenReady,
      chunksCounted: counted,
      holes,
      doubleStores: this.slotDoubles[slot]!,
      ...(trace ? { trace } : {}),
    });
  }

  /** Traces of the traced requests not yet ended, up to now (the store is failing). */
  takeLiveTraces(): TracedRequest[] {
    return this.recorder?.takeLive() ?? [];
  }

  private publishStats(): void {
    const s = this.views.stats;
    const c = this.planner.counters;
    publishStat(s, 'chunksStored', c.chunksStored);
    publishStat(s, 'resets', c.resets);
    publishStat(s, 'chunksDiscardedByReset', c.chunksDiscardedByReset);
    publishStat(s, 'chunksDeferred', c.chunksDeferred);
    publishStat(s, 'chunksSkippedUnready', c.chunksSkippedUnready);
    publishStat(s, 'chunksDeferredThenStored', this.deferredThenStored);
    publishStat(s, 'allocationRetries', c.allocationFailures);
    publishStat(s, 'chunksDroppedForCapacity', c.chunksDroppedForCapacity);
    publishStat(s, 'chunksDroppedUnready', c.chunksDroppedUnready);
    publishStat(s, 'chunksUnreachable', c.chunksUnreachable);
    publishStat(s, 'snapshotRetries', c.snapshotRetries);
    publishStat(s, 'bytesCopied', this.bytesCopied);
    publishStat(s, 'jobsInFlight', this.jobsInFlight);
    publishStat(s, 'jobsCompleted', this.jobsCompleted);
    publishStat(s, 'jobsTransferFailed', this.jobsTransferFailed);
    publishStat(s, 'chunksTransferFailed', c.chunksTransferFailed);
    publishStat(s, 'jobsHeld', this.planner.jobsHeld);
    publishStat(s, 'tierUsed', this.tier.stats().used);
    publishStat(s, 'holes', this.holes);
    publishStat(s, 'doubleStores', this.doubleStores);
    publishStat(s, 'storePasses', c.passes);
    publishStat(s, 'lookupsDeferred', this.lookupsDeferred);
    publishStat(s, 'lookupsRetried', this.lookupsRetried);
    publishStat(s, 'storesBelowThreshold', this.tier.admissionSkips);
    if (this.capture) {
      publishStat(s, 'eventsQueued', this.capture.queue.queued);
      publishStat(s, 'eventsDropped', this.capture.queue.dropped);
    }
    const t = this.tier.stats();
    const host = this.hostCounters;
    host.storedChunks = t.stores;
    host.evictions = t.evictions;
    host.bytesWritten = this.bytesCopied;
    host.bytesRead = this.hostBytesRead;
    host.droppedChunks = c.chunksDroppedForCapacity;
    host.fullChunks = c.allocationFailures;
    host.storeUs = this.hostStoreUs;
    host.loadUs = this.hostLoadUs;
    host.hitTokens = this.hitTokens.host;
    const chunkBytes = this.views.config.blocksPerChunk * this.views.config.bytesPerBlock;
    host.entries = t.used;
    host.bytesUsed = t.used * chunkBytes;
    host.capacityBytes = t.capacityChunks * chunkBytes;
    host.storesPending = t.writing;
    publishTierCounters(this.views.tierStats, 'host', host);
    for (const level of this.lower?.cascade.levels ?? []) {
      const counters: TierCounters = {
        ...level.counters,
        hitTokens: this.hitTokens[level.name],
        storesPending: level.storesInFlight,
        ...level.usage?.(),
      };
      publishTierCounters(this.views.tierStats, level.name, counters);
    }
    const lt = this.lookupTiming;
    publishStat(s, 'lookupCalls', lt.syncCount);
    publishStat(s, 'lookupCallUs', lt.syncSeconds * 1e6);
    publishStat(s, 'lookupsResolvedAfterDefer', lt.resolvedCount);
    publishStat(s, 'lookupDeferredUs', lt.resolvedSeconds * 1e6);
  }
}

/** Every key's state now, frozen (for a hook that runs after the state moved on). */
function snapshotState(keys: readonly (readonly bigint[])[], state: ChunkStateOf): ChunkStateOf {
  const frozen = new Map<bigint, ChunkState>();
  for (const ks of keys) for (const k of ks) frozen.set(k, state(k));
  return (k) => frozen.get(k) ?? state(k);
}
