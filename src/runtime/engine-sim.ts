// The built-in engine simulator: the workload the runtime runs by default. It
// plays the scheduler role of an inference engine through SchedulerRole:
// request arrivals, chunked prefill under a per-step token budget, decode,
// EAGLE-style speculative steps, a finite GPU pool (blocks come from the
// allocator role over a ring, so admission pressure causes preemption with
// recompute), aborts of queued and running requests, finishes, and tier prefix
// hits loaded back at admission.
//
// "Computing" a token range writes each completed chunk's blocks in the GPU
// arena as the expansion of the chunk's offload key, always before the shared
// state's offloadable horizon covers that chunk, so any copy can be verified.
// The scheduler computes the keys itself (the same chain as src/hashing.ts)
// instead of reading the hasher's: an engine's forward pass never waits for the
// connector's hashes, and the hasher is lagged on purpose.
//
// `step()` does one bounded unit of work and never blocks, so the same engine
// runs in the scheduler worker and under a single-thread driver.
//
// The engine is cut along its seams: its options (engine-options.ts), one
// request's state (engine-request.ts), submit-ring decoding
// (engine-submit.ts), the state its parts share with its count of the pool
// (engine-state.ts), scheduling (engine-schedule.ts), admission and loads
// (engine-loads.ts), and commit and end (engine-commit.ts). This file is the
// loop that drives them.
import { HostEngineKv } from './engine-kv.js';
import type { EngineKv } from './engine-kv.js';
import { invariant } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { SchedulerRole } from '../roles/scheduler.js';
import type { RuntimeViews } from './buffers.js';
import { CONTROL_CLOSING } from './thread-words.js';
import { AGAIN, ENGINE_BUSY_PARK_MS, park } from './role-loop.js';
import type { RoleLoop, RoleWait } from './role-loop.js';
import { Outbox } from './outbox.js';
import { ANS_ALLOCATED, ANS_RELEASED } from './protocol.js';
import { Prng } from '../prng.js';
import { abortAll, finishSummary, released } from './engine-commit.js';
import { onHitAllocAnswer, onStoreAnswer } from './engine-loads.js';
import { resolveEngineOptions } from './engine-options.js';
import type { EngineOptions } from './engine-options.js';
import { engineRequestOf } from './engine-request.js';
import type { EngineEvents, EngineSubmission } from './engine-request.js';
import { finishStep, onStepAllocAnswer, plan } from './engine-schedule.js';
import { EngineState } from './engine-state.js';
import { decodeSubmission } from './engine-submit.js';
import { poolBlocksLeast } from './request-rules.js';
import type { SpscRing } from './rings.js';

const RECORDS_PER_STEP_MAX = 256;

export class EngineSimulator implements RoleLoop {
  readonly options: EngineOptions;
  private readonly e: EngineState;
  private readonly views: RuntimeViews;
  private readonly submissions: SpscRing;
  private readonly allocAnswers: SpscRing;
  private readonly storeAnswers: SpscRing;
  private lastPlanMs = -Infinity;
  /** Notified after every publish so lagging roles wake. */
  private readonly wake: () => void;

  constructor(
    views: RuntimeViews,
    hashing: Hashing,
    events: EngineEvents,
    options: Partial<EngineOptions> = {},
    wake: () => void = () => {},
    now: () => number = () => performance.now(),
    kv: EngineKv = new HostEngineKv(views.gpu, views.geometry),
  ) {
    this.views = views;
    this.options = resolveEngineOptions(options, views.config.maxRequests);
    this.submissions = views.ring('submit');
    this.allocAnswers = views.ring('allocAnswer');
    this.storeAnswers = views.ring('storeAnswer');
    const storeRequests = views.ring('storeRequest');
    this.e = new EngineState({
      options: this.options,
      views,
      scheduler: new SchedulerRole(views.state),
      hashing,
      events,
      random: new Prng(this.options.seed),
      toAllocator: new Outbox(views.ring('allocRequest')),
      toStore: new Outbox(storeRequests),
      storeRecordWordsMax: storeRequests.recordWordsMax,
      // An answer is [ANS_ALLOCATED, tag, ok, ...ids].
      allocIdsMax: this.allocAnswers.recordWordsMax - 3,
      now,
      kv,
    });
    this.wake = wake;
  }

  /** Requests not yet ended. */
  get pending(): number {
    return this.e.byId.size;
  }

  /** Idle with requests in it (a lookup's back-off, pool pressure): a short park; empty: the longest. */
  wait(did: boolean): RoleWait {
    if (did) return AGAIN;
    return park(this.pending > 0 ? ENGINE_BUSY_PARK_MS : undefined);
  }

  stop(): void {}

  final(): Record<string, number> {
    return { pending: this.pending };
  }

  /** One bounded unit of work; true when anything happened. */
  step(): boolean {
    const e = this.e;
    let did = e.toAllocator.flush() + e.toStore.flush() > 0;
    did = this.submissions.drain((r) => this.submit(r), RECORDS_PER_STEP_MAX) > 0 || did;
    did = this.allocAnswers.drain((r) => this.onAllocAnswer(r), RECORDS_PER_STEP_MAX) > 0 || did;
    did = this.storeAnswers.drain((r) => onStoreAnswer(e, r), RECORDS_PER_STEP_MAX) > 0 || did;
    const closing = Atomics.load(this.views.control, CONTROL_CLOSING) === 1;
    if (closing) did = abortAll(e) || did;
    if (e.outstanding === 0 && e.stepRequests.length > 0) {
      did = finishStep(e, closing) || did;
    }
    if (
      e.outstanding === 0 &&
      e.stepRequests.length === 0 &&
      e.now() - this.lastPlanMs >= this.options.stepMs
    ) {
      // One engine step: plan the batch; its allocations commit together.
      this.lastPlanMs = e.now();
      if (e.lookupsPending > 0) e.counters.stepsPlannedDuringLookups += 1;
      did = plan(e) || did;
    }
    e.publishStats();
    if (did) this.wake();
    return did;
  }

  /** A submit-ring record: a well-formed submission is added; anything else is refused and counted. */
  private submit(r: Int32Array): void {
    const s = decodeSubmission(r, this.views.config.maxTokensPerRequest, (id) =>
      this.e.byId.has(id),
    );
    if (s === undefined) this.e.counters.recordsRefused += 1;
    else this.add(s);
  }

  /** Adds a request directly (single-thread drivers); the ring path calls this too. */
  add(s: EngineSubmission): void {
    const { config } = this.views;
    const e = this.e;
    const req = engineRequestOf(s, config, e.hashing, this.options);
    e.byId.set(req.id, req);
    e.counters.requests += 1;
    const least = poolBlocksLeast(config, req.promptLength);
    if (least > config.gpuBlocks - 1) {
      // It can never run: refused before it takes a slot.
      req.ending = 'aborted';
      req.reason = `gpu-pool: needs at least ${least} GPU blocks; the pool has ${config.gpuBlocks - 1}`;
      finishSummary(e, req, false);
      return;
    }
    e.queue.push(req);
  }

  private onAllocAnswer(a: Int32Array): void {
    const e = this.e;
    const r = e.byId.get(a[1]!);
    if (r === undefined) invariant(false, `allocator answer for a known request ${a[1]}`);
    if (a[0] === ANS_RELEASED) {
      released(e, r);
      return;
    }
    invariant(a[0] === ANS_ALLOCATED && r.awaiting, 'an allocation answer was awaited');
    r.awaiting = false;
    e.outstanding -= 1;
    const ok = a[2] === 1;
    if (r.phase === 'hit-alloc') {
      onHitAllocAnswer(e, r, ok, a.subarray(3));
      return;
    }
    // Requests with an answer outstanding are never preempted or ended.
    if (r.phase !== 'running')
      invariant(false, `allocation answered to a running request (${r.phase})`);
    onStepAllocAnswer(e, r, ok, a.subarray(3));
  }
}
