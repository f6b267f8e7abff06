// `kvoff fuzz --target runtime`: the runtime's own role loop objects, the ones
// the role workers run (EngineSimulator, HasherLoop, AllocatorLoop, StoreLoop:
// src/runtime/role-loop.ts), in one thread over the runtime's real shared
// buffers, rings and doorbells. Each role's step() is one schedulable step;
// the transfer backend runs one queued copy per transfer step
// (StepTransferBackend). After a step this driver carries out the wait the
// loop itself returns, as role-main.ts does on the real clock, here on a
// virtual one: a parked role runs again once its bell moves or its park times
// out, a paused one once its pause is over; the store drains in-flight copies
// at close. Every delay the loops read (allocator publish lag and jitter, the
// engine's step time, the store's lookup wait) reads the same virtual clock,
// which advances by each step's virtual cost and, when every role is parked,
// jumps to the earliest wake-up. main's part (runtime-main.ts) runs between
// decisions; the set-up is runtime-world-setup.ts's.
//
// The oracle: a step that throws (crash); no end within the bounds (hang);
// tier bytes that are not their key's expansion, or a load that brought back
// other bytes (mispairing); and, from the store's chunk ledger (the one the
// runtime's stats() and verify() read): a chunk dispatched twice
// (double-store), a token-ready chunk of an ended request neither stored nor
// counted as dropped (hole), a cursor moving back (cursor-monotonic) or past
// the ready prefix it was read with (cursor-within-ready); and anything held
// after close() (leak, the runtime's own leak report).
import { TransferBackendFailedError, invariant } from '../errors.js';
import type { Config } from '../config.js';
import type { PlanPoint, PlannerCounters } from '../planner.js';
import type { AllocatorLoop } from '../runtime/allocator-loop.js';
import type { RuntimeViews } from '../runtime/buffers.js';
import type { Doorbell } from '../runtime/doorbell.js';
import type { EngineSimulator } from '../runtime/engine-sim.js';
import type { HasherLoop } from '../runtime/hasher-loop.js';
import { CONTROL_CLOSING, PARK_MS_MAX } from '../runtime/thread-words.js';
import type { Prng } from '../prng.js';
import type { RoleLoop, RoleWait } from '../runtime/role-loop.js';
import { readStat } from '../runtime/stats.js';
import type { DrainedRequest, StoreLoop } from '../runtime/store-loop.js';
import type { RequestSnapshot } from '../roles/store.js';
import { ViolationSignal } from './oracle.js';
import type { InvariantName, Violation } from './oracle.js';
import { runtimeHangAfterMs } from './runtime-scenario.js';
import type { RuntimeScenario } from './runtime-scenario.js';
import { ACTORS, ALLOCATOR, HASHER, SCHEDULER, STORE, TRANSFER } from './scenario.js';
import type { RuntimeChecks } from './runtime-checks.js';
import { rewriteTrailingChunks } from './runtime-checks.js';
import type { RuntimeMainThread } from './runtime-main.js';
import { BELL_ROLES, buildRuntimeWorld } from './runtime-world-setup.js';
import type { RolePark, RoleStall, RuntimeWorldOptions } from './runtime-world-setup.js';
import type { StepTransferBackend } from './step-backend.js';
import type { RankAckRelay } from './rank-acks.js';
import type { Strategy } from './strategy.js';
import { TraceHash } from './trace.js';
import type { TraceLine } from './trace.js';
import type { WorldOutcome } from './world.js';

export type { RuntimeWorldOptions } from './runtime-world-setup.js';

/**
 * Decisions a schedule may take per smallest step time of its virtual budget.
 * Every top-level step moves the clock by its role's step time (the smallest
 * is stepMsMin) and every clock jump moves it to a later wake-up, so a
 * schedule inside its virtual budget takes about budget / stepMsMin
 * decisions (clean schedules take at most 1.5x that); the rest covers the
 * nested decisions inside store passes and the jumps. A schedule that reaches
 * this bound before its virtual budget ran a clock that stopped moving.
 */
const RUNTIME_DECISIONS_PER_STEP_MS_MAX = 4;
/** Other roles' steps a strategy may run at one point inside a store-planning pass. */
const RUNTIME_NESTED_STEPS_MAX = 6;
/**
 * Decisions a runnable role may be passed over before it is run anyway. Real
 * threads run in parallel, so a role that spins (steps that do work while
 * waiting for another role, e.g. an allocation retried until a copy frees its
 * block) never starves the others; under PCT's strict priorities it would.
 */
const STARVED_DECISIONS_MAX = 64;

type Phase = 'running' | 'stopping' | 'done';

export class RuntimeWorld {
  readonly scenario: RuntimeScenario;
  readonly config: Config;
  violation: Violation | undefined;
  private readonly views: RuntimeViews;
  /** The checks beside the chunk ledger's (runtime-checks.ts). */
  private readonly checks: RuntimeChecks;
  /** main's submissions, close(), reset() and settles (runtime-main.ts). */
  private readonly main: RuntimeMainThread;
  private readonly engine: EngineSimulator;
  private readonly hasher: HasherLoop;
  private readonly allocator: AllocatorLoop;
  private readonly store: StoreLoop;
  private readonly backend: StepTransferBackend;
  /** Between the copies and the store: each rank's acknowledgement, some late or lost (ranks > 1). */
  private readonly acks: RankAckRelay;
  private readonly bells: Doorbell[];
  private readonly roles: RolePark[];
  /** The loop object of each role with a doorbell, by actor index. */
  private readonly loops: RoleLoop[];
  /** Which of the oldest queued copies a transfer step runs (the pool's threads race). */
  private readonly transferRandom: Prng;
  private readonly strategy: Strategy;
  private readonly record: boolean;
  private readonly watched: ReadonlySet<InvariantName> | undefined;
  /** Virtual time by which the schedule has ended, or it hangs. */
  readonly hangAfterMs: number;
  /** Backstop on decisions, from hangAfterMs (see RUNTIME_DECISIONS_PER_STEP_MS_MAX). */
  readonly stepsMax: number;
  private nowMs = 0;
  private phase: Phase = 'running';
  private readonly stalls: readonly RoleStall[];
  private readonly transferFaults: boolean;
  private draftRewrite: boolean;
  private transferFailed = false;
  private jobsSeen = 0;

  private decision = 0;
  private readonly decisions: number[] = [];
  private readonly hash = new TraceHash();
  private readonly lines: TraceLine[] = [];
  private chunksDispatched = 0;
  /** Steps run inside a store-planning pass (other threads writing while it reads). */
  private nested = 0;
  private readonly nestedEnabled: number[] = [];
  /** Per role: consecutive decisions it was runnable and not picked. */
  private readonly starved = new Int32Array(ACTORS.length);

  constructor(scenario: RuntimeScenario, options: RuntimeWorldOptions) {
    this.scenario = scenario;
    this.strategy = options.strategy;
    this.record = options.record ?? false;
    this.watched = options.watch;
    const parts = buildRuntimeWorld(scenario, options, {
      now: () => this.nowMs,
      ended: (summary) => this.main.ended(summary),
      drained: (d) => this.onDrained(d),
      planPoint: (point, snap) => this.onPlanPoint(point, snap),
      flag: (inv, message) => this.flag(inv, message),
    });
    ({
      config: this.config,
      views: this.views,
      bells: this.bells,
      engine: this.engine,
      hasher: this.hasher,
      allocator: this.allocator,
      store: this.store,
      backend: this.backend,
      acks: this.acks,
      checks: this.checks,
      main: this.main,
      transferRandom: this.transferRandom,
      stalls: this.stalls,
      roles: this.roles,
      transferFaults: this.transferFaults,
      draftRewrite: this.draftRewrite,
    } = parts);
    this.roles = ACTORS.map(() => ({
      seen: undefined,
      untilMs: 0,
      busyUntilMs: 0,
      stopped: false,
    }));
    this.loops = [this.engine, this.hasher, this.allocator, this.store];
    this.hangAfterMs = options.hangAfterMs ?? runtimeHangAfterMs(scenario);
    invariant(
      scenario.stepMs.length === ACTORS.length && scenario.stepMs.every((ms) => ms > 0),
      'every role step takes some virtual time (else the clock can stop)',
    );
    const stepMsMin = Math.min(...scenario.stepMs);
    this.stepsMax = Math.ceil(
      (RUNTIME_DECISIONS_PER_STEP_MS_MAX * this.hangAfterMs) / stepMsMin + 1000,
    );
  }

  /**
   * Lookups the recompute budget answered with a hit where a budget of 0
   * would have asked again (the independent specification judged each).
   */
  get budgetedHits(): number {
    return this.checks.budgetedHits;
  }

  /** The store planner's counters (what a run stored, deferred, dropped). */
  get storeCounters(): Readonly<PlannerCounters> {
    return this.store.planner.counters;
  }

  /** The virtual clock, in ms since the schedule began. */
  get virtualMs(): number {
    return this.nowMs;
  }

  // ---------------------------------------------------------------- driving

  run(): WorldOutcome {
    const enabled: number[] = [];
    while (this.violation === undefined && this.phase !== 'done') {
      // A hang is judged on the virtual clock, which every wait of the loops
      // reads: a role spinning while another is stalled (a lookup re-asked
      // every engine step while a copy thread is descheduled) takes many
      // steps but no more virtual time than the stall.
      if (this.nowMs > this.hangAfterMs) {
        this.stop(
          'hang',
          `no end after ${this.nowMs.toFixed(2)} virtual ms (budget ${this.hangAfterMs} ms): ${this.describeWaits()}`,
        );
        break;
      }
      if (this.decision >= this.stepsMax) {
        this.stop(
          'hang',
          `${this.decision} decisions in ${this.nowMs.toFixed(2)} virtual ms: the clock stopped moving: ${this.describeWaits()}`,
        );
        break;
      }
      this.mainThread();
      if ((this.phase as Phase) === 'done') break;
      this.enabledInto(enabled);
      if (enabled.length === 0) {
        const next = this.nextWakeMs();
        if (next === Infinity) {
          this.stop('hang', `no role can step and none will wake: ${this.describeWaits()}`);
          break;
        }
        this.nowMs = Math.max(this.nowMs, next);
        this.decisions.push(-1);
        this.decision += 1;
        this.note(-1, 0, 0, () => `time passes to ${this.nowMs.toFixed(2)} ms (every role parked)`);
        continue;
      }
      const a = this.pick(enabled);
      this.decisions.push(a);
      this.decision += 1;
      // The step takes its virtual time; what it reads and the park it ends in
      // are at its end, so a role that parks never wakes before others ran.
      this.nowMs += this.scenario.stepMs[a] ?? 0;
      this.stepActor(a);
    }
    return this.outcome();
  }

  /** The strategy's pick, unless a runnable role was passed over too long (then the longest-starved). */
  private pick(enabled: readonly number[]): number {
    let starved = -1;
    for (const a of enabled) {
      if (
        this.starved[a]! >= STARVED_DECISIONS_MAX &&
        (starved < 0 || this.starved[a]! > this.starved[starved]!)
      ) {
        starved = a;
      }
    }
    const a = starved >= 0 ? starved : this.strategy.pick(enabled, this.decision);
    for (let r = 0; r < ACTORS.length; r += 1) {
      this.starved[r] = r !== a && enabled.includes(r) ? this.starved[r]! + 1 : 0;
    }
    return a;
  }

  private outcome(): WorldOutcome {
    return {
      violation: this.violation,
      steps: this.decision,
      traceHash: this.hash.hex(),
      decisions: this.decisions,
      lines: this.lines,
      jobs: this.jobsSeen,
      chunksStored: this.chunksDispatched,
    };
  }

  /** main's part: submissions when due (a full ring retries on a timer), close(), stopping roles. */
  private mainThread(): void {
    this.main.runDue(this.nowMs, {
      reset: () => {
        // The store worker runs a reset between two of its steps, as here (main's part runs between decisions).
        void this.store.reset(false);
        this.bells[STORE]!.ring();
        this.note(
          -1,
          2,
          this.store.resetCount,
          () => `main: reset() at ${this.nowMs.toFixed(2)} ms`,
        );
      },
      close: () => {
        // close(): the engine aborts what is left.
        Atomics.store(this.views.control, CONTROL_CLOSING, 1);
        this.bells[SCHEDULER]!.ring();
        this.note(-1, 1, 0, () => `main: close() at ${this.nowMs.toFixed(2)} ms`);
      },
      submitted: (n) => this.note(-1, 2, n, () => `main: ${n} submission(s) on the submit ring`),
    });
    if (this.phase === 'running') {
      if (this.main.settled) {
        // close(): every request settled; stop in the runtime's order.
        this.phase = 'stopping';
        this.roles[SCHEDULER]!.stopped = true;
        this.engine.stop();
        // The store's stop word: it leaves its loop and drains its copies in flight.
        this.store.beginDrain();
        this.note(-1, 3, 0, () => 'main: every request settled; stop scheduler, then drain store');
      }
    }
    // A late acknowledgement arrives: as a copy ring's completion does, it rings the store.
    if (this.acks.nextDueMs <= this.nowMs) this.bells[STORE]!.ring();
    if (this.phase === 'stopping') {
      const store = this.roles[STORE]!;
      if (
        !store.stopped &&
        this.store.drained &&
        this.backend.pending === 0 &&
        this.acks.heldCount === 0
      ) {
        store.stopped = true;
        this.store.stop();
        // Then the allocator's and the hasher's stop words, in the runtime's order.
        for (const a of [ALLOCATOR, HASHER]) {
          this.roles[a]!.stopped = true;
          this.loops[a]!.stop();
        }
        this.phase = 'done';
        if (!this.transferFailed) {
          const found = this.checks.afterClose(this.engine.final(), this.allocator.final());
          if (found !== undefined) this.stopQuiet(found[0], found[1]);
        }
      }
    }
  }

  private stalled(actor: number): boolean {
    for (const s of this.stalls) {
      if (s.actor === actor && s.fromMs <= this.nowMs && this.nowMs < s.toMs) return true;
    }
    return false;
  }

  private runnable(actor: number): boolean {
    if (actor === TRANSFER) return this.backend.pending > 0 && !this.stalled(TRANSFER);
    const r = this.roles[actor]!;
    if (r.stopped || this.stalled(actor) || this.nowMs < r.busyUntilMs) return false;
    if (r.seen === undefined) return true;
    if (this.bells[actor]!.read() !== r.seen || this.nowMs >= r.untilMs) {
      r.seen = undefined;
      return true;
    }
    return false;
  }

  private enabledInto(out: number[]): void {
    out.length = 0;
    for (let a = 0; a < ACTORS.length; a += 1) if (this.runnable(a)) out.push(a);
  }

  /** The earliest time after now at which something changes (a park or pause ends, a stall, main). */
  private nextWakeMs(): number {
    let next = Infinity;
    const later = (t: number) => {
      if (t > this.nowMs && t < next) next = t;
    };
    for (const a of BELL_ROLES) {
      const r = this.roles[a]!;
      if (r.stopped) continue;
      later(r.busyUntilMs);
      if (r.seen !== undefined) later(r.untilMs);
    }
    for (const s of this.stalls) later(s.toMs);
    this.main.wakeTimes(later);
    later(this.acks.nextDueMs);
    return next;
  }

  /**
   * One step of a role with a doorbell, then the wait its loop object asks
   * for, on the virtual clock: a park (runnable again once the bell moved
   * since `seen`, read before the step, or at its timeout) or a pause.
   */
  private stepRole(actor: number): boolean {
    const seen = this.bells[actor]!.read();
    const did = this.loops[actor]!.step();
    this.await(actor, this.loops[actor]!.wait(did), seen);
    return did;
  }

  private await(actor: number, wait: RoleWait, seen: number): void {
    const r = this.roles[actor]!;
    if (wait.kind === 'park') {
      r.seen = seen;
      r.untilMs = this.nowMs + Math.min(wait.ms, PARK_MS_MAX);
    } else if (wait.kind === 'pause') {
      r.busyUntilMs = this.nowMs + wait.ms;
    }
  }

  private stepActor(a: number): void {
    try {
      switch (a) {
        case SCHEDULER:
          return this.schedulerStep();
        case HASHER:
          return this.hasherStep();
        case ALLOCATOR:
          return this.allocatorStep();
        case STORE:
          return this.storeStep();
        case TRANSFER:
          return this.transferStep();
      }
    } catch (err) {
      if (err instanceof ViolationSignal) {
        this.violation ??= err.violation;
        this.phase = 'done';
        return;
      }
      if (err instanceof TransferBackendFailedError && this.transferFaults) {
        // As designed: a run of failed copies stops the store and fails the run (WorkerFailedError).
        this.transferFailed = true;
        this.note(a, 9, 0, () => `store: ${err.message} -> the run fails loudly (as designed)`);
        this.phase = 'done';
        return;
      }
      const name = err instanceof Error ? err.name : typeof err;
      this.stop(
        'crash',
        `${ACTORS[a]} threw ${name}: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }

  /**
   * Inside the store's planning pass, after its snapshot and after its pins:
   * the strategy may run other roles' steps before the pass goes on ("store"
   * means go on), as other threads run while the store thread reads.
   */
  private onPlanPoint(point: PlanPoint, snap: Readonly<RequestSnapshot>): void {
    this.note(STORE, point === 'snapshot' ? 5 : 6, snap.slot, () =>
      point === 'snapshot'
        ? `pass slot ${snap.slot} (r${snap.requestId}): snapshot gen ${snap.generation} status ${snap.status}, tokens ${snap.computedTokens}+${snap.scheduledTokens}/${snap.numTokens}, keys [${Array.from(snap.keyCount).join(',')}] blocks [${Array.from(snap.blockCount).join(',')}] cursors [${Array.from(snap.cursor).join(',')}]`
        : `pass slot ${snap.slot}: source blocks pinned, re-validating`,
    );
    if (this.nested > 0) return;
    const enabled = this.nestedEnabled;
    for (let i = 0; i < RUNTIME_NESTED_STEPS_MAX; i += 1) {
      if (this.decision >= this.stepsMax || this.violation !== undefined) return;
      this.enabledInto(enabled);
      const at = enabled.indexOf(STORE);
      if (at >= 0) enabled.splice(at, 1);
      enabled.push(STORE);
      enabled.sort((a, b) => a - b);
      const a = this.strategy.pick(enabled, this.decision);
      this.decisions.push(a);
      this.decision += 1;
      if (a === STORE) return;
      this.nowMs += this.scenario.stepMs[a] ?? 0;
      this.nested += 1;
      try {
        this.stepActor(a);
      } finally {
        this.nested -= 1;
      }
    }
  }

  private schedulerStep(): void {
    const did = this.stepRole(SCHEDULER);
    if (this.draftRewrite) rewriteTrailingChunks(this.views);
    const s = this.views.stats;
    this.note(
      SCHEDULER,
      did ? 1 : 0,
      readStat(s, 'engineSteps'),
      () =>
        `engine step ${did ? 'did work' : 'idle, parks'}: requests ${readStat(s, 'requests')}, steps ${readStat(s, 'engineSteps')}, completed ${readStat(s, 'completed')}, aborted ${readStat(s, 'aborted')}, preemptions ${readStat(s, 'preemptions')}, tier hits ${readStat(s, 'tierHits')}`,
    );
    const mismatches = readStat(s, 'loadMismatches');
    if (mismatches > 0) {
      this.flag(
        'mispairing',
        `${mismatches} loaded block(s) did not hold their key's bytes: the engine computed on top of a load that brought back other bytes`,
      );
    }
  }

  private hasherStep(): void {
    const did = this.stepRole(HASHER);
    const n = readStat(this.views.stats, 'hashesPublished');
    this.note(
      HASHER,
      did ? 1 : 0,
      n,
      () => `hasher ${did ? 'published' : 'idle, parks'}: ${n} hashes`,
    );
  }

  private allocatorStep(): void {
    const did = this.stepRole(ALLOCATOR);
    const pool = this.allocator.pool;
    this.note(
      ALLOCATOR,
      did ? 1 : 0,
      pool.inUse,
      () =>
        `allocator ${did ? 'did work' : 'idle, parks'}: blocks in use ${pool.inUse}, quarantined ${pool.quarantined}${this.allocator.busy ? ', publications pending' : ''}`,
    );
  }

  private storeStep(): void {
    const did = this.stepRole(STORE);
    const c = this.store.planner.counters;
    this.chunksDispatched = c.chunksStored;
    this.note(
      STORE,
      did ? 1 : 0,
      c.chunksStored,
      () =>
        `store step ${did ? 'did work' : 'idle, parks'}: passes ${c.passes}, chunks stored ${c.chunksStored}, deferred ${c.chunksDeferred}, jobs in flight ${this.store.jobsInFlight}`,
    );
    this.checks.cursors();
    if (this.config.ranks > 1) this.checks.rankAcks(this.acks);
    const completed = readStat(this.views.stats, 'jobsCompleted');
    if (completed !== this.jobsSeen) {
      this.jobsSeen = completed;
      const v = this.store.verify();
      if (v.mismatches > 0) {
        this.flag(
          'mispairing',
          `tier entr${v.mismatches === 1 ? 'y' : 'ies'} ${v.mismatchKeys.join(',')} do not hold their key's bytes (a source block held other bytes when it was copied)`,
        );
      }
    }
  }

  private transferStep(): void {
    const maps = this.backend.mapsPending;
    // A device resolves its maps in its own order, and copies on while they wait.
    if (maps > 0 && (this.backend.queued === 0 || this.transferRandom.chance(0.5))) {
      const m = this.backend.resolveMap(this.transferRandom.int(maps))!;
      this.note(
        TRANSFER,
        m.kind === 'store' ? 3 : 4,
        m.jobId,
        () =>
          `transfer ${m.kind} job ${m.jobId} (task ${m.index}): map resolved, bytes written${m.kind === 'store' ? ', blocks unpinned' : ''}`,
      );
      return;
    }
    const threads = Math.min(this.scenario.transferThreads, this.backend.queued);
    const t = this.backend.runNext(threads > 1 ? this.transferRandom.int(threads) : 0);
    if (t === undefined) return;
    this.note(TRANSFER, t.kind === 'store' ? 1 : 2, t.jobId, () =>
      this.scenario.gpuMaps === true
        ? `transfer ${t.kind} job ${t.jobId} (task ${t.index}): GPU copy made, map pending`
        : `transfer ${t.kind} job ${t.jobId}${this.config.ranks > 1 ? ` rank ${t.rank}` : ''} (task ${t.index}) ran${t.kind === 'store' && this.config.ranks === 1 ? ' and unpinned its blocks' : ''}`,
    );
  }

  /**
   * The store's drained event, sent in the request's final pass just before
   * its drained mark (its blocks still held): the chunk ledger's account of it.
   */
  private onDrained(d: DrainedRequest): void {
    this.checks.drained(d);
    this.main.drained(d);
  }

  private describeWaits(): string {
    return `${this.main.describePending()}; engine pending ${this.engine.pending}, jobs in flight ${this.store.jobsInFlight}, phase ${this.phase}`;
  }

  /** Ends the schedule with a violation (unless other invariants are watched). */
  private stop(inv: InvariantName, message: string): void {
    this.phase = 'done';
    this.stopQuiet(inv, message);
  }

  private stopQuiet(inv: InvariantName, message: string): void {
    if (this.watched !== undefined && !this.watched.has(inv)) return;
    this.violation ??= { invariant: inv, message, decision: this.decision };
  }

  /** Raises a violation from inside a step (unwinds the loop's step). */
  private flag(inv: InvariantName, message: string): void {
    if (this.watched !== undefined && !this.watched.has(inv)) return;
    throw new ViolationSignal({ invariant: inv, message, decision: this.decision });
  }

  private note(actor: number, action: number, arg: number, text: () => string): void {
    this.hash.add((actor + 1) * 256 + action);
    this.hash.add(arg);
    this.hash.add(Math.round(this.nowMs * 1000));
    if (this.record) {
      this.lines.push({
        decision: this.decision - (actor === -1 ? 0 : 1),
        actor: actor === -1 ? 'main' : ACTORS[actor]!,
        nested: this.nested > 0,
        text: `${text()} @${this.nowMs.toFixed(2)}ms`,
      });
    }
  }
}
