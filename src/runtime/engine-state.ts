// What every part of the engine simulator shares: its requests (by id, the
// arrival queue, the live set), its own count of the GPU pool (blocks held by
// live requests plus blocks asked for and not yet answered), the step in
// flight, the outboxes to the allocator and the store, and its counters. The
// scheduling (engine-schedule.ts), load (engine-loads.ts) and commit
// (engine-commit.ts) modules work on it; EngineSimulator (engine-sim.ts) is
// the loop that drives them.
import type { Hashing } from '../hashing.js';
import type { SchedulerRole } from '../roles/scheduler.js';
import type { RuntimeViews } from './buffers.js';
import type { EngineKv } from './engine-kv.js';
import type { EngineOptions } from './engine-options.js';
import type { EngineEvents, EngineRequest } from './engine-request.js';
import type { Outbox } from './outbox.js';
import type { Prng } from '../prng.js';
import { publishStat } from './stats.js';
import { tokensThatFit, watermarkBlocks } from './schedule-policy.js';

/** The engine's counters, published to the stats words after every change that matters. */
function engineCounters() {
  return {
    requests: 0,
    completed: 0,
    aborted: 0,
    preemptions: 0,
    poolAllocationFailures: 0,
    engineSteps: 0,
    tokensComputed: 0,
    tierHits: 0,
    loadMismatches: 0,
    recordsRefused: 0,
    lookupWaitMsMax: 0,
    stepsPlannedDuringLookups: 0,
  };
}

/** The parts an engine is built from (EngineSimulator's constructor makes them). */
export interface EngineParts {
  readonly options: EngineOptions;
  readonly views: RuntimeViews;
  readonly scheduler: SchedulerRole;
  readonly hashing: Hashing;
  readonly events: EngineEvents;
  readonly random: Prng;
  readonly toAllocator: Outbox;
  readonly toStore: Outbox;
  readonly storeRecordWordsMax: number;
  readonly allocIdsMax: number;
  readonly now: () => number;
  readonly kv: EngineKv;
}

/**
 * Refused allocations of the same request (the engine's accounting said the
 * blocks are free, but some still wait in quarantine for a copy to finish)
 * before it gives up a tier hit, or, for a step, is preempted to let the rest
 * of the step commit. Copies always finish, so this is a backstop only.
 */
export const ALLOC_FAILURES_MAX = 2000;

export class EngineState implements EngineParts {
  readonly options: EngineOptions;
  readonly views: RuntimeViews;
  readonly scheduler: SchedulerRole;
  readonly hashing: Hashing;
  readonly events: EngineEvents;
  readonly random: Prng;
  readonly toAllocator: Outbox;
  readonly toStore: Outbox;
  readonly storeRecordWordsMax: number;
  /** Most block IDs one allocation answer can carry (see tokensFor). */
  readonly allocIdsMax: number;
  readonly now: () => number;
  /** Where the forward pass's KV is written and loads are checked (host arena or GPU thread). */
  readonly kv: EngineKv;
  /** EAGLE drafts are on: some group is EAGLE and eagleDraftTokens > 0. */
  readonly eagle: boolean;
  readonly counters = engineCounters();
  readonly byId = new Map<number, EngineRequest>();
  /** Arrival order; ended requests are removed. */
  queue: EngineRequest[] = [];
  live: EngineRequest[] = [];
  admitted = 0;
  /**
   * Answers the current step waits for: allocations and loads. The next step
   * is planned only when all arrived, so the logical schedule (how many
   * requests overlap, hence preemption) does not depend on how fast the other
   * threads answer (a synchronous-load model of the connector). Admission
   * lookups are not among them: a request waits in 'lookup' while the engine
   * keeps stepping the others (vLLM's scheduler skips a request whose
   * connector answers "not yet"), so a slow store never holds a step back.
   */
  outstanding = 0;
  /** Admission lookups sent and not answered. */
  lookupsPending = 0;
  /** Requests scheduled in the current step, in plan order; they commit together. */
  stepRequests: EngineRequest[] = [];
  /** Blocks held by live requests and reserved by outstanding allocations (engine's view). */
  heldBlocks = 0;
  reservedBlocks = 0;
  runSeqNext = 0;
  /** When refused allocations of the step were last sent again. */
  lastRetryMs = -Infinity;

  constructor(parts: EngineParts) {
    this.options = parts.options;
    this.views = parts.views;
    this.scheduler = parts.scheduler;
    this.hashing = parts.hashing;
    this.events = parts.events;
    this.random = parts.random;
    this.toAllocator = parts.toAllocator;
    this.toStore = parts.toStore;
    this.storeRecordWordsMax = parts.storeRecordWordsMax;
    this.allocIdsMax = parts.allocIdsMax;
    this.now = parts.now;
    this.kv = parts.kv;
    this.eagle =
      this.options.eagleDraftTokens > 0 && parts.views.config.groups.some((g) => g.eagle);
  }

  /** Blocks free in the engine's count of the pool (block 0 is the null block). */
  freeBlocks(): number {
    return this.views.config.gpuBlocks - 1 - this.heldBlocks - this.reservedBlocks;
  }

  watermarkBlocks(): number {
    return watermarkBlocks(this.views.config.gpuBlocks);
  }

  /** Blocks a fresh request needs for its first `tokens` tokens, over all groups. */
  blocksForTokens(tokens: number): number {
    let need = 0;
    for (const g of this.views.config.groups) need += Math.ceil(tokens / g.tokensPerBlock);
    return need;
  }

  /** New blocks `r` needs to compute `n` more tokens. */
  blocksFor(r: EngineRequest, n: number): number {
    let need = 0;
    for (const g of this.views.config.groups) {
      need += Math.max(
        0,
        Math.ceil((r.computed + n) / g.tokensPerBlock) - r.blocks[g.index]!.length,
      );
    }
    return need;
  }

  /** The most tokens, at most `n`, whose new blocks fit in `free` (0 if not even one token's). */
  fitTokens(r: EngineRequest, n: number, free: number): number {
    return tokensThatFit(n, free, (t) => this.blocksFor(r, t));
  }

  /** Counts `r.wanted` against the pool until the allocator answers. */
  reserve(r: EngineRequest): void {
    this.unreserve(r);
    for (const w of r.wanted) r.reserved += w;
    this.reservedBlocks += r.reserved;
  }

  unreserve(r: EngineRequest): void {
    this.reservedBlocks -= r.reserved;
    r.reserved = 0;
  }

  /** Granted blocks: reserved becomes held. */
  hold(r: EngineRequest): void {
    r.held += r.reserved;
    this.heldBlocks += r.reserved;
    this.unreserve(r);
  }

  /** Sends an allocation the current step waits for. */
  sendAlloc(r: EngineRequest, record: number[]): void {
    r.awaiting = true;
    this.outstanding += 1;
    this.toAllocator.send(record);
  }

  /** (Re)enters the running set: the newest is the preemption victim (vLLM). */
  setRunning(r: EngineRequest): void {
    r.phase = 'running';
    r.runSeq = ++this.runSeqNext;
  }

  publishStats(): void {
    const s = this.views.stats;
    for (const [name, value] of Object.entries(this.counters)) {
      publishStat(s, name as keyof typeof this.counters, value);
    }
  }
}
