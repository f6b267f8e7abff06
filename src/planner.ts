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
import { alignmentChunks, emptyWindow } from './ready.js';
import type { StorePolicy, StoreWindow } from './ready.js';
import { decideWindows, readOffer } from './planner-windows.js';
import type { Offer, PlanVisit, Tally } from './planner-windows.js';
import { FINAL_WAIT_MS_MAX, FinalWaits } from './final-waits.js';
import { IssuedJobs } from './planner-jobs.js';
import type { AckOutcome } from './planner-jobs.js';
import { PassReport } from './planner-report.js';
import { zeroPlannerCounters } from './planner-options.js';
import type {
  JobListener,
  PlannerCounters,
  PlannerObserver,
  PlannerOptions,
  PlanPointListener,
} from './planner-options.js';
import { RequestSnapshot, StoreRole } from './roles/store.js';
import type { SharedState } from './state.js';
import type { OffloadTier, PrepareStoreResult } from './tier/types.js';

type PreparedStore = Extract<PrepareStoreResult, { ok: true }>;

export { FINAL_STORE_ATTEMPTS_MAX, FINAL_WAIT_MS_MAX } from './final-waits.js';
export type { AckOutcome } from './planner-jobs.js';

/**
 * How long a store job waits for every rank's acknowledgement (Config.ranks >
 * 1) before it fails as a whole: far above any copy's time, so only a rank
 * that stopped (its report lost, its thread gone) reaches it.
 */
const RANK_ACK_WAIT_MS_MAX = 10_000;
export { plannerSwitches } from './planner-options.js';
export type {
  ChunkOutcome,
  JobListener,
  PlannerCounters,
  PlannerObserver,
  PlannerOptions,
  PlannerSwitches,
  PlanPoint,
  PlanPointListener,
} from './planner-options.js';

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
  private readonly ackOnAllocFailure: boolean;
  private readonly onPlanPoint: PlanPointListener | undefined;
  private readonly observer: PlannerObserver | undefined;
  private readonly snap: RequestSnapshot;
  private readonly windows: StoreWindow[];
  private readonly tally: Tally = {
    candidates: 0,
    deferred: 0,
    skipped: 0,
    keysPending: false,
    advances: false,
  };
  /** Scratch key list lent to tier.touch (see touchRequest). */
  private readonly touchKeys: bigint[] = [];
  /** What a visit reads (windows, tally, offer) from the snapshot: planner-windows.ts. */
  private readonly visit: PlanVisit;
  /** What a visit reports to the observer and counts for the chunks its cursor passes. */
  private readonly reporter: PassReport;
  /** The end-of-request protocol's waits and final offers, per slot. */
  private readonly finalWaits: FinalWaits;
  /** Jobs handed out and not completed; complete() is the one way out. */
  private readonly jobs: IssuedJobs;
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
    this.ackOnAllocFailure = options.unsafeAckOnAllocFailure ?? false;
    this.finalWaits = new FinalWaits(
      state.config.maxRequests,
      options.finalWaitMsMax ?? FINAL_WAIT_MS_MAX,
      options.now,
    );
    this.observer = options.observer;
    this.onPlanPoint = options.onPlanPoint;
    this.role = new StoreRole(state);
    this.snap = new RequestSnapshot(state.groupCount);
    this.windows = state.config.groups.map(() => emptyWindow());
    this.counters = zeroPlannerCounters();
    this.reporter = new PassReport(
      this.observer,
      this.counters,
      this.snap,
      this.windows,
      this.skipSettle,
    );
    const { ranks } = state.config;
    if (ranks > 1 && (tier.abandonStore === undefined || tier.releaseRetired === undefined)) {
      throw new InvalidArgumentError(
        'tier',
        'cannot hold the slots of a job whose ranks are late (it has no abandonStore/releaseRetired)',
      );
    }
    const rankAckWaitMsMax = options.rankAckWaitMsMax ?? RANK_ACK_WAIT_MS_MAX;
    if (typeof rankAckWaitMsMax !== 'number' || !(rankAckWaitMsMax >= 0)) {
      throw new InvalidArgumentError('rankAckWaitMsMax', 'must be a number of ms, 0 or more');
    }
    this.visit = {
      role: this.role,
      snap: this.snap,
      config: this.config,
      groupCount: state.groupCount,
      policy: this.policy,
      windows: this.windows,
      tally: this.tally,
      reporter: this.reporter,
      alignment: state.config.groups.map((g) => alignmentChunks(g, state.config)),
      switches: {
        storeLastSampled: options.unsafeStoreLastSampledToken ?? false,
        eagleCursorUnexcluded: options.unsafeEagleCursorUnexcluded ?? false,
        dropDeferred: options.unsafeDropDeferred ?? false,
        reachabilityOneShort: options.unsafeReachabilityOneShort ?? false,
      },
    };
    this.jobs = new IssuedJobs(state.pins, tier, this.counters, {
      // With ranks the job's last acknowledgement releases the pins: each rank's copy reads them until then.
      pinned: !this.skipPins && (ranks > 1 || !(options.transferUnpins ?? false)),
      skipUnpinOnFailure: options.unsafeSkipUnpinOnFailure ?? false,
      onFailed: (job) => this.observer?.failed?.(job),
      publishStaleJobs: options.unsafePublishStaleJobs ?? false,
      ranks,
      rankAckWaitMsMax,
      now: options.now ?? (() => performance.now()),
      publishOnFirstAck: options.unsafePublishOnFirstAck ?? false,
    });
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
    return this.jobs.held;
  }

  /** The job in flight with this id, if any (a driver that learns of completions by id). */
  issuedJob(jobId: number): StoreJob | undefined {
    return this.jobs.get(jobId);
  }

  /** Jobs in flight, oldest first. */
  issuedJobs(): IterableIterator<StoreJob> {
    return this.jobs.values();
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
    this.jobs.complete(job, success);
  }

  /**
   * Rank `rank`'s report of its copy of job `jobId` (Config.ranks): the job
   * completes (through complete()) once every rank reported, failed as a
   * whole if any copy failed. With one rank it is complete(job, ok). See
   * IssuedJobs.acknowledge.
   */
  acknowledge(jobId: number, rank: number, ok: boolean): AckOutcome {
    return this.jobs.acknowledge(jobId, rank, ok);
  }

  /** Fails the jobs whose ranks did not all acknowledge within rankAckWaitMsMax; returns them. */
  expireAcks(): StoreJob[] {
    return this.jobs.expire();
  }

  /** Jobs failed by the acknowledgement bound whose missing ranks never reported (their slots stay retired). */
  get jobsAwaitingLateAcks(): number {
    return this.jobs.expiredHeld;
  }

  /** Tier slots those jobs keep retired (a rank that never reports may still write into them). */
  get slotsAwaitingLateAcks(): number {
    return this.jobs.expiredSlots;
  }

  /** True for a job that was in flight at the last reset (vLLM's stale job threshold). */
  isStale(job: StoreJob): boolean {
    return this.jobs.isStale(job);
  }

  /**
   * vLLM's reset_cache on the store side: the tier drops every entry (those
   * being written or read keep their slots until their jobs end); jobs in
   * flight become stale (ignored by job id when they complete); every live
   * request that was not drained starts a new store epoch with its cursors at
   * 0, so its chunks are stored again. A drained request is left alone: its
   * end was signalled once and is not signalled again. Call it between passes
   * on the store role's thread. Throws InvalidArgumentError for a tier that
   * cannot be reset.
   */
  reset(): void {
    const { tier } = this;
    if (tier.reset === undefined || tier.releaseRetired === undefined) {
      throw new InvalidArgumentError('tier', 'cannot be reset (it has no reset/releaseRetired)');
    }
    tier.reset();
    this.jobs.markStale();
    this.counters.resets += 1;
    for (let slot = 0; slot < this.config.maxRequests; slot += 1) this.restart(slot);
  }

  /**
   * One live, undrained request starts a new store epoch at cursor 0 (see
   * reset; also for a request whose admission hit came from before a reset).
   * Returns false for a free or drained slot.
   */
  restart(slot: number): boolean {
    if (!this.role.restartEpoch(slot)) return false;
    // Its final pass starts over too: waits and failed final offers count from 0.
    this.finalWaits.restart(slot);
    this.revisit(slot);
    return true;
  }

  /**
   * Plans one slot, in the pass's steps: snapshot, decide every group's
   * window by the one rule, read the chunks to offer, pin their source blocks
   * and confirm the snapshot, offer them to the tier, and dispatch what it
   * accepted. RETRY when a writer moved under the snapshot.
   */
  private tryPlan(slot: number): StoreJob | undefined | typeof RETRY {
    const { role, snap, tally } = this;
    const taken = role.snapshot(slot, snap);
    if (taken === 'free') return undefined;
    if (taken === 'busy') return RETRY;
    this.onPlanPoint?.('snapshot', snap);
    const ended = snap.status === Status.finished || snap.status === Status.aborted;
    if (ended && snap.drained) return undefined;
    this.counters.requestsVisited += 1;
    decideWindows(this.visit, ended);
    // An ended request is final once nothing token-ready is missing, or once
    // both its blocks and its keys are settled (what is missing never comes).
    const settled =
      tally.deferred === 0 || this.skipSettle || (snap.blocksSettled && !tally.keysPending);
    if (tally.candidates === 0 && !tally.advances && (!ended || !settled)) {
      this.waitForMore(slot, ended);
      return undefined;
    }
    const offer = readOffer(this.visit);
    if (!this.pinAndConfirm(offer)) return RETRY;
    this.reporter.countDeferred(tally.deferred - tally.skipped);
    this.reporter.countSkipped(tally.skipped);
    this.counters.chunksSkippedNull += offer.nulls;
    const drain = ended && (settled || this.finalWaitOver(slot, snap.generation));
    // Ended, not drained: what it waits for is looked for again at the next passes.
    if (ended && !drain) this.revisit(slot);
    if (offer.chunks.length === 0) {
      this.reporter.passOver(offer);
      if (drain) this.reporter.dropUnready(tally.deferred);
      this.advanceAll(drain);
      return undefined;
    }
    const out = this.offerToTier(slot, offer, ended, drain);
    return out === undefined ? undefined : this.dispatch(slot, offer, out, drain);
  }

  /**
   * Nothing to offer and no cursor to move: a live request waits for its next
   * publication; an ended one waits (bounded in time) for its last block IDs
   * and keys instead of draining, and comes back every pass until then.
   */
  private waitForMore(slot: number, ended: boolean): void {
    const { tally } = this;
    this.reporter.countDeferred(tally.deferred - tally.skipped);
    if (!ended) return;
    if (this.finalWaitOver(slot, this.snap.generation)) {
      this.reporter.dropUnready(tally.deferred);
      this.advanceAll(true);
    } else this.revisit(slot);
  }

  /** Pins every source block, then confirms nothing moved since the snapshot; false (pins released): retry. */
  private pinAndConfirm(offer: Offer): boolean {
    if (!this.skipPins) for (const c of offer.chunks) pinBlocks(this.state.pins, c.blocks);
    this.onPlanPoint?.('pinned', this.snap);
    if (this.skipRevalidate || this.role.stable(this.snap)) return true;
    if (!this.skipPins) for (const c of offer.chunks) unpinBlocks(this.state.pins, c.blocks);
    return false;
  }

  /**
   * Offers the chunks to the tier. Refused: the cursors stay (the same chunks
   * are offered next pass), unless an ended request's final offers failed
   * FINAL_STORE_ATTEMPTS_MAX times: then they are dropped, counted, never
   * silent. Returns the tier's answer when it took them.
   */
  private offerToTier(
    slot: number,
    offer: Offer,
    ended: boolean,
    drain: boolean,
  ): PreparedStore | undefined {
    const { chunks } = offer;
    this.counters.chunksOffered += chunks.length;
    const out = this.tier.prepareStore(offer.keys);
    if (out.ok) return out;
    this.counters.allocationFailures += 1;
    if (!this.skipPins) for (const c of chunks) unpinBlocks(this.state.pins, c.blocks);
    if (this.ackOnAllocFailure) {
      // The unsafe variant: the refused chunks count as stored and the cursor moves on (no copy is dispatched).
      this.counters.chunksStored += chunks.length;
      this.reporter.passOver(offer);
      this.advanceAll(drain);
    } else if (ended && this.finalWaits.attemptFailed(slot, this.snap.generation)) {
      this.counters.chunksDroppedForCapacity += chunks.length;
      this.reporter.dropUnready(this.tally.deferred);
      this.reporter.passOver(offer);
      for (const c of chunks) this.reporter.report(c.group, c.chunk, 'dropped');
      this.advanceAll(true);
    } else {
      this.revisit(slot); // no publication will say the tier has room again
    }
    return undefined;
  }

  /** The chunks the tier gave a slot become the job; the rest were present already. */
  private dispatch(
    slot: number,
    offer: Offer,
    out: PreparedStore,
    drain: boolean,
  ): StoreJob | undefined {
    const { chunks } = offer;
    // Sized up front, as readOffer's arrays: one job per request and pass.
    const stored = new Array<ChunkCopy>(out.keysToStore.length);
    let next = 0;
    for (const c of chunks) {
      if (next < out.keysToStore.length && out.keysToStore[next] === c.key) {
        c.tierSlot = out.slots[next]!;
        stored[next] = c;
        next += 1;
        this.reporter.report(c.group, c.chunk, 'stored');
      } else {
        // Already present or in flight: not copied.
        if (!this.skipPins) unpinBlocks(this.state.pins, c.blocks);
        this.reporter.report(c.group, c.chunk, 'present');
      }
    }
    invariant(
      next === out.keysToStore.length,
      'tier returned an order-preserving subsequence of the offered keys',
    );
    this.counters.chunksAlreadyPresent += chunks.length - stored.length;
    this.reporter.passOver(offer);
    if (stored.length > 0) this.touchRequest();
    if (drain) this.reporter.dropUnready(this.tally.deferred);
    this.advanceAll(drain);
    if (stored.length === 0) return undefined;
    this.counters.jobs += 1;
    this.counters.chunksStored += stored.length;
    return this.jobs.issue(slot, this.snap.generation, this.snap.requestId, stored);
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

  /** The ended request of this visit waited its bound without a publication (FinalWaits.over). */
  private finalWaitOver(slot: number, generation: number): boolean {
    const snap = this.snap;
    let published = 0;
    for (let g = 0; g < this.state.groupCount; g += 1) {
      published += snap.keyCount[g]! + snap.blockCount[g]!;
    }
    return this.finalWaits.over(slot, generation, published);
  }
}

const RETRY = Symbol('retry');
const NO_JOBS: StoreJob[] = Object.freeze([]) as unknown as StoreJob[];
