// Runtime counters: each role keeps plain local counters and publishes them to
// its own words of the stats buffer with Atomics.store (one writer per word);
// main reads a snapshot with Atomics.load.
import { STATS, STAT_INDEX } from './thread-words.js';
import type { StatName } from './thread-words.js';
import type { PerTierCounters } from '../tier/tier-stats.js';
import type { RuntimeMemory } from './memory.js';
import type { EventStats } from '../events/hub.js';
import { pinsOutstanding } from '../leaks.js';
import { readTierStats } from '../tier/tier-stats.js';
import type { LowerTierName } from '../tier/lower.js';
import { readRuntimeMemory } from './memory.js';
import type { RuntimeViews } from './buffers.js';

export function publishStat(stats: BigInt64Array, name: StatName, value: number): void {
  Atomics.store(stats, STAT_INDEX[name], BigInt(Math.trunc(value)));
}

export function readStat(stats: BigInt64Array, name: StatName): number {
  return Number(Atomics.load(stats, STAT_INDEX[name]));
}

export function readAllStats(stats: BigInt64Array): Record<StatName, number> {
  const out = {} as Record<StatName, number>;
  for (const s of STATS) out[s.name] = readStat(stats, s.name);
  return out;
}

export interface RuntimeStats {
  requests: number;
  completed: number;
  aborted: number;
  preemptions: number;
  chunksStored: number;
  chunksDeferred: number;
  /** Token-ready chunks the cursor passed unstored (legacy-zip's holes); 0 under ready-prefix. */
  chunksSkippedUnready: number;
  chunksDeferredThenStored: number;
  /** Store offers the tier could not allocate; the same chunks were offered again on a later pass. */
  allocationRetries: number;
  tierHits: number;
  bytesCopied: number;
  pinsOutstanding: number;
  snapshotRetries: number;
  jobsInFlight: number;
  tierUsed: number;
  tierCapacity: number;
  holes: number;
  mismatches: number;
  chunksDroppedForCapacity: number;
  /** Token-ready chunks of ended requests whose keys or block IDs never came (counted, never silent). */
  chunksDroppedUnready: number;
  /** Sliding-window chunks never copied because no aligned hit can use them (vLLM's alignment filter; never a hole). */
  chunksUnreachable: number;
  /** Tier lookups answered "ask again later" because an entry they needed was being written or loaded (retries apart). */
  lookupsDeferred: number;
  /** Tier lookups answered "retry": a level below the host had not answered yet for a key they need (nothing known). */
  lookupsRetried: number;
  /** Loads with a chunk that could not be loaded: a failed copy, or a level below the host refused it on its way up. */
  loadFailures: number;
  /** Tokens of those hits from the first failed chunk on, recomputed (loadFailurePolicy 'recompute'; never from token 0 unless a window needs it). */
  loadFailureTokensRecomputed: number;
  /** Requests failed with LoadFailedError by a load failure (loadFailurePolicy 'fail'). */
  requestsFailedByLoad: number;
  /** Malformed submit-ring records the engine refused (truncated, out of range, a duplicate id). */
  recordsRefused: number;
  /** Longest an admission lookup waited for the store's answer (ms); the engine keeps stepping meanwhile. */
  lookupWaitMsMax?: number;
  /** Engine steps planned while at least one admission lookup was unanswered (the lookup did not hold them back). */
  stepsPlannedDuringLookups?: number;
  /** Resets (vLLM's reset_cache) the store ran. */
  resets?: number;
  /** Chunks of store jobs in flight at a reset: copied, never published; their requests store them again. */
  chunksDiscardedByReset?: number;
  /** Chunk stores the host tier's store threshold kept out (vLLM's stores_skipped); 0 without a threshold. */
  storesBelowThreshold: number;
  /** Lookup calls the store answered (deferrals included) and the time it spent on them: vLLM's synchronous lookup delay. */
  lookupCalls: number;
  lookupCallSeconds: number;
  /** Lookups answered "ask again later" and later resolved, and the time from the first deferral to the answer: vLLM's asynchronous lookup delay. */
  lookupsResolvedAfterDefer: number;
  lookupDeferredSeconds: number;
  /** Store jobs whose copy failed: each failed its own job only (its chunks counted below). */
  jobsTransferFailed: number;
  /** Chunks of those jobs: not stored, counted, never silent. */
  chunksTransferFailed: number;
  /** Store jobs failed as a whole because a tensor-parallel rank did not acknowledge within rankAckWaitMsMax. */
  rankAckTimeouts: number;
  /** Rank acknowledgements that came after their job was failed by that bound. */
  rankAcksLate: number;
  /** Store jobs the planner holds (dispatched, not completed): 0 at rest, else a leak. */
  jobsHeld: number;
  /** Per level (host, disk, redis): the same counters under the same names; zeros for a level not configured. */
  tiers: PerTierCounters;
  /** Each worker's heap and external memory as it last sampled them (every 250 ms), main's and the process's RSS now. */
  memory: RuntimeMemory;
  /** KV events published and lost, with `events` on. */
  events?: EventStats;
  /** Why the runtime stopped, once a worker failed (also failedWith, /healthz and close()'s rejection). */
  failure?: { code: string; role: string; message: string };
}

/**
 * stats() but for what only main knows (KV events, the failure): the
 * counters `s` read from the stats words, the pins, each level's and each
 * worker's figures.
 */
/** What the tiers' counters are read with: which lower levels were configured, with a secret, and why any is degraded. */
export interface TierReading {
  readonly configured?: ReadonlySet<LowerTierName>;
  readonly authenticated?: boolean;
  readonly problems?: ReadonlyMap<LowerTierName, string>;
}

export function runtimeCounters(
  views: RuntimeViews,
  s: Readonly<Record<StatName, number>>,
  tiers: TierReading = {},
): Omit<RuntimeStats, 'events' | 'failure'> {
  return {
    requests: s.requests,
    completed: s.completed,
    aborted: s.aborted,
    preemptions: s.preemptions,
    chunksStored: s.chunksStored,
    chunksDeferred: s.chunksDeferred,
    chunksSkippedUnready: s.chunksSkippedUnready,
    chunksDeferredThenStored: s.chunksDeferredThenStored,
    allocationRetries: s.allocationRetries,
    tierHits: s.tierHits,
    bytesCopied: s.bytesCopied,
    pinsOutstanding: pinsOutstanding(views.state),
    snapshotRetries: s.snapshotRetries,
    jobsInFlight: s.jobsInFlight,
    tierUsed: s.tierUsed,
    tierCapacity: views.config.tierChunks,
    holes: s.holes,
    mismatches: s.loadMismatches + s.verifyMismatches,
    chunksDroppedForCapacity: s.chunksDroppedForCapacity,
    chunksDroppedUnready: s.chunksDroppedUnready,
    chunksUnreachable: s.chunksUnreachable,
    lookupsDeferred: s.lookupsDeferred,
    lookupsRetried: s.lookupsRetried,
    loadFailures: s.loadFailures,
    loadFailureTokensRecomputed: s.loadFailureTokensRecomputed,
    requestsFailedByLoad: s.requestsFailedByLoad,
    storesBelowThreshold: s.storesBelowThreshold,
    lookupCalls: s.lookupCalls,
    lookupCallSeconds: s.lookupCallUs / 1e6,
    lookupsResolvedAfterDefer: s.lookupsResolvedAfterDefer,
    lookupDeferredSeconds: s.lookupDeferredUs / 1e6,
    lookupWaitMsMax: s.lookupWaitMsMax,
    stepsPlannedDuringLookups: s.stepsPlannedDuringLookups,
    recordsRefused: s.recordsRefused,
    resets: s.resets,
    chunksDiscardedByReset: s.chunksDiscardedByReset,
    jobsTransferFailed: s.jobsTransferFailed,
    chunksTransferFailed: s.chunksTransferFailed,
    rankAckTimeouts: s.rankAckTimeouts,
    rankAcksLate: s.rankAcksLate,
    jobsHeld: s.jobsHeld,
    tiers: readTierStats(views.tierStats, tiers.configured, tiers.authenticated, tiers.problems),
    memory: readRuntimeMemory(views.memory),
  };
}
