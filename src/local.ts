// The single-process facade: every role driven from one thread, over the same
// shared-memory layout and the same role code the workers use. For tests, for
// the demo, and for anyone who wants to see the rule work step by step.
import { resolveConfig } from './config.js';
import { IllegalTransitionError, InvalidArgumentError, invariant } from './errors.js';
import type { Config, ConfigInput } from './config.js';
import type { StoreJob } from './job.js';
import { loadHashing } from './hashing.js';
import type { Hashing } from './hashing.js';
import { LoadPath } from './load-path.js';
import type { LoadJob, LookupAnswer, LookupOptions } from './load-path.js';
import type { CursorPolicy } from './lookup.js';
import { T_DRAINED_GENERATION } from './layout.js';
import { StorePlanner } from './planner.js';
import type { PlannerCounters, PlannerOptions } from './planner.js';
import { offloadableTokens, readyPrefix, tokenChunks } from './ready.js';
import { AllocatorRole } from './roles/allocator.js';
import { checkHandle, ownHandle } from './roles/handle.js';
import type { RequestHandle } from './roles/handle.js';
import { HasherRole } from './roles/hasher.js';
import { SchedulerRole } from './roles/scheduler.js';
import type { OpenRequest } from './roles/scheduler.js';
import { RequestSnapshot, StoreRole } from './roles/store.js';
import { SharedState } from './state.js';
import { HostTier } from './tier/host-tier.js';
import type { OffloadTier } from './tier/types.js';

export interface GroupProgress {
  tokenChunks: number;
  keys: number;
  blocks: number;
  ready: number;
  cursor: number;
}

export interface LocalOffloadOptions extends PlannerOptions {
  /** A tier other than the default LRU host tier (capacity from the config). */
  tier?: OffloadTier;
  /** Where a load leaves the store cursor: 'block-level' (default) or 'request-level'. */
  cursorPolicy?: CursorPolicy;
  /**
   * Test-only (failure class F5, vLLM #46014): a re-admitted request's lookup
   * is not deferred, and its load not refused, while its store jobs are in
   * flight, so a load and stores of one request overlap. Exists so the
   * failure-class test can show what the deferral prevents; never turn it on otherwise.
   */
  unsafeLoadWhileStoring?: boolean;
}

export class LocalOffload {
  readonly config: Config;
  readonly state: SharedState;
  readonly scheduler: SchedulerRole;
  readonly hasher: HasherRole;
  readonly allocator: AllocatorRole;
  readonly planner: StorePlanner;
  readonly tier: OffloadTier;
  private readonly reader: StoreRole;
  private readonly snap: RequestSnapshot;
  private readonly loadPath: LoadPath;

  private constructor(
    config: Config,
    state: SharedState,
    hasher: HasherRole,
    hashing: Hashing,
    options: LocalOffloadOptions,
  ) {
    this.config = config;
    this.state = state;
    this.scheduler = new SchedulerRole(state);
    this.hasher = hasher;
    this.allocator = new AllocatorRole(state);
    this.tier = options.tier ?? new HostTier(config.tierChunks);
    const loadPath = new LoadPath(
      state,
      this.tier,
      hashing,
      options.cursorPolicy ?? 'block-level',
      options.unsafeLoadWhileStoring ? { unsafeLoadWhileStoring: true } : {},
    );
    this.loadPath = loadPath;
    // The load path counts each request's chunks in flight from the planner itself,
    // so passes run through `planner.pass()` directly count as well as plan().
    // The caller's hooks are called as its methods (a ChunkLedger is a class).
    const user = options.observer;
    this.planner = new StorePlanner(state, this.tier, {
      ...options,
      observer: {
        chunk: (slot, generation, group, chunk, outcome) => {
          if (outcome === 'stored') loadPath.storeDispatched(slot);
          user?.chunk?.(slot, generation, group, chunk, outcome);
        },
        ...(user?.deferred ? { deferred: user.deferred.bind(user) } : {}),
        ...(user?.cursorMoved ? { cursorMoved: user.cursorMoved.bind(user) } : {}),
        ...(user?.draining ? { draining: user.draining.bind(user) } : {}),
        ...(user?.failed ? { failed: user.failed.bind(user) } : {}),
      },
    });
    this.reader = new StoreRole(state);
    this.snap = new RequestSnapshot(state.groupCount);
  }

  static async create(
    input: ConfigInput,
    options: LocalOffloadOptions = {},
  ): Promise<LocalOffload> {
    const config = resolveConfig(input);
    const state = SharedState.create(config);
    const hashing = await loadHashing(config.keyHash);
    const hasher = new HasherRole(state, hashing);
    return new LocalOffload(config, state, hasher, hashing, options);
  }

  open(req: OpenRequest): RequestHandle {
    return this.scheduler.open(req);
  }
  appendTokens(handle: RequestHandle, tokens: ArrayLike<number>): void {
    this.scheduler.appendTokens(handle, tokens);
  }
  /** Hasher role: hash up to `hashesMax` new hash blocks (all available by default). */
  hash(handle: RequestHandle, hashesMax?: number): number {
    return this.hasher.hash(handle, hashesMax);
  }
  appendBlocks(handle: RequestHandle, group: number, blockIds: ArrayLike<number>): void {
    this.allocator.appendBlocks(handle, group, blockIds);
  }
  /**
   * Allocator role, at the end of a request (after finish or abort): every block
   * ID of it is appended, none will follow (a later append throws
   * BlocksSettledError). Until then the final pass waits, bounded, for block IDs
   * of token-ready chunks that are still missing; after it, what is missing is
   * counted in chunksDroppedUnready.
   */
  settle(handle: RequestHandle): void {
    this.allocator.settle(handle);
  }
  nullBlock(handle: RequestHandle, group: number, position: number): number {
    return this.allocator.nullBlock(handle, group, position);
  }
  progress(handle: RequestHandle, computedTokens: number, scheduledTokens = 0): void {
    handle = ownHandle(handle);
    this.loadPath.expectNotLoading(handle, 'set progress of');
    this.scheduler.progress(handle, computedTokens, scheduledTokens);
  }
  /** Preemption: progress restarts and the block tables are cleared; cursors stay. */
  preempt(handle: RequestHandle): number[] {
    handle = ownHandle(handle);
    this.loadPath.expectNotLoading(handle, 'preempt');
    this.scheduler.preempt(handle);
    return this.allocator.clear(handle);
  }
  finish(handle: RequestHandle): void {
    this.scheduler.finish(handle);
  }
  abort(handle: RequestHandle): void {
    this.scheduler.abort(handle);
  }
  /**
   * Frees the request's blocks and its slot; returns the block IDs it held.
   * Only once the store drained it (after finish or abort and a pass), as the
   * external host requires: before that its final pass has not run, so
   * releasing would lose its last chunks. IllegalTransitionError otherwise.
   */
  release(handle: RequestHandle): number[] {
    handle = ownHandle(handle);
    checkHandle(this.state, handle);
    this.loadPath.expectNotLoading(handle, 'release');
    // A plain read of the drained mark: a snapshot would adopt the store line (a write).
    const mark = Atomics.load(
      this.state.control,
      this.state.storeWord(handle.slot, T_DRAINED_GENERATION),
    );
    if (mark !== handle.generation) {
      throw new IllegalTransitionError('release', 'not yet drained by the store');
    }
    const freed = this.allocator.clear(handle);
    this.scheduler.release(handle);
    return freed;
  }
  /** One store-planning pass over every request. */
  plan(): StoreJob[] {
    return this.planner.pass();
  }
  /**
   * Completes a job as the transfer role would: publish in the tier, unpin.
   * Throws InvalidArgumentError, having changed nothing, for a job never
   * issued by plan() or already completed.
   */
  complete(job: StoreJob, success = true): void {
    this.planner.complete(job, success);
    this.loadPath.storeCompleted(job.slot, job.chunks.length);
  }

  /**
   * vLLM's lookup for a prompt: how many tokens beyond `localHitTokens` can be
   * loaded from the tier, or `{ deferred: true }` (ask again later) when an
   * entry it needs is being written or read by another load, or when the
   * re-admitted `handle` still has store jobs in flight. Touches the prompt's
   * keys group by group. Open the request with `answer.hitChunks`.
   */
  lookup(promptTokens: ArrayLike<number>, options?: LookupOptions): LookupAnswer {
    return this.loadPath.lookup(promptTokens, options);
  }
  /** Starts loading a hit into the request's appended blocks; copy each chunk, then completeLoad. */
  load(handle: RequestHandle, answer: LookupAnswer): LoadJob {
    handle = ownHandle(handle);
    return this.loadPath.load(handle, answer);
  }
  completeLoad(job: LoadJob): void {
    this.loadPath.completeLoad(job);
  }
  get counters(): Readonly<PlannerCounters> {
    return this.planner.counters;
  }

  /**
   * vLLM's reset_cache: the tier is emptied at once; jobs in flight end
   * without publishing anything (stores are recognised by job id, loads go on
   * reading the slots the reset retired); every live request that was not
   * drained stores its chunks again from cursor 0 (a new store epoch). A
   * drained request is not signalled again. A lookup answer from before the
   * reset cannot be loaded after it (its entries are gone): look up again.
   * Call it between steps. The facade has no shared tier: `shared` is refused.
   */
  reset(options: { shared?: boolean } = {}): void {
    if (typeof options !== 'object' || options === null) {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    if (options.shared !== undefined && typeof options.shared !== 'boolean') {
      throw new InvalidArgumentError('shared', 'must be a boolean');
    }
    if (options.shared === true) {
      throw new InvalidArgumentError('shared', 'the facade has no disk or Redis tier to retire');
    }
    this.planner.reset();
    this.loadPath.reset();
  }

  /** The rule's view of one group right now (what the next pass would see). */
  groupProgress(handle: RequestHandle, group: number): GroupProgress {
    handle = ownHandle(handle);
    checkHandle(this.state, handle);
    if (!Number.isInteger(group) || group < 0 || group >= this.state.groupCount) {
      throw new InvalidArgumentError('group', `must be in [0, ${this.state.groupCount})`);
    }
    const result = this.reader.snapshot(handle.slot, this.snap);
    // One thread drives every role here, so no writer can be mid-change.
    if (result !== 'ok')
      invariant(false, `slot ${handle.slot} of a checked handle reads ${result}`);
    const g = this.config.groups[group]!;
    const tc = tokenChunks(this.snap, g, offloadableTokens(this.snap, this.config));
    const keys = this.snap.keyCount[group]!;
    const blocks = this.snap.blockCount[group]!;
    return {
      tokenChunks: tc,
      keys,
      blocks,
      ready: readyPrefix(tc, keys, blocks, this.config.blocksPerChunk),
      cursor: this.snap.cursor[group]!,
    };
  }

  /** True once the store role took the final pass of an ended request (its blocks may be freed). */
  drained(handle: RequestHandle): boolean {
    handle = ownHandle(handle);
    this.groupProgress(handle, 0);
    return this.snap.drained;
  }

  cursor(handle: RequestHandle, group: number): number {
    return this.groupProgress(handle, group).cursor;
  }

  /** The offload keys (256-bit identities) published for a group. */
  keys(handle: RequestHandle, group: number): bigint[] {
    handle = ownHandle(handle);
    const n = this.groupProgress(handle, group).keys;
    return Array.from({ length: n }, (_, c) => this.state.key(handle.slot, group, c));
  }
}
