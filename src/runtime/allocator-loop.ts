// The allocator role's loop body. It owns the GPU block pool; it answers the
// scheduler's block requests at once but publishes the block IDs into shared
// state only after a configurable lag (plus jitter), so block IDs really trail
// token progress across threads (the seeds' race). Preemption clears, window
// nulling and end-of-request frees go through AllocatorRole (seqlocked). At a
// request's end it publishes what still lags and settles the generation's
// blocks; its blocks are freed only once the store role marked the generation
// drained, so its final chunks can still be stored.
import { invariant } from '../errors.js';
import { GpuBlockPool } from '../gpu-pool.js';
import { T_DRAINED_GENERATION } from '../layout.js';
import { AllocatorRole } from '../roles/allocator.js';
import type { RequestHandle } from '../roles/handle.js';
import type { RuntimeViews } from './buffers.js';
import { Outbox } from './outbox.js';
import { ANS_ALLOCATED, ANS_RELEASED, OP_ALLOC, OP_END, OP_NULL, OP_PREEMPT } from './protocol.js';
import { Prng } from '../prng.js';
import { AGAIN, ALLOCATOR_BUSY_PARK_MS, park, ringOthers } from './role-loop.js';
import type { RoleLoop, RoleWait } from './role-loop.js';
import type { SpscRing } from './rings.js';
import { publishStat } from './stats.js';

export interface AllocatorLag {
  /** Delay between answering the scheduler and publishing the block IDs. */
  publishDelayMs: number;
  /** Extra uniform random delay in [0, jitterMs). */
  jitterMs: number;
  seed: number;
}

export interface AllocatorLoopOptions {
  lag: AllocatorLag;
  /** Test-only: hand out pinned blocks (see GpuBlockPool.unsafeIgnorePins). */
  unsafeIgnorePins?: boolean;
  /**
   * false when the runtime runs no store (offloading off): nothing will ever
   * mark a generation drained, and nothing copies from its blocks, so a
   * request's blocks are freed as soon as it ends. Default true.
   */
  awaitDrained?: boolean;
  now?: () => number;
}

interface PendingPublish {
  readonly handle: RequestHandle;
  readonly group: number;
  readonly ids: number[];
  readonly dueMs: number;
  readonly answeredMs: number;
}

interface PendingEnd {
  readonly tag: number;
  readonly handle: RequestHandle;
}

/** Records handled per step: keeps each step bounded. */
const RECORDS_PER_STEP_MAX = 256;

export class AllocatorLoop implements RoleLoop {
  readonly pool: GpuBlockPool;
  private readonly views: RuntimeViews;
  private readonly role: AllocatorRole;
  private readonly requests: SpscRing;
  private readonly answers: Outbox;
  private readonly lag: AllocatorLag;
  private readonly random: Prng;
  private readonly now: () => number;
  /** Per slot, in append order; only this thread touches it. */
  private readonly pending = new Map<number, PendingPublish[]>();
  private readonly ends: PendingEnd[] = [];
  private publishLagMsMax = 0;
  private readonly awaitDrained: boolean;
  private readonly wakeOthers: () => void;

  constructor(views: RuntimeViews, options: AllocatorLoopOptions) {
    this.views = views;
    this.role = new AllocatorRole(views.state);
    const poolOptions = options.unsafeIgnorePins ? { unsafeIgnorePins: true } : {};
    this.pool = new GpuBlockPool(views.config.gpuBlocks, views.state.pins, poolOptions);
    this.requests = views.ring('allocRequest');
    this.answers = new Outbox(views.ring('allocAnswer'));
    this.lag = options.lag;
    this.random = new Prng(options.lag.seed, 0xa11c);
    this.now = options.now ?? (() => performance.now());
    this.awaitDrained = options.awaitDrained ?? true;
    this.wakeOthers = ringOthers(views, 'allocator');
  }

  /** Idle with publications still lagging: a short park; otherwise the longest. */
  wait(did: boolean): RoleWait {
    if (did) return AGAIN;
    return park(this.busy ? ALLOCATOR_BUSY_PARK_MS : undefined);
  }

  /** Copies that finished before main stopped this role: their unpinned quarantined blocks go back. */
  stop(): void {
    this.step();
  }

  final(): Record<string, number> {
    const { pool } = this;
    return { inUse: pool.inUse, quarantined: pool.quarantined, available: pool.available };
  }

  /** Work left that needs a timely wake-up even with no new records. */
  get busy(): boolean {
    return this.pending.size > 0 || this.ends.length > 0 || this.answers.pending > 0;
  }

  /** One bounded unit of work; true when anything happened. */
  step(): boolean {
    let did = this.answers.flush() > 0;
    const records = this.requests.drain((r) => this.handle(r), RECORDS_PER_STEP_MAX);
    if (records > 0) did = true;
    if (this.publishDue()) did = true;
    if (this.freeDrained()) did = true;
    if (this.pool.quarantined > 0 && this.pool.releaseUnpinned() > 0) did = true;
    this.publishStats();
    if (did) this.wakeOthers();
    return did;
  }

  /** Publishes every pending block ID now (used when a run is closing). */
  flushAll(): void {
    for (const slot of [...this.pending.keys()]) this.publishSlot(slot, Infinity);
  }

  private handle(r: Int32Array): void {
    const op = r[0];
    if (op === OP_ALLOC) this.allocate(r);
    else if (op === OP_PREEMPT) this.preempt({ slot: r[1]!, generation: r[2]! });
    else if (op === OP_NULL)
      this.nullRange({ slot: r[1]!, generation: r[2]! }, r[3]!, r[4]!, r[5]!);
    else if (op === OP_END) {
      const handle = { slot: r[2]!, generation: r[3]! };
      // The end of the request: publish every block ID still lagging, then
      // settle, so the store's final pass knows no more will come (the
      // engine's finish reaches the store before this record reaches us).
      this.publishSlot(handle.slot, Infinity);
      this.role.settle(handle);
      this.ends.push({ tag: r[1]!, handle });
    } else invariant(false, `allocator opcode ${op} is known`);
  }

  private allocate(r: Int32Array): void {
    const tag = r[1]!;
    const handle = { slot: r[2]!, generation: r[3]! };
    const groups = this.views.state.groupCount;
    let total = 0;
    for (let g = 0; g < groups; g += 1) total += r[4 + 2 * g + 1]!;
    const ids = this.pool.allocate(total);
    if (ids === undefined) {
      this.answers.send([ANS_ALLOCATED, tag, 0]);
      return;
    }
    this.answers.send([ANS_ALLOCATED, tag, 1, ...ids]);
    const now = this.now();
    const due = now + this.lag.publishDelayMs + this.random.next() * this.lag.jitterMs;
    let at = 0;
    for (let g = 0; g < groups; g += 1) {
      const nulls = r[4 + 2 * g]!;
      const n = r[4 + 2 * g + 1]!;
      if (nulls + n === 0) continue;
      const groupIds: number[] = new Array<number>(nulls).fill(0);
      for (let i = 0; i < n; i += 1) groupIds.push(ids[at++]!);
      this.queue({ handle, group: g, ids: groupIds, dueMs: due, answeredMs: now });
    }
  }

  private queue(p: PendingPublish): void {
    let list = this.pending.get(p.handle.slot);
    if (list === undefined) {
      list = [];
      this.pending.set(p.handle.slot, list);
    }
    list.push(p);
  }

  private publishDue(): boolean {
    if (this.pending.size === 0) return false;
    const now = this.now();
    let did = false;
    for (const slot of [...this.pending.keys()]) if (this.publishSlot(slot, now)) did = true;
    return did;
  }

  /** Publishes the slot's pending appends due by `now`, in order (appends are positional). */
  private publishSlot(slot: number, now: number): boolean {
    const list = this.pending.get(slot);
    if (list === undefined) return false;
    let n = 0;
    const t = this.now();
    while (n < list.length && list[n]!.dueMs <= now) {
      const p = list[n]!;
      this.role.appendBlocks(p.handle, p.group, p.ids);
      this.publishLagMsMax = Math.max(this.publishLagMsMax, t - p.answeredMs);
      n += 1;
    }
    if (n === list.length) this.pending.delete(slot);
    else list.splice(0, n);
    return n > 0;
  }

  private preempt(handle: RequestHandle): void {
    // Blocks answered but not yet published never reach shared state: free them directly.
    const list = this.pending.get(handle.slot);
    if (list !== undefined) {
      for (const p of list) this.pool.release(p.ids);
      this.pending.delete(handle.slot);
    }
    this.pool.release(this.role.clear(handle));
  }

  private nullRange(handle: RequestHandle, group: number, from: number, to: number): void {
    this.publishSlot(handle.slot, Infinity); // positions must be published before they can be nulled
    const n = this.role.count(handle, group);
    const freed: number[] = [];
    for (let p = from; p < Math.min(to, n); p += 1) {
      const old = this.role.nullBlock(handle, group, p);
      if (old !== 0) freed.push(old);
    }
    this.pool.release(freed);
  }

  private freeDrained(): boolean {
    let did = false;
    const control = this.views.state.control;
    for (let i = this.ends.length - 1; i >= 0; i -= 1) {
      const e = this.ends[i]!;
      const slotWord = this.views.state.storeWord(e.handle.slot, T_DRAINED_GENERATION);
      if (this.awaitDrained && Atomics.load(control, slotWord) !== e.handle.generation) continue;
      this.pool.release(this.role.clear(e.handle));
      this.answers.send([ANS_RELEASED, e.tag, e.handle.slot, e.handle.generation]);
      this.ends.splice(i, 1);
      did = true;
    }
    return did;
  }

  private publishStats(): void {
    const stats = this.views.stats;
    publishStat(stats, 'blocksInUse', this.pool.inUse);
    publishStat(stats, 'blocksQuarantined', this.pool.quarantined);
    publishStat(stats, 'publishLagMsMax', this.publishLagMsMax);
  }
}
