// The store loop's options: what each means, its defaults, and what the host
// tier and the planner are given from them (the planner's switches pass
// through; a traced run's recorder reads the planner's snapshots).
import type { LoadFailurePolicy } from '../lookup.js';
import type { PlannerObserver, PlannerOptions, PlannerSwitches, PlanPoint } from '../planner.js';
import { plannerSwitches } from '../planner.js';
import type { StorePolicy } from '../ready.js';
import type { RequestSnapshot } from '../roles/store.js';
import type { TierCascade } from '../tier/cascade.js';
import type { HostTierOptions } from '../tier/host-tier.js';
import type { CacheOptions } from '../tier/policy/index.js';
import type { LookupAnswered, StoreLoadsDeps } from './store-loads.js';
import { ledgerObserver } from '../ledger.js';
import type { ChunkLedger } from '../ledger.js';
import type { TraceRecorder } from './trace-recorder.js';

/**
 * The planner's test-only switches are passed on to it (PlannerOptions says
 * what each does; with unsafeSkipPins the transfer does not unpin either).
 */
export interface StoreLoopOptions extends PlannerSwitches {
  policy?: StorePolicy;
  /** The host tier's cache policy and store threshold (default LRU, every chunk admitted). */
  cache?: CacheOptions;
  /** Test knob: every transfer task sleeps this long before copying. */
  transferDelayMs?: number;
  /** Jobs in flight before a pass is skipped (bounds the backend's queue). */
  jobsInFlightMax?: number;
  /** Test-only: the store job dispatched after this many becomes a task that throws. */
  faultAfterTasks?: number;
  /** Test-only: with faultAfterTasks, this many store tasks from there on throw (default every one). */
  faultTasks?: number;
  /** Test-only: the load dispatched after this many fails its copy at its middle chunk. */
  faultLoadsAfter?: number;
  /** Test-only: with faultLoadsAfter, this many loads from there on fail (default every one). */
  faultLoads?: number;
  /** What a request does when a chunk of its hit cannot be loaded; default 'recompute'. */
  loadFailurePolicy?: LoadFailurePolicy;
  /**
   * Consecutive failed store copies after which the backend is taken as
   * broken and the store stops with TransferBackendFailedError; default
   * TRANSFER_FAILURES_MAX. One failed copy only fails its job.
   */
  transferFailuresMax?: number;
  /** The clock of the planner's final wait (ms); default performance.now. */
  now?: () => number;
  /** How long an ended request waits for its last keys and blocks (PlannerOptions.finalWaitMsMax). */
  finalWaitMsMax?: number;
  /** How long a store job waits for every rank's acknowledgement (PlannerOptions.rankAckWaitMsMax). */
  rankAckWaitMsMax?: number;
  /** Record per-pass windows of requests with id below this (0: none). */
  traceRequests?: number;
  /**
   * Test-only: a lookup counts tier entries still being written as hits and
   * loads them at once, so a load overlaps the store writing the same chunks.
   * Exists so the runtime fuzzer can show what deferring on pending entries
   * prevents; never turn it on otherwise.
   */
  unsafeLoadWhileWriting?: boolean;
  /** Test-only: the host tier evicts entries being written or read (HostTierOptions.unsafeEvictInUse, class F7). */
  unsafeEvictInUse?: boolean;
  /**
   * Test-only: a failed load keeps its tier read references (and its lock), so
   * the entries it read are never evictable again (class F8). Exists so the
   * runtime fuzzer can show the release on failure is load-bearing.
   */
  unsafeLeakOnLoadFailure?: boolean;
  /** Test-only: LookupUnsafe.unsafeEagleTailKept (rule-lookup-long). */
  unsafeEagleTailKept?: boolean;
  /** Test-only: LookupUnsafe.unsafeLastTokenLoaded, in the lookup and in the store's cap (rule-last-token). */
  unsafeLastTokenLoaded?: boolean;
  /** Called inside each planning pass where other threads' writes can land (a single-thread driver runs them here). */
  onPlanPoint?: (point: PlanPoint, snap: Readonly<RequestSnapshot>) => void;
  /** Levels below the host tier (disk, Redis), opened by the caller; none by default. */
  cascade?: TierCascade;
  /** Wakes this loop when a lower-level resolution finished (its own doorbell). */
  wake?: () => void;
  /**
   * Called with every lookup answer at the moment it is given (the runtime
   * fuzzer's oracle checks it against the lookup decision); never throws
   * into a real store thread, since only the fuzzer sets it.
   */
  onLookupAnswered?: (answered: LookupAnswered) => void;
  /**
   * Called after the chunk ledger with every cursor move (the runtime
   * fuzzer's oracle checks it against its independent specification); only
   * the fuzzer sets it.
   */
  onCursorMoved?: PlannerObserver['cursorMoved'];
}

/**
 * Consecutive failed store copies (no success between them) after which the
 * store gives up on the transfer backend. A copy can fail for a reason of its
 * own (a device error, a bad block); this many in a row means the backend
 * itself is broken, and a store that kept dispatching to it would drop every
 * chunk of every request while reporting a healthy runtime.
 */
export const TRANSFER_FAILURES_MAX = 16;

/** Store jobs in flight before a pass is skipped (bounds the backend's queue), by default. */
export const JOBS_IN_FLIGHT_MAX = 256;

/** The host tier's options: its cache policy and store threshold, and the eviction switch. */
export function hostTierOptions(options: StoreLoopOptions): HostTierOptions {
  return {
    ...(options.unsafeEvictInUse ? { unsafeEvictInUse: true } : {}),
    ...(options.cache?.policy !== undefined ? { policy: options.cache.policy } : {}),
    ...(options.cache?.storeThreshold !== undefined
      ? { storeThreshold: options.cache.storeThreshold }
      : {}),
  };
}

/** The planner's options: the store's policy, final wait and switches, fed to `observer`. */
export function storePlannerOptions(
  options: StoreLoopOptions,
  observer: PlannerObserver,
  recorder: TraceRecorder | undefined,
): PlannerOptions {
  return {
    policy: options.policy ?? 'ready-prefix',
    // The transfer thread unpins each source block as its copy finishes.
    transferUnpins: true,
    ...(options.now ? { now: options.now } : {}),
    ...(options.finalWaitMsMax !== undefined ? { finalWaitMsMax: options.finalWaitMsMax } : {}),
    ...(options.rankAckWaitMsMax !== undefined
      ? { rankAckWaitMsMax: options.rankAckWaitMsMax }
      : {}),
    ...plannerSwitches(options),
    observer,
    ...(recorder || options.onPlanPoint
      ? {
          onPlanPoint: (point: PlanPoint, snap: Readonly<RequestSnapshot>) => {
            if (point === 'snapshot') recorder?.onSnapshot(snap);
            options.onPlanPoint?.(point, snap);
          },
        }
      : {}),
  };
}

/**
 * The planner's observer: the chunk ledger, and beside it on the same feed a
 * traced run's recorder and the fuzzer's cursor check.
 */
export function storeObserver(
  ledger: ChunkLedger,
  recorder: TraceRecorder | undefined,
  onCursorMoved: StoreLoopOptions['onCursorMoved'],
): PlannerObserver {
  return ledgerObserver(
    ledger,
    recorder || onCursorMoved
      ? {
          ...(recorder && {
            chunk: (slot, _generation, group, _chunk, outcome) =>
              recorder.onChunk(slot, group, outcome),
            deferred: (slot, _generation, group, from, to) =>
              recorder.onDeferred(slot, group, to - from),
          }),
          ...(onCursorMoved && { cursorMoved: onCursorMoved }),
        }
      : undefined,
  );
}

/** What the store's lookups and loads take from the options (StoreLoadsDeps). */
export function storeLoadsOptions(
  options: StoreLoopOptions,
): Pick<
  StoreLoadsDeps,
  | 'loadWhileWriting'
  | 'leakOnLoadFailure'
  | 'loadFailurePolicy'
  | 'faultLoadsAfter'
  | 'faultLoads'
  | 'lookupUnsafe'
  | 'onLookupAnswered'
> {
  return {
    loadWhileWriting: options.unsafeLoadWhileWriting ?? false,
    leakOnLoadFailure: options.unsafeLeakOnLoadFailure ?? false,
    loadFailurePolicy: options.loadFailurePolicy ?? 'recompute',
    faultLoadsAfter: options.faultLoadsAfter ?? Infinity,
    faultLoads: options.faultLoads ?? Infinity,
    lookupUnsafe: {
      unsafeEagleTailKept: options.unsafeEagleTailKept ?? false,
      unsafeLastTokenLoaded: options.unsafeLastTokenLoaded ?? false,
    },
    onLookupAnswered: options.onLookupAnswered,
  };
}
