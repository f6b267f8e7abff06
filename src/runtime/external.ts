// Feeding real events: with `OffloadRuntime.start({ external: true })` the
// runtime runs only the hasher, the store and the transfer pool; the host
// program is the scheduler and the allocator. It opens requests, publishes
// tokens, blocks and progress through the same role views the built-in
// simulator uses (single writer per role: the host must drive each role from
// one thread), and frees a request's blocks only after the store drained it.
//
// A host worker can attach to the same memory: post `runtime.buffers` and
// `runtime.config` to it and call `attachExternal(config, buffers)` there.
import type { LoadFailurePolicy } from '../lookup.js';
import type { Config } from '../config.js';
import { writeComputedBlock } from '../copy.js';
import {
  ClosedError,
  IllegalTransitionError,
  InvalidArgumentError,
  TimeoutError,
} from '../errors.js';
import { GpuBlockPool } from '../gpu-pool.js';
import {
  H_GENERATION,
  H_HASH_COUNT,
  OWNER_CLOSED,
  S_NUM_TOKENS,
  T_DRAINED_GENERATION,
} from '../layout.js';
import { AllocatorRole } from '../roles/allocator.js';
import type { AllocatorRoleOptions } from '../roles/allocator.js';
import { ownHandle } from '../roles/handle.js';
import type { RequestHandle } from '../roles/handle.js';
import { SchedulerRole } from '../roles/scheduler.js';
import type { SharedState } from '../state.js';
import { RuntimeViews, checkRuntimeBuffers } from './buffers.js';
import { ExternalLoadPath } from './external-load.js';
import type {
  ExternalLoadResult,
  ExternalLookupAnswer,
  ExternalLookupOptions,
} from './external-load.js';
import type { RuntimeBuffers } from './buffers.js';

export interface ExternalRoles {
  readonly config: Config;
  readonly state: SharedState;
  /** The scheduler role: open, appendTokens, progress, preempt, finish, abort, release. */
  readonly scheduler: SchedulerRole;
  /** The allocator role: appendBlocks, clear, nullBlock. */
  readonly allocator: AllocatorRole;
  /** The GPU arena: block b is words [b * bytesPerBlock / 4, ...). */
  readonly gpu: Uint32Array;
  /** Writes block `block` as the verifiable expansion of (key, position in its group's table). */
  writeBlock(block: number, key: bigint, position: number): void;
  /** Tells the hasher and the store that something was published (otherwise they notice within their park bound). */
  wake(): void;
  /** True once the store ran the final pass of this (finished or aborted) request. */
  drained(handle: RequestHandle): boolean;
  /** True once the hasher published a hash for every full hash block of the known tokens. */
  hashed(handle: RequestHandle): boolean;
}

/**
 * Attaches to a runtime's shared memory from any thread (main or a host
 * worker). The scheduler and allocator views claim their role at their first
 * write: a second view (another thread, or a second attachment) that writes
 * the same role is refused with RoleClaimedError, and after the runtime's
 * close() every write is refused with ClosedError.
 */
export function attachExternal(
  config: Config,
  buffers: RuntimeBuffers,
  allocatorOptions: AllocatorRoleOptions = {},
): ExternalRoles {
  checkRuntimeBuffers(config, buffers);
  const views = new RuntimeViews(config, buffers);
  const bells = [views.doorbell('hasher'), views.doorbell('store')];
  return {
    config,
    state: views.state,
    scheduler: new SchedulerRole(views.state),
    allocator: new AllocatorRole(views.state, allocatorOptions),
    gpu: views.gpu,
    writeBlock: (block, key, position) =>
      writeComputedBlock(views.gpu, views.geometry, block, key, position),
    wake: () => {
      for (const b of bells) b.ring();
    },
    hashed: (handle) => {
      const { state } = views;
      if (
        Atomics.load(state.control, state.hasherWord(handle.slot, H_GENERATION)) !==
        handle.generation
      )
        return false;
      const tokens = Atomics.load(state.control, state.schedulerWord(handle.slot, S_NUM_TOKENS));
      const want = Math.min(Math.floor(tokens / config.tokensPerHash), config.maxHashesPerRequest);
      return Atomics.load(state.control, state.hasherWord(handle.slot, H_HASH_COUNT)) >= want;
    },
    drained: (handle) =>
      Atomics.load(
        views.state.control,
        views.state.storeWord(handle.slot, T_DRAINED_GENERATION),
      ) === handle.generation,
  };
}

/** Poll interval of whenDrained: main never waits on shared memory, it re-checks on a timer. */
const DRAIN_POLL_MS = 1;

/**
 * The main-thread host: the role views plus a GPU block pool it owns, and the
 * end-of-request protocol (finish or abort, wait until drained, release).
 */
export class ExternalHost {
  readonly roles: ExternalRoles;
  /** The host's block pool over the shared pin counts (pinned blocks wait in quarantine). */
  readonly pool: GpuBlockPool;
  private readonly loadPath: ExternalLoadPath;
  private readonly resetStore: ((options: { shared?: boolean }) => Promise<void>) | undefined;

  constructor(
    config: Config,
    buffers: RuntimeBuffers,
    /** The runtime's reset (the store role runs in its worker). */
    reset?: (options: { shared?: boolean }) => Promise<void>,
    /** RuntimeOptions.loadFailurePolicy: what load() does with a chunk that failed verification. */
    loadFailurePolicy: LoadFailurePolicy = 'recompute',
  ) {
    this.resetStore = reset;
    const views = new RuntimeViews(config, buffers);
    const closed = () =>
      Atomics.load(views.state.control, views.state.ownerWord('allocator')) === OWNER_CLOSED;
    this.pool = new HostBlockPool(config.gpuBlocks, views.state.pins, closed);
    const pool = this.pool;
    // The allocator view refuses block IDs this pool did not hand out.
    this.roles = attachExternal(config, buffers, { handedOut: (b) => pool.isAllocated(b) });
    this.loadPath = new ExternalLoadPath(
      config,
      buffers,
      () => this.roles.wake(),
      loadFailurePolicy,
    );
  }

  /**
   * Asks the store role for a prompt's tier hit (vLLM's lookup; see
   * docs/embedding-lookup.md): `{ deferred: true }` means ask again later. A
   * hit is protected from eviction until load() or cancel(). Only this host
   * (one thread) may use the lookup and load API.
   */
  lookup(
    promptTokens: ArrayLike<number>,
    options?: ExternalLookupOptions,
  ): Promise<ExternalLookupAnswer> {
    return this.loadPath.lookup(promptTokens, options);
  }

  /** Has the store role copy a hit into the request's appended blocks; checks every block against its key. */
  load(
    handle: RequestHandle,
    answer: ExternalLookupAnswer,
    timeoutMs?: number,
  ): Promise<ExternalLoadResult> {
    return this.loadPath.load(handle, answer, timeoutMs);
  }

  /** Gives up a hit without loading it. */
  cancel(answer: ExternalLookupAnswer): void {
    this.loadPath.cancel(answer);
  }

  /**
   * vLLM's reset_cache, for the host engine (OffloadRuntime.reset): the tier
   * is emptied; a hit already looked up still loads (from the slots the reset
   * retired) and publishes nothing; every live request not yet drained
   * stores its chunks again; `shared: true` also retires this namespace's
   * disk and Redis entries for every instance.
   */
  reset(options: { shared?: boolean } = {}): Promise<void> {
    if (this.resetStore === undefined) {
      return Promise.reject(new ClosedError('the external host (no runtime to reset)'));
    }
    return this.resetStore(options);
  }

  get scheduler(): SchedulerRole {
    return this.roles.scheduler;
  }
  get allocator(): AllocatorRole {
    return this.roles.allocator;
  }

  /** Resolves once the store drained `handle` (after finish or abort); bounded by `timeoutMs`. */
  whenDrained(handle: RequestHandle, timeoutMs = 10_000): Promise<void> {
    handle = ownHandle(handle);
    try {
      this.checkArgs(handle, timeoutMs);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.poll('whenDrained', () => this.roles.drained(handle), timeoutMs);
  }

  /**
   * Resolves once the runtime's hasher caught up with the request's tokens.
   * The hasher lags on purpose; finishing before this means the final pass
   * sees fewer keys and stores fewer chunks (never a hole: they were not ready).
   */
  whenHashed(handle: RequestHandle, timeoutMs = 10_000): Promise<void> {
    handle = ownHandle(handle);
    try {
      this.checkArgs(handle, timeoutMs);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.poll('whenHashed', () => this.roles.hashed(handle), timeoutMs);
  }

  /** A handle names a slot of this config; a wait bound is a non-negative number of ms. */
  private checkArgs(handle: RequestHandle, timeoutMs: number): void {
    const slots = this.roles.config.maxRequests;
    if (
      typeof handle !== 'object' ||
      handle === null ||
      !Number.isInteger(handle.slot) ||
      handle.slot < 0 ||
      handle.slot >= slots ||
      !Number.isInteger(handle.generation)
    ) {
      throw new InvalidArgumentError(
        'handle',
        `must be a request handle {slot in [0, ${slots}), generation}`,
      );
    }
    if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0) || timeoutMs > 2 ** 31 - 1) {
      throw new InvalidArgumentError('timeoutMs', 'must be a number of ms in [0, 2^31)');
    }
  }

  private poll(what: string, done: () => boolean, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    return new Promise<void>((resolve, reject) => {
      const check = () => {
        if (done()) resolve();
        // After close() nothing will change: settle now rather than poll out the bound.
        else if (this.loadPath.closed()) reject(new ClosedError('the external host'));
        else if (Date.now() > deadline) reject(new TimeoutError(what, timeoutMs));
        else setTimeout(check, DRAIN_POLL_MS);
      };
      this.roles.wake();
      check();
    });
  }

  /** Frees the request's blocks and its slot; only after it was drained. */
  release(handle: RequestHandle): void {
    handle = ownHandle(handle);
    this.checkArgs(handle, 0);
    if (this.loadPath.closed()) throw new ClosedError('the external host');
    if (!this.roles.drained(handle)) {
      throw new IllegalTransitionError('release', 'not yet drained by the store');
    }
    this.pool.release(this.roles.allocator.clear(handle));
    this.roles.scheduler.release(handle);
  }
}

/** The host's pool: refuses to allocate or free once the runtime closed. */
class HostBlockPool extends GpuBlockPool {
  constructor(
    gpuBlocks: number,
    pins: Int32Array,
    private readonly closed: () => boolean,
  ) {
    super(gpuBlocks, pins);
  }
  override allocate(n: number): number[] | undefined {
    if (this.closed()) throw new ClosedError('the external block pool');
    return super.allocate(n);
  }
  /** Refuses (InvalidArgumentError, nothing freed) an ID not handed out, or given twice. */
  override release(blocks: readonly number[]): void {
    if (this.closed()) throw new ClosedError('the external block pool');
    if (!Array.isArray(blocks))
      throw new InvalidArgumentError('blocks', 'must be an array of block IDs');
    const seen = new Set<number>();
    for (let i = 0; i < blocks.length; i += 1) {
      const b = blocks[i]!;
      if (b === 0) continue;
      if (!this.isAllocated(b) || seen.has(b)) {
        throw new InvalidArgumentError(
          `blocks[${i}]`,
          `block ${String(b)} is not handed out by this pool (or is given twice)`,
        );
      }
      seen.add(b);
    }
    super.release(blocks);
  }
}
