// The store role's loop body. It owns the host tier and the transfer backend:
// each step it answers the scheduler's lookups and loads (store-loads.ts),
// collects finished copies (publishing a tier entry only after its bytes are
// there), and runs one StorePlanner pass whose jobs go to the backend. It also
// keeps what the runtime's checks need, on this thread only: which tier
// entries are readable and which chunk positions they hold (verify); what
// happened to each chunk (double stores, holes) is the chunk ledger's, fed by
// the planner.
import { tierChunkMatches } from '../copy.js';
import { invariant } from '../errors.js';
import { Status } from '../layout.js';
import { ChunkLedger } from '../ledger.js';
import type { DrainAccount } from '../ledger.js';
import { StorePlanner } from '../planner.js';
import { HostTier } from '../tier/host-tier.js';
import { zeroCounters } from '../tier/lower.js';
import type { TierStoreSample } from '../tier/lower.js';
import { LowerLookups } from './lower-lookup.js';
import type { ReadableEntry } from './lower-lookup.js';
import { StoreCopies } from './store-copies.js';
import { StoreLoads } from './store-loads.js';
import type { Writing } from './store-loads.js';
import type { TransferBackend } from './backend.js';
import type { RuntimeViews } from './buffers.js';
import { Outbox } from './outbox.js';
import { OP_LOAD, OP_LOOKUP, OP_UNLOCK } from './protocol.js';
import type { SpscRing } from './rings.js';
import { AGAIN, STORE_DRAIN_TICK_MS, park, pause, ringOthers } from './role-loop.js';
import type { RoleLoop, RoleWait } from './role-loop.js';
import { publishStoreStats } from './store-stats.js';
import { TraceRecorder } from './trace-recorder.js';
import {
  JOBS_IN_FLIGHT_MAX,
  hostTierOptions,
  storeLoadsOptions,
  storeObserver,
  storePlannerOptions,
} from './store-options.js';
import type { StoreLoopOptions } from './store-options.js';
import type { TracedRequest } from './trace-recorder.js';
import type { JobEvent, StoreLoopEvents, VerifyReport } from './store-messages.js';
import { EventCapture } from '../events/capture.js';
import { LookupTiming } from './lookup-timing.js';
import type { LookupSample } from './lookup-timing.js';

export type { DrainedRequest } from './store-messages.js';

const RECORDS_PER_STEP_MAX = 64;

export class StoreLoop implements RoleLoop {
  readonly tier: HostTier;
  readonly planner: StorePlanner;
  private readonly views: RuntimeViews;
  private readonly backend: TransferBackend;
  private readonly events: StoreLoopEvents;
  private readonly requests: SpscRing;
  private readonly answers: Outbox;
  private readonly jobsInFlightMax: number;
  /** Lookups and loads: answers, protected hits, loads in flight. */
  private readonly loads: StoreLoads;
  private readonly readable = new Map<bigint, ReadableEntry>();
  /** Positions of keys being written, until their job completes (in dispatch order). */
  private readonly writing = new Map<bigint, Writing>();
  /** Resets this loop ran (a hit lock and a readable entry record the count they began at). */
  private resets = 0;
  /** What happened to every chunk (holes, double stores), from the planner's observer. */
  readonly ledger: ChunkLedger;
  /** Store jobs sent to the backend and their completions (store-copies.ts). */
  private readonly copies: StoreCopies;
  private readonly recorder: TraceRecorder | undefined;
  /** Lookups, write-through and promotion over the levels below host; undefined without them. */
  private readonly lower: LowerLookups | undefined;
  /** The host level's lookup counters (the rest come from the tier and the planner). */
  private readonly hostCounters = zeroCounters();
  /** KV events of every tier change, when the runtime publishes them. */
  private readonly capture: EventCapture | undefined;
  private readonly lookupTiming = new LookupTiming();
  private readonly wakeOthers: () => void;
  /** Closing: every step only completes copies in flight (beginDrain). */
  private draining = false;

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
    this.tier = new HostTier(config.tierChunks, hostTierOptions(options));
    this.jobsInFlightMax = options.jobsInFlightMax ?? JOBS_IN_FLIGHT_MAX;
    const traceRequests = options.traceRequests ?? 0;
    const recorder = traceRequests > 0 ? new TraceRecorder(views.state, traceRequests) : undefined;
    this.recorder = recorder;
    const ledger = new ChunkLedger(views.state, (account) => this.onDrained(account));
    this.ledger = ledger;
    const observer = storeObserver(ledger, recorder, options.onCursorMoved);
    this.planner = new StorePlanner(
      views.state,
      this.tier,
      storePlannerOptions(options, observer, recorder),
    );
    this.requests = views.ring('storeRequest');
    // Held until the step has published its stats (work()): a caller that reads
    // stats() on an answer (a lookup's hit, a load's bytes) sees the counts behind it.
    this.answers = new Outbox(views.ring('storeAnswer'), { held: true });
    this.wakeOthers = ringOthers(views, 'store');
    const queue = views.buffers.events;
    this.capture = queue ? new EventCapture(queue, views.state, views.config) : undefined;
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
    this.loads = new StoreLoads({
      views,
      tier: this.tier,
      answers: this.answers,
      backend,
      planner: this.planner,
      readable: this.readable,
      writing: this.writing,
      lower: this.lower,
      resets: () => this.resets,
      hostCounters: this.hostCounters,
      ...storeLoadsOptions(options),
    });
    this.copies = new StoreCopies(
      {
        views,
        backend,
        planner: this.planner,
        readable: this.readable,
        writing: this.writing,
        lower: this.lower,
        capture,
        loading: (requestId) => this.loads.loading(requestId),
        resets: () => this.resets,
        takeTierEvents: () => this.takeTierEvents(),
      },
      options,
    );
  }

  /** Store jobs the planner holds (dispatched, not completed) plus loads in flight. */
  get jobsInFlight(): number {
    return this.planner.jobsHeld + this.loads.inFlight;
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
    // A busy backend or the bound on jobs in flight skips the pass; a completion rings the bell.
    if (!this.passAllowed()) return false;
    const dirty = this.views.state.dirty;
    for (let word = 0; word < dirty.length; word += 1) {
      if (Atomics.load(dirty, word) !== 0) return true;
    }
    return false;
  }

  /**
   * After a step that did work, only work no bell announces (hasWorkLeft)
   * makes the store step again at once; otherwise it parks until its bell
   * moves (bounded), and at once if it moved during the step: the roles'
   * publications, the scheduler's lookups, the copies' completions and the
   * lower levels' answers all ring it. Parking after every step without that
   * check was tried and lost all tier hits in 4 of 14 default simulations on a
   * loaded machine: leftover work waited up to the park's bound, long enough
   * for a preemption to take the chunks first. While draining: a step, then a
   * short timer.
   */
  wait(did: boolean): RoleWait {
    if (this.draining) return pause(STORE_DRAIN_TICK_MS);
    return did && this.hasWorkLeft() ? AGAIN : park();
  }

  /**
   * Jobs sized by the backend: a pass while it has a copy free, so a ready
   * chunk leaves at once; none while every copy it can run is taken, so the
   * chunks that become ready meanwhile are planned as one larger job per
   * request when a copy completes (the planner's ready-prefix rule decides
   * what goes, whatever the size). Also bounded by jobsInFlightMax.
   */
  private passAllowed(): boolean {
    if (this.planner.jobsHeld >= this.jobsInFlightMax) return false;
    const capacity = this.backend.capacity;
    return capacity === undefined || this.backend.inFlight < capacity;
  }

  /** Closing: from now on a step completes copies in flight and rings no other role. */
  beginDrain(): void {
    this.draining = true;
  }

  /** Every dispatched copy completed (and unpinned). */
  get drained(): boolean {
    return this.jobsInFlight === 0;
  }

  stop(): void {}

  final(): Record<string, number> {
    const left = this.leftovers();
    return {
      jobsInFlight: this.jobsInFlight,
      tierWriting: left.writing,
      tierReading: left.reading,
      loadLocks: left.locks,
    };
  }

  /** One bounded unit of work; true when anything happened. */
  step(): boolean {
    const did = this.work();
    if (did && !this.draining) this.wakeOthers();
    return did;
  }

  private work(): boolean {
    let did = false;
    if (this.requests.drain((r) => this.handle(r), RECORDS_PER_STEP_MAX) > 0) did = true;
    if (this.collect()) did = true;
    // Answers leave before the pass (a lookup does not wait for planning) and
    // after the stats that count them.
    if (this.answers.pending > 0) {
      this.publishStats();
      if (this.answers.flush() > 0) did = true;
    }
    if (this.passAllowed()) {
      const before = this.planner.counters.jobs;
      this.planner.pass((job) => this.copies.dispatch(job));
      this.recorder?.endPass();
      if (this.planner.counters.jobs !== before) did = true;
    }
    this.takeTierEvents();
    this.publishStats();
    return did;
  }

  /** Jobs completed since the last call, for the runtime's 'job' event. */
  takeJobEvents(): JobEvent[] {
    const out = this.copies.jobEvents;
    this.copies.jobEvents = [];
    return out;
  }

  /** Store copies dispatched so far; verify() waits for those up to this one. */
  get copiesDispatched(): number {
    return this.copies.tasks;
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
    const { holes, doubleStores } = this.ledger;
    return {
      ok: mismatches === 0 && holes === 0 && doubleStores === 0,
      entriesChecked: this.readable.size,
      entriesInFlight: this.writing.size,
      blocksChecked: blocks,
      mismatches,
      holes,
      doubleStores,
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
      // Slots kept for a rank that never reported are no leak: it may still write into
      // them, so they stay retired by design (counted in rankAckTimeouts).
      writing: s.writing + (s.retired ?? 0) - this.planner.slotsAwaitingLateAcks,
      reading: s.reading,
      locks: this.loads.lockCount,
    };
  }

  /**
   * vLLM's reset_cache, run between two steps on this thread: the host tier
   * is emptied (the planner's reset: stores in flight become stale by job id,
   * live requests start a new store epoch at cursor 0, and the chunk ledger
   * starts their accounts over); a load in flight, or a hit answered and not
   * loaded yet, goes on reading the slots the reset retired and publishes
   * nothing; a lower-level resolution under way promotes nothing. With
   * `shared`, the levels below first move their scope's epoch, which retires
   * this namespace's entries for every instance (rejects with
   * SharedResetFailedError when a level could not store it; the host tier is
   * reset either way), and the host tier is reset after that, so nothing
   * promoted from below while the epoch moved survives.
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
    this.loads.reset();
    this.lower?.reset();
    // Before the caller hears of it: stats() after reset() sees it.
    this.publishStats();
    if (failure !== undefined) throw failure;
  }

  private collect(): boolean {
    const done = this.backend.takeCompletions();
    for (const c of done) {
      if (c.kind === 'store') this.copies.complete(c);
      else this.loads.complete(c);
    }
    // Jobs whose ranks did not all report within the bound fail as a whole.
    const expired = this.planner.expireAcks();
    for (const job of expired) this.copies.rankAcksTimedOut(job);
    return done.length > 0 || expired.length > 0;
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
      this.lookupTiming.answered(r[1]!, t0, this.loads.lookup(r));
    } else if (op === OP_LOAD) this.loads.load(r);
    else if (op === OP_UNLOCK) this.loads.unlock(r[1]!, r[2]!, r[3]!);
    else invariant(false, `store opcode ${op} is known`);
  }

  /**
   * The ledger's account of an ended request, taken in its final pass before
   * the drained mark (the allocator cannot free, nor the slot be reused, yet).
   */
  private onDrained(account: DrainAccount): void {
    this.publishStats(); // before the drained event: main may read stats as soon as it arrives
    const ended = account.status === Status.finished ? 'finished' : 'aborted';
    const trace = this.recorder?.take(account.requestId, account.slot, ended);
    this.events.drained({
      requestId: account.requestId,
      slot: account.slot,
      generation: account.generation,
      status: ended,
      chunksStored: account.chunksStored,
      chunksDeferred: account.chunksDeferred,
      tokenChunks: account.tokenChunks,
      chunksCounted: account.chunksCounted,
      holes: account.holes,
      ...(account.firstHole
        ? { firstHole: { group: account.firstHole.group, chunk: account.firstHole.chunk } }
        : {}),
      doubleStores: account.doubleStores,
      ...(trace ? { trace } : {}),
    });
  }

  /** Traces of the traced requests not yet ended, up to now (the store is failing). */
  takeLiveTraces(): TracedRequest[] {
    return this.recorder?.takeLive() ?? [];
  }

  private publishStats(): void {
    publishStoreStats({
      views: this.views,
      planner: this.planner,
      ledger: this.ledger,
      tier: this.tier,
      loads: this.loads,
      lower: this.lower,
      capture: this.capture,
      lookupTiming: this.lookupTiming,
      host: this.hostCounters,
      jobsInFlight: this.jobsInFlight,
      bytesCopied: this.copies.bytesCopied,
      jobsCompleted: this.copies.jobsCompleted,
      jobsTransferFailed: this.copies.jobsTransferFailed,
      hostStoreUs: this.copies.hostStoreUs,
    });
  }
}
