// One store-planning pass: for every occupied slot, snapshot each group, take
// the store window from the one rule, offer the chunks to the tier, pin their
// source blocks, build the job and advance cursors exactly as vLLM's store path
// does after the fix: unchanged when the tier cannot allocate, to the window's
// end otherwise. The steady-state pass with nothing ready allocates nothing.
//
// A pass visits only the slots whose dirty bit is set (see markDirty in
// layout.ts): the writer roles raise it after every publication, the pass
// takes 32 bits at a time with one Atomics.exchange. A visit that must come
// back without a new publication (a busy seqlock, a full tier, an ended
// request waiting for lagging keys) raises the bit again itself, so nothing
// waits for an event that may never come.
import type { Config } from './config.js';
import { InvalidArgumentError, invariant } from './errors.js';
import type { ChunkCopy } from './copy.js';
import type { StoreJob } from './job.js';
import { DIRTY_SLOTS_PER_WORD, SNAPSHOT_RETRIES_MAX, Status, markDirty } from './layout.js';
import { pinBlocks, unpinBlocks } from './pins.js';
import {
  alignmentChunks,
  emptyWindow,
  keysExpected,
  offloadableTokens,
  readyPrefix,
  storeReachable,
  storeWindow,
  tokenChunks,
} from './ready.js';
import type { RequestFacts, StorePolicy, StoreWindow } from './ready.js';
import { RequestSnapshot, StoreRole } from './roles/store.js';
import type { SharedState } from './state.js';
import type { OffloadTier } from './tier/types.js';

/** Passes an ended request's final offer may fail for lack of tier space before its chunks are dropped. */
export const FINAL_STORE_ATTEMPTS_MAX = 3;

/**
 * The end-of-request protocol, bound of its wait. An ended request whose
 * token-ready chunks are not all ready waits (its blocks are held until it
 * drains) until both sources are settled: the allocator's mark that every
 * block ID of the generation is published (`blocksSettled`), and every key its
 * final tokens yield. Then whatever is still missing can never come and is
 * counted in chunksDroppedUnready. The wait is bounded in time without a
 * publication, not in visits: a store that keeps pace visits a waiting slot on
 * every pass, so a bound in visits was minutes in threads and a fraction of a
 * second in a test. A host that never settles, or a stalled allocator or
 * hasher, holds the blocks at most this long after its last publication;
 * what is missing then is counted the same way. Never silent.
 */
export const FINAL_WAIT_MS_MAX = 1_000;

/** What happened to a chunk of a store window once the cursor moved over it. */
export type ChunkOutcome =
  'stored' | 'present' | 'null' | 'unreachable' | 'dropped' | 'unready' | 'skipped';

/**
 * Optional hooks for drivers that check invariants (runtime, fuzzer, tests);
 * the chunk ledger (src/ledger.ts) is one. Called as methods of the observer,
 * on the store role's thread; they must not write shared state.
 */
export interface PlannerObserver {
  /**
   * A chunk the cursor moved over: dispatched, already in the tier, null (slid
   * out), unreachable (a sliding-window chunk no aligned hit can use, see
   * storeReachable), or dropped for capacity; or a token-ready chunk of an ended request
   * counted in chunksDroppedUnready ('unready': its keys or blocks never came);
   * or a token-ready chunk that was not ready and that a legacy policy passed
   * without a copy ('skipped', counted in chunksSkippedUnready: a hole, never
   * under ready-prefix).
   */
  chunk?(
    slot: number,
    generation: number,
    group: number,
    chunk: number,
    outcome: ChunkOutcome,
  ): void;
  /** Chunks [from, to) of a group were token-ready but not ready at this pass. */
  deferred?(slot: number, generation: number, group: number, from: number, to: number): void;
  /**
   * A group's cursor moved from `from` to `snap.cursor[group]`, at a pass whose
   * window's ready prefix was `ready`.
   */
  cursorMoved?(snap: Readonly<RequestSnapshot>, group: number, from: number, ready: number): void;
  /** Just before an ended request is marked drained: its cursors are final, its blocks still held. */
  draining?(snap: Readonly<RequestSnapshot>): void;
  /** A job completed with success = false (complete()): its chunks were not stored. */
  failed?(job: StoreJob): void;
}

export interface PlannerOptions {
  policy?: StorePolicy;
  observer?: PlannerObserver;
  /**
   * Test-only: skip pinning source blocks. Exists so a test can show that the
   * reuse-mid-copy check fails without pins; never turn it off otherwise.
   */
  unsafeSkipPins?: boolean;
  /**
   * Test-only: skip the re-validation of the snapshot after pinning. Exists so
   * the fuzzer can show that a torn read (block IDs changed between the
   * snapshot and the pins) is caught only by it; never turn it off otherwise.
   */
  unsafeSkipRevalidate?: boolean;
  /**
   * Test-only: turn the end-of-request protocol off. The final pass of an
   * ended request neither waits for its blocks and keys to settle nor counts
   * what is missing: it drains at once, and chunks whose block IDs or keys
   * were still on their way are lost silently (the bug the protocol fixes).
   * Exists so the fuzzer can show it finds that loss; never turn it off otherwise.
   */
  unsafeSkipSettle?: boolean;
  /**
   * Test-only (failure class F2, vLLM #46971): apply the EAGLE trailing-chunk
   * exclusion when choosing the chunks to store but not when moving the
   * cursor, so the cursor passes the held-back chunk and it is never stored.
   * Exists so the failure-class tests and `kvoff fuzz --broken f02` can show
   * the oracle catches it; never turn it on otherwise.
   */
  unsafeEagleCursorUnexcluded?: boolean;
  /**
   * Test-only (failure class F4, vLLM #54288): count a finished request's last
   * sampled token as offloadable, so a chunk ending with it (whose KV was never
   * computed) is stored. Exists so the failure-class tests and
   * `kvoff fuzz --broken f04` can show it is caught; never turn it on otherwise.
   */
  unsafeStoreLastSampledToken?: boolean;
  /**
   * Test-only: a chunk of a job completed with success = false keeps its
   * source blocks pinned (a reference never dropped: failure class F8). Exists
   * so a test can show that the unpin of failed copies is what frees them;
   * never turn it on otherwise.
   */
  unsafeSkipUnpinOnFailure?: boolean;
  /**
   * Test-only: an offer the tier refused (cannot-allocate) is treated as
   * stored: the cursor moves over its chunks and they count as stored
   * (failure class F9). Exists so a test can show that a refusal must leave
   * the cursor where it was; never turn it on otherwise.
   */
  unsafeAckOnAllocFailure?: boolean;
  /**
   * Test-only: chunks deferred at a pass (token-ready, keys or blocks not yet
   * published) are acknowledged at deferral: counted as deferred, and the
   * cursor moves over them, so no later pass stores them (failure class F10).
   * Exists so a test can show that the cursor must stay below deferred
   * chunks; never turn it on otherwise.
   */
  unsafeDropDeferred?: boolean;
  /**
   * How long (ms, on `now`) an ended request waits, without a new key or block
   * ID, for its blocks and keys to settle before what is missing is counted as
   * dropped; default FINAL_WAIT_MS_MAX. 0 drains at the first visit that finds
   * a chunk lagging.
   */
  finalWaitMsMax?: number;
  /**
   * The clock of the final wait, in ms; default performance.now. A
   * deterministic driver (the fuzzer, a test) passes its virtual clock so a
   * schedule replays the same whatever the machine's speed.
   */
  now?: () => number;
  /**
   * The copy releases its own source pins (the threaded transfer role unpins
   * each block as it finishes, before it reports): complete() then neither
   * checks nor releases them. Default false: complete() unpins, as the
   * facade's and the fuzzer's copies do.
   */
  transferUnpins?: boolean;
  /**
   * Called at the points of planning one slot where another role's write can
   * land in real threads: after the snapshot's counts are read ('snapshot')
   * and after the source blocks are pinned, before the snapshot is confirmed
   * ('pinned'). The deterministic simulator runs other roles' steps here (and
   * its oracle reads the snapshot); real threads pass nothing.
   */
  onPlanPoint?: PlanPointListener;
}

/** The planner's test-only switches (src/fuzz/switches.ts says which bug each re-creates). */
type PlannerSwitch = keyof PlannerOptions & `unsafe${string}`;
export type PlannerSwitches = Pick<PlannerOptions, PlannerSwitch>;

const PLANNER_SWITCHES = [
  'unsafeSkipPins',
  'unsafeSkipRevalidate',
  'unsafeSkipSettle',
  'unsafeEagleCursorUnexcluded',
  'unsafeStoreLastSampledToken',
  'unsafeSkipUnpinOnFailure',
  'unsafeAckOnAllocFailure',
  'unsafeDropDeferred',
] as const satisfies readonly PlannerSwitch[];
// Every switch of PlannerOptions is in the list (a compile error otherwise).
const everySwitchListed: Exclude<PlannerSwitch, (typeof PLANNER_SWITCHES)[number]> extends never
  ? true
  : never = true;
void everySwitchListed;

/** The planner switches turned on in `o`, for a driver that passes them on to its planner. */
export function plannerSwitches(o: PlannerSwitches): PlannerSwitches {
  const out: PlannerSwitches = {};
  for (const k of PLANNER_SWITCHES) if (o[k] === true) out[k] = true;
  return out;
}

export type PlanPoint = 'snapshot' | 'pinned';
export type PlanPointListener = (point: PlanPoint, snap: Readonly<RequestSnapshot>) => void;

/** Cumulative counters of the store role. */
export interface PlannerCounters {
  passes: number;
  requestsVisited: number;
  jobs: number;
  chunksOffered: number;
  chunksStored: number;
  chunksAlreadyPresent: number;
  chunksSkippedNull: number;
  /** Sliding-window chunks passed without a copy: no hit aligned to the full-attention chunk can use them (vLLM's alignment filter). */
  chunksUnreachable: number;
  /**
   * Chunk-visits where a chunk was token-ready but not ready (its key or blocks
   * lagged). A pass visits a slot only after a publication (its dirty bit), so
   * a chunk waiting on an idle slot is counted once per publication, not per pass.
   */
  chunksDeferred: number;
  /**
   * Token-ready chunks the cursor moved past without storing them, because their
   * key or blocks lagged: a legacy policy's holes (legacy-zip), never deferrals.
   * Always 0 under ready-prefix.
   */
  chunksSkippedUnready: number;
  allocationFailures: number;
  chunksDroppedForCapacity: number;
  /**
   * Token-ready chunks of an ended request that were never ready: their keys
   * or blocks were settled without them, or still missing after the final
   * wait's bound (or the tier refused the request's final offers).
   */
  chunksDroppedUnready: number;
  /** Chunks of jobs completed with success = false: their cursor moved on, so they are counted, never silent. */
  chunksTransferFailed: number;
  snapshotRetries: number;
  snapshotsGivenUp: number;
}

export type JobListener = (job: StoreJob) => void;

export class StorePlanner {
  readonly state: SharedState;
  readonly tier: OffloadTier;
  readonly policy: StorePolicy;
  readonly counters: PlannerCounters;
  private readonly role: StoreRole;
  private readonly config: Config;
  private readonly skipPins: boolean;
  private readonly skipRevalidate: boolean;
  private readonly skipSettle: boolean;
  private readonly eagleCursorUnexcluded: boolean;
  private readonly storeLastSampled: boolean;
  private readonly skipUnpinOnFailure: boolean;
  private readonly ackOnAllocFailure: boolean;
  private readonly dropDeferred: boolean;
  private readonly finalWaitMsMax: number;
  private readonly now: () => number;
  private readonly transferUnpins: boolean;
  private readonly onPlanPoint: PlanPointListener | undefined;
  private readonly observer: PlannerObserver | undefined;
  private readonly snap: RequestSnapshot;
  private readonly windows: StoreWindow[];
  /** Per group: alignmentChunks (null: every chunk reachable). */
  /** Scratch key list lent to tier.touch (see touchRequest). */
  private readonly touchKeys: bigint[] = [];
  private readonly alignment: (number | null)[];
  /** Per group: first chunk deferred at this pass (the rest up to tokenChunks). */
  private readonly deferredFrom: Int32Array;
  /** Per group: first chunk that waits at this pass (deferredFrom, or past it where the cursor skipped). */
  private readonly waitingFrom: Int32Array;
  /** Per slot: failed final offers of the generation in finalAttemptGeneration. */
  private readonly finalAttempts: Int32Array;
  private readonly finalAttemptGeneration: Int32Array;
  /** Per slot: when (on `now`) the ended generation in finalWaitGeneration last saw a publication while waiting. */
  private readonly finalWaitSinceMs: Float64Array;
  /** Per slot: keys plus block IDs published at that moment. */
  private readonly finalWaitPublished: Int32Array;
  private readonly finalWaitGeneration: Int32Array;
  private nextJobId = 1;
  /**
   * Jobs handed out and not yet completed, by jobId. A Map keyed by the
   * number, not a WeakSet of the job: an object key needs an identity hash
   * (and a WeakSet an ephemeron entry) per job, which was the largest single
   * cost of planning a one-chunk job. complete() is the one way out, for
   * every driver (the threaded store once completed jobs around it, and every
   * job it ever dispatched stayed here: the store worker's heap grew about a
   * gigabyte a minute under load). `jobsHeld` exposes the count so a leak
   * shows in stats() and the leak report.
   */
  private readonly issued = new Map<number, StoreJob>();
  /**
   * The first pass visits every slot: a planner attached to state that
   * already holds requests (or whose bits an earlier planner took) must not
   * wait for their next publication.
   */
  private visitAllNext = true;

  constructor(state: SharedState, tier: OffloadTier, options: PlannerOptions = {}) {
    this.state = state;
    this.tier = tier;
    this.config = state.config;
    this.policy = options.policy ?? 'ready-prefix';
    this.skipPins = options.unsafeSkipPins ?? false;
    this.skipRevalidate = options.unsafeSkipRevalidate ?? false;
    this.skipSettle = options.unsafeSkipSettle ?? false;
    this.eagleCursorUnexcluded = options.unsafeEagleCursorUnexcluded ?? false;
    this.storeLastSampled = options.unsafeStoreLastSampledToken ?? false;
    this.skipUnpinOnFailure = options.unsafeSkipUnpinOnFailure ?? false;
    this.ackOnAllocFailure = options.unsafeAckOnAllocFailure ?? false;
    this.dropDeferred = options.unsafeDropDeferred ?? false;
    this.finalWaitMsMax = options.finalWaitMsMax ?? FINAL_WAIT_MS_MAX;
    if (
      typeof this.finalWaitMsMax !== 'number' ||
      !Number.isFinite(this.finalWaitMsMax) ||
      this.finalWaitMsMax < 0
    ) {
      throw new InvalidArgumentError('finalWaitMsMax', 'must be a finite number of ms, 0 or more');
    }
    if (options.now !== undefined && typeof options.now !== 'function') {
      throw new InvalidArgumentError('now', 'must be a function returning ms');
    }
    this.now = options.now ?? (() => performance.now());
    this.transferUnpins = options.transferUnpins ?? false;
    this.observer = options.observer;
    this.onPlanPoint = options.onPlanPoint;
    this.role = new StoreRole(state);
    this.snap = new RequestSnapshot(state.groupCount);
    this.windows = state.config.groups.map(() => emptyWindow());
    this.alignment = state.config.groups.map((g) => alignmentChunks(g, state.config));
    this.deferredFrom = new Int32Array(state.groupCount);
    this.waitingFrom = new Int32Array(state.groupCount);
    this.finalAttempts = new Int32Array(state.config.maxRequests);
    this.finalAttemptGeneration = new Int32Array(state.config.maxRequests);
    this.finalWaitSinceMs = new Float64Array(state.config.maxRequests);
    this.finalWaitPublished = new Int32Array(state.config.maxRequests);
    this.finalWaitGeneration = new Int32Array(state.config.maxRequests);
    this.counters = {
      passes: 0,
      requestsVisited: 0,
      jobs: 0,
      chunksOffered: 0,
      chunksStored: 0,
      chunksAlreadyPresent: 0,
      chunksSkippedNull: 0,
      chunksUnreachable: 0,
      chunksDeferred: 0,
      chunksSkippedUnready: 0,
      allocationFailures: 0,
      chunksDroppedForCapacity: 0,
      chunksTransferFailed: 0,
      chunksDroppedUnready: 0,
      snapshotRetries: 0,
      snapshotsGivenUp: 0,
    };
  }

  /**
   * One pass over every slot; each job is handed to `onJob` (or collected and
   * returned). With `onJob` nothing is collected and the shared empty (frozen)
   * array is returned, so a pass with nothing to do allocates nothing.
   */
  pass(onJob?: JobListener): StoreJob[] {
    this.counters.passes += 1;
    const jobs: StoreJob[] | undefined = onJob ? undefined : [];
    const dirty = this.state.dirty;
    const slots = this.config.maxRequests;
    const all = this.visitAllNext;
    this.visitAllNext = false;
    for (let word = 0; word < dirty.length; word += 1) {
      // A load first: the exchange (a write) only for words with bits set, so
      // an idle pass writes nothing and the writers' cache lines stay theirs.
      if (!all && Atomics.load(dirty, word) === 0) continue;
      let bits = Atomics.exchange(dirty, word, 0);
      if (all) bits = -1;
      while (bits !== 0) {
        const low = bits & -bits;
        bits ^= low;
        const slot = word * DIRTY_SLOTS_PER_WORD + 31 - Math.clz32(low);
        if (slot >= slots) break;
        const job = this.planSlot(slot);
        if (job === undefined) continue;
        if (onJob) onJob(job);
        else jobs!.push(job);
      }
    }
    return jobs ?? NO_JOBS;
  }

  /** Makes the next pass visit every slot (as a planner's first pass does). */
  visitAll(): void {
    this.visitAllNext = true;
  }

  /** Plans one slot; at most one job per request per pass. */
  planSlot(slot: number): StoreJob | undefined {
    for (let attempt = 0; attempt < SNAPSHOT_RETRIES_MAX; attempt += 1) {
      const result = this.tryPlan(slot);
      if (result !== RETRY) return result;
      this.counters.snapshotRetries += 1;
    }
    // A writer kept changing the slot under us: leave it for the next pass.
    this.counters.snapshotsGivenUp += 1;
    this.revisit(slot);
    return undefined;
  }

  /** Jobs handed out and not completed: the planner's own leak figure (0 once every copy finished). */
  get jobsHeld(): number {
    return this.issued.size;
  }

  /** The job in flight with this id, if any (a driver that learns of completions by id). */
  issuedJob(jobId: number): StoreJob | undefined {
    return this.issued.get(jobId);
  }

  /** Jobs in flight, oldest first. */
  issuedJobs(): IterableIterator<StoreJob> {
    return this.issued.values();
  }

  /**
   * Ends a job, the one way for every driver (facade, fuzzer, threaded store):
   * drops the planner's record, counts a failed copy's chunks, publishes (or,
   * for a failed copy, discards) its tier entries, and releases its source
   * pins unless the copy released them itself (`transferUnpins`). Exactly
   * once: throws InvalidArgumentError, having changed nothing, for a job this
   * planner never issued or already completed (a second unpin would drive a
   * pin count below zero and let the pool hand out a block mid-copy).
   */
  complete(job: StoreJob, success = true): void {
    if (typeof job !== 'object' || job === null || this.issued.get(job.jobId) !== job) {
      throw new InvalidArgumentError(
        'job',
        'was not issued by this planner, or was already completed',
      );
    }
    if (typeof success !== 'boolean')
      throw new InvalidArgumentError('success', 'must be a boolean');
    const planned = !this.skipPins && !this.transferUnpins;
    if (planned) {
      for (const c of job.chunks) {
        for (const b of c.blocks) {
          if (!(Atomics.load(this.state.pins, b) > 0))
            invariant(false, `block ${b} of job ${job.jobId} is pinned`);
        }
      }
    }
    this.issued.delete(job.jobId);
    if (!success) {
      this.counters.chunksTransferFailed += job.chunks.length;
      this.observer?.failed?.(job);
    }
    // A plain loop: Array.prototype.map with a fresh closure was over half of
    // complete()'s time for the one-chunk jobs a store that keeps pace makes.
    const keys = new Array<bigint>(job.chunks.length);
    for (let i = 0; i < keys.length; i += 1) keys[i] = job.chunks[i]!.key;
    this.tier.completeStore(keys, success);
    if (!planned || (!success && this.skipUnpinOnFailure)) return;
    for (const c of job.chunks) unpinBlocks(this.state.pins, c.blocks);
  }

  private tryPlan(slot: number): StoreJob | undefined | typeof RETRY {
    const { role, snap, config, windows } = this;
    const taken = role.snapshot(slot, snap);
    if (taken === 'free') return undefined;
    if (taken === 'busy') return RETRY;
    this.onPlanPoint?.('snapshot', snap);
    const ended = snap.status === Status.finished || snap.status === Status.aborted;
    if (ended && snap.drained) return undefined;
    this.counters.requestsVisited += 1;
    const bpc = config.blocksPerChunk;
    const offloadable =
      this.storeLastSampled && snap.status === Status.finished
        ? lastSampledCounted(snap, config)
        : offloadableTokens(snap, config);
    let candidateCount = 0;
    let deferred = 0;
    let skipped = 0;
    let keysPending = false;
    let advances = false;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const group = config.groups[g]!;
      const w = storeWindow(
        this.policy,
        tokenChunks(snap, group, offloadable),
        snap.keyCount[g]!,
        snap.blockCount[g]!,
        snap.cursor[g]!,
        g,
        bpc,
        windows[g]!,
      );
      if (this.eagleCursorUnexcluded && group.eagle) {
        // The broken variant: the cursor moves to the ready prefix without the exclusion.
        const all = readyPrefix(
          Math.floor(offloadable / group.tokensPerChunk),
          snap.keyCount[g]!,
          snap.blockCount[g]!,
          bpc,
        );
        if (all > w.advanceTo) w.advanceTo = all;
      }
      // The old length assertion, kept after the ready bound as a guard: both
      // slices have exactly end - start entries whatever the policy.
      // Tested before the message is built: this runs for every request-group of every pass.
      if (w.end !== w.start && w.end > snap.keyCount[g]!) {
        invariant(false, `group ${g}: window end ${w.end} within ${snap.keyCount[g]} keys`);
      }
      if (w.end !== w.start && w.end * bpc > snap.blockCount[g]!) {
        invariant(false, `group ${g}: window end ${w.end} within ${snap.blockCount[g]} blocks`);
      }
      candidateCount += w.end - w.start;
      this.deferredFrom[g] = Math.max(w.ready, w.start);
      deferred += Math.max(0, w.tokenChunks - this.deferredFrom[g]!);
      // Of those, the ones below advanceTo are passed by the cursor (skipped, a
      // legacy policy's holes); only the rest wait for a later pass.
      this.waitingFrom[g] = Math.min(w.tokenChunks, Math.max(this.deferredFrom[g]!, w.advanceTo));
      skipped += Math.max(0, this.waitingFrom[g]! - this.deferredFrom[g]!);
      // Keys of token-ready chunks the hasher has yet to publish (it hashes
      // every known token of an occupied slot, so these always come).
      if (
        ended &&
        snap.keyCount[g]! < Math.min(w.tokenChunks, keysExpected(snap.numTokens, group, config))
      )
        keysPending = true;
      // The unsafe variant acknowledges deferred chunks: counted above as deferred, passed by the cursor.
      if (this.dropDeferred && w.tokenChunks > w.advanceTo) w.advanceTo = w.tokenChunks;
      if (w.advanceTo > snap.cursor[g]!) advances = true;
    }
    // An ended request is final once nothing token-ready is missing, or once
    // both its blocks and its keys are settled (what is missing never comes).
    const settled = deferred === 0 || this.skipSettle || (snap.blocksSettled && !keysPending);
    if (candidateCount === 0 && !advances && (!ended || !settled)) {
      this.countDeferred(deferred - skipped);
      // An ended request waits (bounded in time) for its last block IDs and keys
      // instead of draining; it comes back every pass until then.
      if (ended) {
        if (this.finalWaitOver(slot, snap.generation)) {
          this.dropUnready(deferred);
          this.advanceAll(true);
        } else this.revisit(slot);
      }
      return undefined;
    }

    // Read the entries of every window, then pin, then confirm nothing moved.
    const keys: bigint[] = [];
    const chunks: Candidate[] = [];
    const nullChunks: number[] | undefined = this.observer?.chunk ? [] : undefined;
    const unreachableChunks: number[] | undefined = this.observer?.chunk ? [] : undefined;
    let nulls = 0;
    let unreachable = 0;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const w = windows[g]!;
      const group = config.groups[g]!;
      const alignment = this.alignment[g]!;
      for (let c = w.start; c < w.end; c += 1) {
        if (role.block(snap, g, c * bpc + bpc - 1) === 0) {
          nulls += 1; // the deciding block slid out of the window: nothing to store
          nullChunks?.push(g, c);
          continue;
        }
        if (!storeReachable(group, alignment, c, w.ready)) {
          unreachable += 1; // no aligned hit can use it: passed, never copied
          unreachableChunks?.push(g, c);
          continue;
        }
        const blocks: number[] = [];
        const positions: number[] = [];
        for (let i = 0; i < bpc; i += 1) {
          const b = role.block(snap, g, c * bpc + i);
          if (b === 0) continue;
          blocks.push(b);
          positions.push(c * bpc + i);
        }
        const key = role.key(snap, g, c);
        keys.push(key);
        chunks.push({ group: g, chunk: c, key, tierSlot: -1, blocks, positions });
      }
    }
    if (!this.skipPins) for (const c of chunks) pinBlocks(this.state.pins, c.blocks);
    this.onPlanPoint?.('pinned', snap);
    if (!this.skipRevalidate && !role.stable(snap)) {
      if (!this.skipPins) for (const c of chunks) unpinBlocks(this.state.pins, c.blocks);
      return RETRY;
    }

    this.countDeferred(deferred - skipped);
    this.countSkipped(skipped);
    this.counters.chunksSkippedNull += nulls;
    const drain = ended && (settled || this.finalWaitOver(slot, snap.generation));
    // Ended, not drained: what it waits for is looked for again at the next passes.
    if (ended && !drain) this.revisit(slot);
    if (chunks.length === 0) {
      this.reportNulls(nullChunks);
      this.passUnreachable(unreachable, unreachableChunks);
      if (drain) this.dropUnready(deferred);
      this.advanceAll(drain);
      return undefined;
    }

    this.counters.chunksOffered += chunks.length;
    const out = this.tier.prepareStore(keys);
    if (!out.ok) {
      this.counters.allocationFailures += 1;
      if (!this.skipPins) for (const c of chunks) unpinBlocks(this.state.pins, c.blocks);
      if (this.ackOnAllocFailure) {
        // The unsafe variant: the refused chunks count as stored and the cursor moves on (no copy is dispatched).
        this.counters.chunksStored += chunks.length;
        this.reportNulls(nullChunks);
        this.passUnreachable(unreachable, unreachableChunks);
        this.advanceAll(drain);
        return undefined;
      }
      if (ended && this.finalAttemptFailed(slot, snap.generation)) {
        // Visible, counted, never silent: the tier could not take these even after retries.
        this.counters.chunksDroppedForCapacity += chunks.length;
        this.dropUnready(deferred);
        this.reportNulls(nullChunks);
        this.passUnreachable(unreachable, unreachableChunks);
        for (const c of chunks) this.report(c.group, c.chunk, 'dropped');
        this.advanceAll(true);
      } else {
        this.revisit(slot); // no publication will say the tier has room again
      }
      return undefined; // cursors unchanged: the same chunks are offered next pass
    }

    const stored: ChunkCopy[] = [];
    let next = 0;
    for (const c of chunks) {
      if (next < out.keysToStore.length && out.keysToStore[next] === c.key) {
        c.tierSlot = out.slots[next]!;
        stored.push(c);
        next += 1;
        this.report(c.group, c.chunk, 'stored');
      } else {
        // Already present or in flight: not copied.
        if (!this.skipPins) unpinBlocks(this.state.pins, c.blocks);
        this.report(c.group, c.chunk, 'present');
      }
    }
    invariant(
      next === out.keysToStore.length,
      'tier returned an order-preserving subsequence of the offered keys',
    );
    this.counters.chunksAlreadyPresent += chunks.length - stored.length;
    this.reportNulls(nullChunks);
    this.passUnreachable(unreachable, unreachableChunks);
    if (stored.length > 0) this.touchRequest();
    if (drain) this.dropUnready(deferred);
    this.advanceAll(drain);
    if (stored.length === 0) return undefined;
    this.counters.jobs += 1;
    this.counters.chunksStored += stored.length;
    const job: StoreJob = {
      jobId: this.nextJobId++,
      slot,
      generation: snap.generation,
      requestId: snap.requestId,
      chunks: stored,
    };
    this.issued.set(job.jobId, job);
    return job;
  }

  /** Raises the slot's dirty bit from the store side: the next pass visits it again. */
  private revisit(slot: number): void {
    markDirty(this.state.dirty, slot);
  }

  private advanceAll(ended: boolean): void {
    const moved = this.observer?.cursorMoved;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const w = this.windows[g]!;
      const from = this.snap.cursor[g]!;
      if (w.advanceTo <= from) continue;
      this.role.advanceCursor(this.snap, g, w.advanceTo);
      moved?.call(this.observer, this.snap, g, from, w.ready);
    }
    if (ended) {
      this.observer?.draining?.(this.snap);
      this.role.markDrained(this.snap);
    }
  }

  /** Counts the chunks that wait for a later pass (from waitingFrom; skipped ones are not deferred). */
  private countDeferred(deferred: number): void {
    this.counters.chunksDeferred += deferred;
    const observer = this.observer;
    if (deferred === 0 || observer?.deferred === undefined) return;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const from = this.waitingFrom[g]!;
      const to = this.windows[g]!.tokenChunks;
      if (to > from) observer.deferred(this.snap.slot, this.snap.generation, g, from, to);
    }
  }

  /** Counts (and reports) the chunks a legacy policy's cursor passes unready: [deferredFrom, waitingFrom). */
  private countSkipped(skipped: number): void {
    this.counters.chunksSkippedUnready += skipped;
    if (skipped === 0 || this.observer?.chunk === undefined) return;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      for (let c = this.deferredFrom[g]!; c < this.waitingFrom[g]!; c += 1)
        this.report(g, c, 'skipped');
    }
  }

  private report(group: number, chunk: number, outcome: ChunkOutcome): void {
    this.observer?.chunk?.(this.snap.slot, this.snap.generation, group, chunk, outcome);
  }

  /**
   * vLLM's touch after an offer that stored something (reference §5.6, §7.4):
   * one call per group, in group order; full attention touches every key of
   * the group, a windowed group its keys from the hit window on
   * (max(0, hit - W)). The tier touches in reverse, so a request's head ends
   * up most recent and outlives its tail. No touch when nothing was stored.
   */
  private touchRequest(): void {
    const { snap, role, config, tier } = this;
    if (tier.touch === undefined) return; // a tier without recency: no key list to build
    // One list lent to every touch (the tier keeps none): a request's keys are
    // read after each of its stores, so a fresh array per call was garbage in
    // proportion to the prompt on every job. It holds the last keys until the
    // next touch.
    const keys = this.touchKeys;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const w = config.groups[g]!.windowChunks;
      const from = w === null ? 0 : Math.max(0, role.hitChunks(snap, g) - w);
      const n = snap.keyCount[g]!;
      if (n <= from) continue;
      // Resized, not emptied and pushed to: emptying dropped the backing store,
      // and pushing n keys grew it again a few times per call.
      if (keys.length !== n - from) keys.length = n - from;
      for (let c = from; c < n; c += 1) keys[c - from] = role.key(snap, g, c);
      tier.touch(keys);
    }
  }

  /** Counts (and reports) unreachable chunks, only on the paths where the cursor moves over them. */
  private passUnreachable(count: number, chunks: number[] | undefined): void {
    this.counters.chunksUnreachable += count;
    this.reportNulls(chunks, 'unreachable');
  }

  private reportNulls(nullChunks: number[] | undefined, outcome: ChunkOutcome = 'null'): void {
    if (nullChunks === undefined) return;
    for (let i = 0; i < nullChunks.length; i += 2)
      this.report(nullChunks[i]!, nullChunks[i + 1]!, outcome);
  }

  /**
   * An ended request found chunks lagging again; true once it has waited
   * finalWaitMsMax without a publication. A key or block ID that arrived
   * restarts the wait: a hasher still working through a long prompt is
   * progress, not a stall, while a host that never settles (or a role that
   * died) publishes nothing and is cut off after the bound.
   */
  private finalWaitOver(slot: number, generation: number): boolean {
    const now = this.now();
    const snap = this.snap;
    let published = 0;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      published += snap.keyCount[g]! + snap.blockCount[g]!;
    }
    if (
      this.finalWaitGeneration[slot] !== generation ||
      this.finalWaitPublished[slot] !== published
    ) {
      this.finalWaitGeneration[slot] = generation;
      this.finalWaitPublished[slot] = published;
      this.finalWaitSinceMs[slot] = now;
    }
    return now - this.finalWaitSinceMs[slot]! >= this.finalWaitMsMax;
  }

  /**
   * At the final pass: counts (and reports) the token-ready chunks that were
   * not ready, they never will be. Not in the unsafe variant without the
   * protocol, whose loss stays silent so the fuzzer can find it.
   */
  private dropUnready(deferred: number): void {
    if (deferred === 0 || this.skipSettle) return;
    this.counters.chunksDroppedUnready += deferred;
    if (this.observer?.chunk === undefined) return;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      const to = this.windows[g]!.tokenChunks;
      for (let c = this.deferredFrom[g]!; c < to; c += 1) this.report(g, c, 'unready');
    }
  }

  private finalAttemptFailed(slot: number, generation: number): boolean {
    if (this.finalAttemptGeneration[slot] !== generation) {
      this.finalAttemptGeneration[slot] = generation;
      this.finalAttempts[slot] = 0;
    }
    this.finalAttempts[slot]! += 1;
    return this.finalAttempts[slot]! >= FINAL_STORE_ATTEMPTS_MAX;
  }
}

/**
 * The broken variant of F4 (unsafeStoreLastSampledToken): a finished request's
 * tokens up to and including the last sampled one, as if all were computed.
 */
function lastSampledCounted(snap: Readonly<RequestSnapshot>, config: Config): number {
  return offloadableTokens(
    {
      ...snapFacts(snap),
      status: Status.running,
      computedTokens: snap.numTokens,
      scheduledTokens: 0,
    },
    config,
  );
}

function snapFacts(snap: Readonly<RequestSnapshot>): RequestFacts {
  return {
    status: snap.status,
    promptTokens: snap.promptTokens,
    numTokens: snap.numTokens,
    computedTokens: snap.computedTokens,
    scheduledTokens: snap.scheduledTokens,
    maxOffloadTokens: snap.maxOffloadTokens,
  };
}

const RETRY = Symbol('retry');
const NO_JOBS: StoreJob[] = Object.freeze([]) as unknown as StoreJob[];

/** A chunk offered to the tier; once the tier gives it a slot it is the job's ChunkCopy as it is (one object per chunk). */
interface Candidate {
  readonly group: number;
  readonly chunk: number;
  readonly key: bigint;
  tierSlot: number;
  readonly blocks: number[];
  readonly positions: number[];
}
