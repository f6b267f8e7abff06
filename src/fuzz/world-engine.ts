// The roles world's engine: the scheduler, hasher and allocator roles of the
// simulated engine around the core, each step one publication (a batch of
// token progress, one hash block, one block ID, a preemption clear, a nulled
// window block, a settle). Requests follow their scenario: preemptions and
// aborts come at exact step counts, prefill in the spec's batches. The forward
// pass writes a block's bytes when it is allocated, so a block reused mid-copy
// shows up as a byte mismatch. World (world.ts) drives it with the store and
// transfer roles and checks the invariants.
import { mayAdmit, nextInArrivalOrder } from '../runtime/schedule-policy.js';
import type { Config } from '../config.js';
import { writeComputedBlock } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import type { GpuBlockPool } from '../gpu-pool.js';
import { T_DRAINED_GENERATION } from '../layout.js';
import type { AllocatorRole } from '../roles/allocator.js';
import type { HasherRole } from '../roles/hasher.js';
import type { SchedulerRole } from '../roles/scheduler.js';
import type { SharedState } from '../state.js';
import { blocksCleared, endedLife, preemptedLife } from '../runtime/engine-request.js';
import {
  A_NONE,
  A_OPEN,
  A_ABORT,
  A_PREEMPT,
  A_PREFILL,
  A_DECODE,
  A_FINISH,
  A_RELEASE,
  A_CLEAR,
  A_FREE,
  A_NULL,
  A_PUBLISH,
  A_HASH,
  A_SETTLE,
  GROUP_SHIFT,
} from './request.js';
import type { WorldRequest } from './request.js';
import { ALLOCATOR, HASHER, SCHEDULER } from './scenario.js';

/** What the engine asks of the world around it. */
export interface WorldEngineHooks {
  /** Adds a step to the trace (and its hash). */
  note(actor: number, action: number, request: number, arg: number, text: () => string): void;
  /** The request's slot has something new for the store to plan. */
  markDirty(r: WorldRequest): void;
  /** The decision being taken (the world's clock). */
  decision(): number;
  /** The slot was released: the store forgets it. */
  released(slot: number): void;
}

/** The parts the engine steps over (the world builds them). */
export interface WorldEngineParts {
  readonly config: Config;
  readonly state: SharedState;
  readonly scheduler: SchedulerRole;
  readonly hasher: HasherRole;
  readonly allocator: AllocatorRole;
  readonly pool: GpuBlockPool;
  readonly gpu: Uint32Array;
  readonly geo: ArenaGeometry;
  readonly requests: readonly WorldRequest[];
  /** Per slot, the request that holds it (the store reads it too). */
  readonly slotOwner: (WorldRequest | undefined)[];
  /** Steps the transfer role stalls after a finish (the finish-mid-store fault); 0: none. */
  readonly finishStallSteps: number;
}

export class WorldEngine {
  private readonly config: Config;
  private readonly state: SharedState;
  private readonly scheduler: SchedulerRole;
  private readonly hasher: HasherRole;
  private readonly allocator: AllocatorRole;
  private readonly pool: GpuBlockPool;
  private readonly gpu: Uint32Array;
  private readonly geo: ArenaGeometry;
  readonly requests: readonly WorldRequest[];
  /** Per slot, the request that holds it. */
  readonly slotOwner: (WorldRequest | undefined)[];
  private readonly finishStallSteps: number;
  /** The transfer role is stalled until this decision (a finish mid-store). */
  transferStallUntil = -1;
  private reservedBlocks = 0;
  private schedRr = 0;
  private allocRr = 0;
  private hashRr = 0;

  constructor(
    parts: WorldEngineParts,
    private readonly hooks: WorldEngineHooks,
  ) {
    this.config = parts.config;
    this.state = parts.state;
    this.scheduler = parts.scheduler;
    this.hasher = parts.hasher;
    this.allocator = parts.allocator;
    this.pool = parts.pool;
    this.gpu = parts.gpu;
    this.geo = parts.geo;
    this.requests = parts.requests;
    this.finishStallSteps = parts.finishStallSteps;
    this.slotOwner = parts.slotOwner;
  }

  // -------------------------------------------------------------- scheduler

  findSchedulerWork(): WorldRequest | undefined {
    const n = this.requests.length;
    for (let i = 0; i < n; i += 1) {
      const r = this.requests[(this.schedRr + i) % n]!;
      if (this.schedulerAction(r) !== A_NONE) return r;
    }
    return undefined;
  }

  private schedulerAction(r: WorldRequest): number {
    switch (r.phase) {
      case 'queued': {
        // Admission in arrival order (the engine model's policy, schedule-policy.ts),
        // only when a slot is free and the request's blocks can be reserved.
        // The world reserves a request's whole need at admission and does not
        // fit its steps to the pool, so it never admits one that does not fit
        // (not alone either: scenarioFromSeed sizes the pool for the largest).
        if (nextInArrivalOrder(this.requests, (o) => o.phase === 'queued') !== r) return A_NONE;
        if (this.scheduler.freeSlotCount === 0) return A_NONE;
        const free = this.config.gpuBlocks - 1 - this.reservedBlocks;
        return mayAdmit(r.need, free, false) ? A_OPEN : A_NONE;
      }
      case 'preempted':
        // Its blocks are still to be cleared by the allocator; it resumes after that.
        return A_NONE;
      case 'running': {
        if (r.abortAt !== undefined && r.steps >= r.abortAt) return A_ABORT;
        if (r.preemptAt.length > 0 && r.preemptAt[0]! <= r.steps && r.steps > 0) return A_PREEMPT;
        const prefillDone = r.computed + r.scheduled >= r.numTokens;
        if (!prefillDone) {
          const c = r.computed + r.scheduled;
          const s = Math.min(r.spec.batchTokens, r.numTokens - c);
          return this.canCover(r, c + s) ? A_PREFILL : A_NONE;
        }
        if (r.decoded < r.spec.decode.length) {
          return this.canCover(r, r.numTokens + 1 + r.spec.drafts) ? A_DECODE : A_NONE;
        }
        return A_FINISH;
      }
      case 'ending':
        return r.freed ? A_RELEASE : A_NONE;
      default:
        return A_NONE;
    }
  }

  private blocksShort(r: WorldRequest, tokens: number): number {
    let n = 0;
    for (const g of this.config.groups) {
      const want = Math.min(Math.ceil(tokens / g.tokensPerBlock), this.config.maxBlocksPerRequest);
      n += Math.max(0, want - r.blocks[g.index]!.length);
    }
    return n;
  }

  private canCover(r: WorldRequest, tokens: number): boolean {
    const n = this.blocksShort(r, tokens);
    if (n <= this.pool.available) return true;
    this.pool.releaseUnpinned(); // the allocator's own housekeeping: copies may have finished
    return n <= this.pool.available;
  }

  /** Engine-side allocation plus the forward pass: the new blocks get their chunk's bytes now. */
  private allocateFor(r: WorldRequest, tokens: number): boolean {
    const n = this.blocksShort(r, tokens);
    if (n === 0) return true;
    // canCover counted the free list; inside a planning pass a free block may be
    // pinned for a moment (a torn read about to be retried), and the pool skips it.
    const blocks = this.pool.allocate(n);
    if (blocks === undefined) return false;
    let next = 0;
    const bpc = this.config.blocksPerChunk;
    for (const g of this.config.groups) {
      const list = r.blocks[g.index]!;
      const want = Math.min(Math.ceil(tokens / g.tokensPerBlock), this.config.maxBlocksPerRequest);
      while (list.length < want) {
        const block = blocks[next++]!;
        const position = list.length;
        const key = r.keys[g.index]![Math.floor(position / bpc)] ?? 0n;
        writeComputedBlock(this.gpu, this.geo, block, key, position);
        list.push(block);
      }
    }
    return true;
  }

  private waitForBlocks(r: WorldRequest): void {
    this.hooks.note(
      SCHEDULER,
      A_NONE,
      r.index,
      0,
      () => `r${r.spec.requestId} waits: the pool cannot supply its blocks right now`,
    );
  }

  schedulerStep(): void {
    const r = this.findSchedulerWork();
    if (r === undefined) return;
    this.schedRr = (r.index + 1) % this.requests.length;
    const action = this.schedulerAction(r);
    switch (action) {
      case A_OPEN:
        return this.open(r, action);
      case A_ABORT:
        return this.abort(r, action);
      case A_PREEMPT:
        return this.preempt(r, action);
      case A_PREFILL:
        return this.prefill(r, action);
      case A_DECODE:
        return this.decode(r, action);
      case A_FINISH:
        return this.finish(r, action);
      case A_RELEASE:
        return this.release(r, action);
    }
  }

  private open(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    r.handle = s.open({ requestId: r.spec.requestId, promptTokens: r.spec.prompt });
    r.phase = 'running';
    r.numTokens = r.spec.prompt.length;
    this.reservedBlocks += r.need;
    this.slotOwner[r.handle.slot] = r;
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      r.handle.slot,
      () =>
        `open r${r.spec.requestId} in slot ${r.handle.slot} (gen ${r.handle.generation}), prompt ${r.numTokens} tokens`,
    );
  }

  private abort(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    s.abort(r.handle);
    endedLife(r, 'aborted');
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      r.steps,
      () => `abort r${r.spec.requestId} (computed ${r.computed}${r.steps === 0 ? ', queued' : ''})`,
    );
  }

  private preempt(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    s.preempt(r.handle);
    r.preemptAt.shift();
    preemptedLife(r);
    r.scheduled = 0;
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      r.steps,
      () => `preempt r${r.spec.requestId}: progress back to 0, blocks to be cleared`,
    );
  }

  private prefill(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    const c = r.computed + r.scheduled;
    const sc = Math.min(r.spec.batchTokens, r.numTokens - c);
    if (!this.allocateFor(r, c + sc)) return this.waitForBlocks(r);
    s.progress(r.handle, c, sc);
    r.computed = c;
    r.scheduled = sc;
    r.steps += 1;
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      c + sc,
      () => `prefill r${r.spec.requestId}: computed ${c} + scheduled ${sc}`,
    );
  }

  private decode(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    // Every known token is computed now; drafts of the last step were rejected.
    const c = r.numTokens;
    const sc = 1 + r.spec.drafts;
    if (!this.allocateFor(r, c + sc)) return this.waitForBlocks(r);
    const tok = r.spec.decode[r.decoded]!;
    s.appendTokens(r.handle, [tok]);
    r.numTokens += 1;
    r.decoded += 1;
    s.progress(r.handle, c, sc);
    r.computed = c;
    r.scheduled = sc;
    r.steps += 1;
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      r.numTokens,
      () =>
        `decode r${r.spec.requestId}: token ${r.numTokens}, computed ${c} + scheduled ${sc}${r.spec.drafts ? ` (${r.spec.drafts} drafts)` : ''}`,
    );
  }

  private finish(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    s.finish(r.handle);
    endedLife(r, 'finished');
    if (this.finishStallSteps > 0) {
      this.transferStallUntil = Math.max(
        this.transferStallUntil,
        this.hooks.decision() + this.finishStallSteps,
      );
    }
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      r.numTokens,
      () => `finish r${r.spec.requestId} (${r.numTokens} tokens)`,
    );
  }

  private release(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    const slot = r.handle.slot;
    s.release(r.handle);
    r.phase = 'done';
    this.reservedBlocks -= r.need;
    this.slotOwner[slot] = undefined;
    this.hooks.released(slot);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      slot,
      () => `release r${r.spec.requestId}: slot ${slot} free`,
    );
  }

  // ----------------------------------------------------------------- hasher

  private hashesWanted(r: WorldRequest): number {
    if (r.phase !== 'running' && r.phase !== 'preempted' && r.phase !== 'ending') return 0;
    if (r.freed) return 0;
    return Math.floor(r.numTokens / this.config.tokensPerHash) - r.hashed;
  }

  findHasherWork(): WorldRequest | undefined {
    const n = this.requests.length;
    for (let i = 0; i < n; i += 1) {
      const r = this.requests[(this.hashRr + i) % n]!;
      if (this.hashesWanted(r) > 0) return r;
    }
    return undefined;
  }

  hasherStep(): void {
    const r = this.findHasherWork();
    if (r === undefined) return;
    this.hashRr = (r.index + 1) % this.requests.length;
    r.hashed += this.hasher.hash(r.handle, 1);
    this.hooks.markDirty(r);
    this.hooks.note(
      HASHER,
      A_HASH,
      r.index,
      r.hashed,
      () => `hash r${r.spec.requestId}: ${r.hashed} block hashes`,
    );
  }

  // -------------------------------------------------------------- allocator

  drained(r: WorldRequest): boolean {
    const w = this.state.storeWord(r.handle.slot, T_DRAINED_GENERATION);
    return Atomics.load(this.state.control, w) === r.handle.generation;
  }

  private allocatorAction(r: WorldRequest): number {
    if (r.phase === 'preempted') return A_CLEAR;
    if (r.phase === 'ending' && !r.freed) {
      if (this.drained(r)) return A_FREE;
    }
    if ((r.phase !== 'running' && r.phase !== 'ending') || r.freed) return A_NONE;
    if (r.phase === 'running' && this.nullable(r) !== undefined) return A_NULL;
    for (let g = 0; g < this.config.groups.length; g += 1) {
      if (r.published[g]! < r.blocks[g]!.length) return A_PUBLISH;
    }
    // The end handled: every block ID of the request is published, settle them.
    if (r.phase === 'ending' && !r.settled) return A_SETTLE;
    return A_NONE;
  }

  /** [group, position] of a sliding-window block that slid out of the window, if any. */
  private nullable(r: WorldRequest): [number, number] | undefined {
    for (const g of this.config.groups) {
      if (g.kind !== 'sliding-window') continue;
      const windowTokens = (g.windowChunks ?? 0) * g.tokensPerChunk;
      const list = r.blocks[g.index]!;
      let p = r.nullScan[g.index]!;
      while (p < r.published[g.index]! && list[p] === 0) p += 1;
      r.nullScan[g.index] = p;
      if (p < r.published[g.index]! && (p + 1) * g.tokensPerBlock + windowTokens <= r.computed) {
        return [g.index, p];
      }
    }
    return undefined;
  }

  findAllocatorWork(): WorldRequest | undefined {
    const n = this.requests.length;
    for (let i = 0; i < n; i += 1) {
      const r = this.requests[(this.allocRr + i) % n]!;
      if (this.allocatorAction(r) !== A_NONE) return r;
    }
    return undefined;
  }

  allocatorStep(): void {
    const r = this.findAllocatorWork();
    if (r === undefined) return;
    this.allocRr = (r.index + 1) % this.requests.length;
    const action = this.allocatorAction(r);
    switch (action) {
      case A_SETTLE:
        return this.settle(r, action);
      case A_CLEAR:
      case A_FREE:
        return this.clearBlocks(r, action);
      case A_NULL:
        return this.nullOut(r, action);
      case A_PUBLISH:
        return this.publish(r, action);
    }
  }

  private settle(r: WorldRequest, action: number): void {
    this.allocator.settle(r.handle);
    r.settled = true;
    this.hooks.markDirty(r);
    this.hooks.note(
      ALLOCATOR,
      action,
      r.index,
      0,
      () => `settle r${r.spec.requestId}: every block ID published, none will follow`,
    );
  }

  private clearBlocks(r: WorldRequest, action: number): void {
    const freed = this.allocator.clear(r.handle);
    const unpublished: number[] = [];
    for (let g = 0; g < this.config.groups.length; g += 1) {
      const list = r.blocks[g]!;
      for (let p = r.published[g]!; p < list.length; p += 1)
        if (list[p] !== 0) unpublished.push(list[p]!);
      r.published[g] = 0;
      r.nullScan[g] = 0;
    }
    blocksCleared(r);
    this.pool.release(freed);
    this.pool.release(unpublished);
    // Preempted: its blocks are back, so it runs again (from zero).
    if (action === A_CLEAR) r.phase = 'running';
    else r.freed = true;
    this.hooks.markDirty(r);
    this.hooks.note(
      ALLOCATOR,
      action,
      r.index,
      freed.length,
      () =>
        `${action === A_CLEAR ? 'clear (preempted)' : 'free (drained)'} r${r.spec.requestId}: blocks [${freed.join(',')}]${unpublished.length ? ` + unpublished [${unpublished.join(',')}]` : ''} back to the pool`,
    );
  }

  private nullOut(r: WorldRequest, action: number): void {
    const [g, p] = this.nullable(r)!;
    const old = this.allocator.nullBlock(r.handle, g, p);
    r.blocks[g]![p] = 0;
    this.pool.release([old]);
    this.hooks.markDirty(r);
    this.hooks.note(
      ALLOCATOR,
      action,
      r.index,
      p,
      () =>
        `null r${r.spec.requestId} group ${g} position ${p} (block ${old} slid out of the window)`,
    );
  }

  private publish(r: WorldRequest, action: number): void {
    for (let g = 0; g < this.config.groups.length; g += 1) {
      const p = r.published[g]!;
      if (p >= r.blocks[g]!.length) continue;
      const block = r.blocks[g]![p]!;
      this.allocator.appendBlocks(r.handle, g, [block]);
      r.published[g] = p + 1;
      this.hooks.markDirty(r);
      this.hooks.note(
        ALLOCATOR,
        action,
        r.index,
        g * GROUP_SHIFT + p,
        () => `append r${r.spec.requestId} group ${g} block ${block} at position ${p}`,
      );
      return;
    }
  }
}
