// What a store planner is told and what it tells (src/planner.ts runs the
// pass): its options (the policy, the final wait's bound and clock, the
// observer, and the test-only switches, each re-creating a known bug that
// src/fuzz/switches.ts names), the observer's hooks that feed the chunk ledger,
// and the counters it keeps.
import type { StoreJob } from './job.js';
import type { StorePolicy } from './ready.js';
import type { RequestSnapshot } from './roles/store.js';

/** What happened to a chunk of a store window once the cursor moved over it. */
export type ChunkOutcome =
  'stored' | 'present' | 'null' | 'unreachable' | 'dropped' | 'unready' | 'skipped';

/**
 * Optional hooks for drivers that check invariants (runtime, fuzzer, tests);
 * the chunk ledger (src/ledger.ts) is one. Called as methods of the observer,
 * on the store role's thread; they must not write shared state.
 */
export interface PlannerObserver {
  /**
   * A chunk the cursor moved over: dispatched, already in the tier, null (slid
   * out), unreachable (a sliding-window chunk no aligned hit can use, see
   * storeReachable), or dropped for capacity; or a token-ready chunk of an ended request
   * counted in chunksDroppedUnready ('unready': its keys or blocks never came);
   * or a token-ready chunk that was not ready and that a legacy policy passed
   * without a copy ('skipped', counted in chunksSkippedUnready: a hole, never
   * under ready-prefix).
   */
  chunk?(
    slot: number,
    generation: number,
    group: number,
    chunk: number,
    outcome: ChunkOutcome,
  ): void;
  /** Chunks [from, to) of a group were token-ready but not ready at this pass. */
  deferred?(slot: number, generation: number, group: number, from: number, to: number): void;
  /**
   * A group's cursor moved from `from` to `snap.cursor[group]`, at a pass whose
   * window's ready prefix was `ready`.
   */
  cursorMoved?(snap: Readonly<RequestSnapshot>, group: number, from: number, ready: number): void;
  /** Just before an ended request is marked drained: its cursors are final, its blocks still held. */
  draining?(snap: Readonly<RequestSnapshot>): void;
  /** A job completed with success = false (complete()): its chunks were not stored. */
  failed?(job: StoreJob): void;
}

export interface PlannerOptions {
  policy?: StorePolicy;
  observer?: PlannerObserver;
  /**
   * Test-only: skip pinning source blocks. Exists so a test can show that the
   * reuse-mid-copy check fails without pins; never turn it off otherwise.
   */
  unsafeSkipPins?: boolean;
  /**
   * Test-only: skip the re-validation of the snapshot after pinning. Exists so
   * the fuzzer can show that a torn read (block IDs changed between the
   * snapshot and the pins) is caught only by it; never turn it off otherwise.
   */
  unsafeSkipRevalidate?: boolean;
  /**
   * Test-only: turn the end-of-request protocol off. The final pass of an
   * ended request neither waits for its blocks and keys to settle nor counts
   * what is missing: it drains at once, and chunks whose block IDs or keys
   * were still on their way are lost silently (the bug the protocol fixes).
   * Exists so the fuzzer can show it finds that loss; never turn it off otherwise.
   */
  unsafeSkipSettle?: boolean;
  /**
   * Test-only (failure class F2, vLLM #46971): apply the EAGLE trailing-chunk
   * exclusion when choosing the chunks to store but not when moving the
   * cursor, so the cursor passes the held-back chunk and it is never stored.
   * Exists so the failure-class tests and `kvoff fuzz --broken f02` can show
   * the oracle catches it; never turn it on otherwise.
   */
  unsafeEagleCursorUnexcluded?: boolean;
  /**
   * Test-only (failure class F4, vLLM #54288): count a finished request's last
   * sampled token as offloadable, so a chunk ending with it (whose KV was never
   * computed) is stored. Exists so the failure-class tests and
   * `kvoff fuzz --broken f04` can show it is caught; never turn it on otherwise.
   */
  unsafeStoreLastSampledToken?: boolean;
  /**
   * Test-only: a chunk of a job completed with success = false keeps its
   * source blocks pinned (a reference never dropped: failure class F8). Exists
   * so a test can show that the unpin of failed copies is what frees them;
   * never turn it on otherwise.
   */
  unsafeSkipUnpinOnFailure?: boolean;
  /**
   * Test-only: an offer the tier refused (cannot-allocate) is treated as
   * stored: the cursor moves over its chunks and they count as stored
   * (failure class F9). Exists so a test can show that a refusal must leave
   * the cursor where it was; never turn it on otherwise.
   */
  unsafeAckOnAllocFailure?: boolean;
  /**
   * Test-only: chunks deferred at a pass (token-ready, keys or blocks not yet
   * published) are acknowledged at deferral: counted as deferred, and the
   * cursor moves over them, so no later pass stores them (failure class F10).
   * Exists so a test can show that the cursor must stay below deferred
   * chunks; never turn it on otherwise.
   */
  unsafeDropDeferred?: boolean;
  /**
   * Test-only (issue 32's rule-reachability variant): the first reachable
   * sliding-window chunk of each alignment segment is judged unreachable, so
   * the cursor passes it and it is never stored. A bug in the rule itself, not
   * a race: exists so `kvoff fuzz --broken rule-reachability` can show the
   * fuzzer's independent specification finds it; never turn it on otherwise.
   */
  unsafeReachabilityOneShort?: boolean;
  /**
   * Test-only: a store job that was in flight at a reset completes as any
   * other (no job-id threshold): it publishes into the tier the reset
   * emptied, and its retired slots are never given back. Exists so the
   * fuzzer can show the threshold is what keeps bytes stored before a reset
   * from being served after it; never turn it on otherwise.
   */
  unsafePublishStaleJobs?: boolean;
  /**
   * Test-only: with tensor-parallel ranks, a store job completes (publishes,
   * unpins) on its first rank's acknowledgement instead of its last, so an
   * entry is readable while other ranks' shards are still being copied.
   * Exists so the runtime fuzzer can show it finds publication before the
   * last acknowledgement; never turn it on otherwise.
   */
  unsafePublishOnFirstAck?: boolean;
  /**
   * With more than one rank (Config.ranks): how long (ms, on `now`) a store
   * job waits for every rank's acknowledgement before it fails as a whole;
   * default RANK_ACK_WAIT_MS_MAX.
   */
  rankAckWaitMsMax?: number;
  /**
   * How long (ms, on `now`) an ended request waits, without a new key or block
   * ID, for its blocks and keys to settle before what is missing is counted as
   * dropped; default FINAL_WAIT_MS_MAX. 0 drains at the first visit that finds
   * a chunk lagging.
   */
  finalWaitMsMax?: number;
  /**
   * The clock of the final wait, in ms; default performance.now. A
   * deterministic driver (the fuzzer, a test) passes its virtual clock so a
   * schedule replays the same whatever the machine's speed.
   */
  now?: () => number;
  /**
   * The copy releases its own source pins (the threaded transfer role unpins
   * each block as it finishes, before it reports): complete() then neither
   * checks nor releases them. Default false: complete() unpins, as the
   * facade's and the fuzzer's copies do.
   */
  transferUnpins?: boolean;
  /**
   * Called at the points of planning one slot where another role's write can
   * land in real threads: after the snapshot's counts are read ('snapshot')
   * and after the source blocks are pinned, before the snapshot is confirmed
   * ('pinned'). The deterministic simulator runs other roles' steps here (and
   * its oracle reads the snapshot); real threads pass nothing.
   */
  onPlanPoint?: PlanPointListener;
}

/** The planner's test-only switches (src/fuzz/switches.ts says which bug each re-creates). */
type PlannerSwitch = keyof PlannerOptions & `unsafe${string}`;
export type PlannerSwitches = Pick<PlannerOptions, PlannerSwitch>;

const PLANNER_SWITCHES = [
  'unsafeSkipPins',
  'unsafeSkipRevalidate',
  'unsafeSkipSettle',
  'unsafeEagleCursorUnexcluded',
  'unsafeStoreLastSampledToken',
  'unsafeSkipUnpinOnFailure',
  'unsafeAckOnAllocFailure',
  'unsafeDropDeferred',
  'unsafeReachabilityOneShort',
  'unsafePublishStaleJobs',
  'unsafePublishOnFirstAck',
] as const satisfies readonly PlannerSwitch[];
// Every switch of PlannerOptions is in the list (a compile error otherwise).
const everySwitchListed: Exclude<PlannerSwitch, (typeof PLANNER_SWITCHES)[number]> extends never
  ? true
  : never = true;
void everySwitchListed;

/** The planner switches turned on in `o`, for a driver that passes them on to its planner. */
export function plannerSwitches(o: PlannerSwitches): PlannerSwitches {
  const out: PlannerSwitches = {};
  for (const k of PLANNER_SWITCHES) if (o[k] === true) out[k] = true;
  return out;
}

export type PlanPoint = 'snapshot' | 'pinned';
export type PlanPointListener = (point: PlanPoint, snap: Readonly<RequestSnapshot>) => void;

/** Cumulative counters of the store role. */
export interface PlannerCounters {
  passes: number;
  requestsVisited: number;
  jobs: number;
  chunksOffered: number;
  chunksStored: number;
  chunksAlreadyPresent: number;
  chunksSkippedNull: number;
  /** Sliding-window chunks passed without a copy: no hit aligned to the full-attention chunk can use them (vLLM's alignment filter). */
  chunksUnreachable: number;
  /**
   * Chunk-visits where a chunk was token-ready but not ready (its key or blocks
   * lagged). A pass visits a slot only after a publication (its dirty bit), so
   * a chunk waiting on an idle slot is counted once per publication, not per pass.
   */
  chunksDeferred: number;
  /**
   * Token-ready chunks the cursor moved past without storing them, because their
   * key or blocks lagged: a legacy policy's holes (legacy-zip), never deferrals.
   * Always 0 under ready-prefix.
   */
  chunksSkippedUnready: number;
  allocationFailures: number;
  chunksDroppedForCapacity: number;
  /**
   * Token-ready chunks of an ended request that were never ready: their keys
   * or blocks were settled without them, or still missing after the final
   * wait's bound (or the tier refused the request's final offers).
   */
  chunksDroppedUnready: number;
  /** Chunks of jobs completed with success = false: their cursor moved on, so they are counted, never silent. */
  chunksTransferFailed: number;
  /** Resets (vLLM's reset_cache) this planner ran. */
  resets: number;
  /**
   * Chunks of store jobs that were in flight at a reset: their copies end,
   * nothing is published (the tier they were for is gone), and their
   * requests store them again from cursor 0.
   */
  chunksDiscardedByReset: number;
  snapshotRetries: number;
  snapshotsGivenUp: number;
  /** Store jobs failed as a whole because a rank had not acknowledged within rankAckWaitMsMax. */
  rankAckTimeouts: number;
  /** Acknowledgements that arrived after their job's bound had failed it. */
  rankAcksLate: number;
}

export type JobListener = (job: StoreJob) => void;

/** Every counter at 0. */
export function zeroPlannerCounters(): PlannerCounters {
  return {
    passes: 0,
    requestsVisited: 0,
    jobs: 0,
    chunksOffered: 0,
    chunksStored: 0,
    chunksAlreadyPresent: 0,
    chunksSkippedNull: 0,
    chunksUnreachable: 0,
    chunksDeferred: 0,
    chunksSkippedUnready: 0,
    allocationFailures: 0,
    chunksDroppedForCapacity: 0,
    chunksTransferFailed: 0,
    resets: 0,
    chunksDiscardedByReset: 0,
    chunksDroppedUnready: 0,
    snapshotRetries: 0,
    snapshotsGivenUp: 0,
    rankAckTimeouts: 0,
    rankAcksLate: 0,
  };
}
