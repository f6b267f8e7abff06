// The roles world's engine: the scheduler, hasher and allocator roles of the
// simulated engine around the core, each step one publication (a batch of
// token progress, one hash block, one block ID, a preemption clear, a nulled
// window block, a settle). The scheduler decides by the engine model's policy
// (src/runtime/schedule-policy.ts, through world-schedule.ts's pass): steps
// fitted to the pool, the newest running request preempted when an older one
// is short, a request ended when alone it cannot make one step, service
// oldest first, preempted ones resumed before new ones are admitted; one
// fuzz decision is one request's action. On top of the policy the scenario
// injects preemptions and aborts at exact step counts: ADVERSARIAL INJECTIONS,
// a harsher input than pool pressure alone (a preemption mid-prefill, or of
// the oldest request, which the policy never picks). The forward pass writes
// a block's bytes when it is allocated, so a block reused mid-copy shows up as
// a byte mismatch. World (world.ts) drives it with the store and transfer
// roles and checks the invariants.
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
import { SchedulePass } from './world-schedule.js';
import type { SchedulerChoice } from './world-schedule.js';

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
  /** The scheduler's pass over the requests, by the engine's policy. */
  private readonly pass: SchedulePass;
  private admittedNext = 0;
  private runSeqNext = 0;
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
    this.pass = new SchedulePass({
      gpuBlocks: this.config.gpuBlocks,
      requests: this.requests,
      freeSlots: () => this.scheduler.freeSlotCount,
      blocksFor: (r, tokens) => this.blocksShort(r, this.base(r) + tokens),
      canSupply: (r, tokens) => this.canSupply(r, tokens),
    });
  }

  // -------------------------------------------------------------- scheduler

  /** The scheduler's next decision (the policy's pass, world-schedule.ts), or undefined. */
  findSchedulerWork(): SchedulerChoice | undefined {
    return this.pass.next();
  }

  /** A step's blocks are counted from where the request is: its prefill horizon, or its tokens (decode). */
  private base(r: WorldRequest): number {
    return Math.min(r.computed + r.scheduled, r.numTokens);
  }

  /** Blocks `r` lacks to cover `tokens` (a preempted request's are all going back: it lacks them all). */
  private blocksShort(r: WorldRequest, tokens: number): number {
    let n = 0;
    for (const g of this.config.groups) {
      const want = Math.min(Math.ceil(tokens / g.tokensPerBlock), this.config.maxBlocksPerRequest);
      n += Math.max(0, want - (r.clearPending ? 0 : r.blocks[g.index]!.length));
    }
    return n;
  }

  /** The pool can hand out the blocks now (the policy's count may say free what a copy still holds). */
  private canSupply(r: WorldRequest, tokens: number): boolean {
    if (r.clearPending) return false; // the allocator clears its blocks first
    const n = this.blocksShort(r, this.base(r) + tokens);
    if (n <= this.pool.available) return true;
    this.pool.releaseUnpinned(); // the allocator's own housekeeping: copies may have finished
    return n <= this.pool.available;
  }

  /** Engine-side allocation plus the forward pass: the new blocks get their chunk's bytes now. */
  private allocateFor(r: WorldRequest, tokens: number): boolean {
    const n = this.blocksShort(r, tokens);
    if (n === 0) return true;
    // canSupply counted the free list; inside a planning pass a free block may be
    // pinned for a moment (a torn read about to be retried), and the pool skips it.
    const blocks = this.pool.allocate(n);
    if (blocks === undefined) return false;
    r.held += n;
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
    const c = this.pass.next();
    if (c === undefined) return;
    if (this.schedulerAct(c)) this.pass.taken(c);
  }

  /** Carries out one decision; false: it could not (the pool skipped a pinned block), the pass stays. */
  private schedulerAct(c: SchedulerChoice): boolean {
    const { r, action } = c;
    switch (action) {
      case A_OPEN:
        this.open(r, action);
        return true;
      case A_ABORT:
        this.abort(r, action, c.reason);
        return true;
      case A_PREEMPT:
        this.preempt(c.victim ?? r, action, c.victim === undefined ? undefined : r);
        return true;
      case A_PREFILL:
        return this.prefill(r, action, c.tokens);
      case A_DECODE:
        return this.decode(r, action, c.tokens);
      case A_FINISH:
        this.finish(r, action);
        return true;
      case A_RELEASE:
        this.release(r, action);
        return true;
    }
    return true;
  }

  private open(r: WorldRequest, action: number): void {
    const s = this.scheduler;
    r.handle = s.open({ requestId: r.spec.requestId, promptTokens: r.spec.prompt });
    r.phase = 'running';
    r.numTokens = r.spec.prompt.length;
    r.admittedSeq = ++this.admittedNext;
    r.runSeq = ++this.runSeqNext;
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

  /** An injected abort (the scenario's), or the policy's end of one too big for the pool (`reason`). */
  private abort(r: WorldRequest, action: number, reason: string | undefined): void {
    const s = this.scheduler;
    s.abort(r.handle);
    endedLife(r, 'aborted');
    r.reason = reason;
    this.hooks.markDirty(r);
    this.hooks.note(SCHEDULER, action, r.index, r.steps, () =>
      reason === undefined
        ? `abort r${r.spec.requestId} (computed ${r.computed}${r.steps === 0 ? ', queued' : ''})`
        : `end r${r.spec.requestId}: ${reason}`,
    );
  }

  /**
   * Preempts `r`: an injected preemption (the scenario's, at its step count),
   * or the policy's (`forRequest` is short of blocks: `r` is the newest
   * running, or `forRequest` itself). The engine's count frees its blocks at
   * once; the pool gets them when the allocator cleared them.
   */
  private preempt(r: WorldRequest, action: number, forRequest: WorldRequest | undefined): void {
    const s = this.scheduler;
    s.preempt(r.handle);
    if (forRequest === undefined) r.preemptAt.shift();
    preemptedLife(r);
    r.scheduled = 0;
    r.held = 0;
    r.clearPending = true;
    this.hooks.markDirty(r);
    this.hooks.note(
      SCHEDULER,
      action,
      r.index,
      r.steps,
      () =>
        `preempt r${r.spec.requestId}${forRequest === undefined ? '' : forRequest === r ? ' (itself: the pool is short, older requests run)' : ` for r${forRequest.spec.requestId} (the pool is short)`}: progress back to 0, blocks to be cleared`,
    );
  }

  /** A prefill chunk of `sc` tokens (fitted to the pool); a preempted request resumes with it. */
  private prefill(r: WorldRequest, action: number, sc: number): boolean {
    const s = this.scheduler;
    const c = r.computed + r.scheduled;
    if (!this.allocateFor(r, c + sc)) {
      this.waitForBlocks(r);
      return false;
    }
    if (r.phase === 'preempted') {
      r.phase = 'running';
      r.runSeq = ++this.runSeqNext;
    }
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
    return true;
  }

  /** A decode token and its drafts (`sc` tokens, fewer drafts when the pool is short). */
  private decode(r: WorldRequest, action: number, sc: number): boolean {
    const s = this.scheduler;
    // Every known token is computed now; drafts of the last step were rejected.
    const c = r.numTokens;
    if (!this.allocateFor(r, c + sc)) {
      this.waitForBlocks(r);
      return false;
    }
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
        `decode r${r.spec.requestId}: token ${r.numTokens}, computed ${c} + scheduled ${sc}${sc > 1 ? ` (${sc - 1} drafts)` : ''}`,
    );
    return true;
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
    if (r.phase === 'preempted') return r.clearPending ? A_CLEAR : A_NONE;
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
    r.held = 0;
    // Preempted: its blocks are back; the scheduler resumes it (from zero) when the policy says.
    if (action === A_CLEAR) r.clearPending = false;
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
    r.held -= 1;
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
