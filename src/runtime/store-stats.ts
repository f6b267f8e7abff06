// The store loop's figures onto the shared stats and tier-counter words (the
// store thread is their one writer), after every step and before each drained
// event, so main reads them as soon as it hears of an ended request.
import type { ChunkLedger } from '../ledger.js';
import type { StorePlanner } from '../planner.js';
import type { HostTier } from '../tier/host-tier.js';
import type { TierCounters } from '../tier/lower.js';
import { publishTierCounters } from '../tier/tier-stats.js';
import type { EventCapture } from '../events/capture.js';
import type { RuntimeViews } from './buffers.js';
import type { LookupTiming } from './lookup-timing.js';
import type { LowerLookups } from './lower-lookup.js';
import { publishStat } from './stats.js';
import type { StoreLoads } from './store-loads.js';

/** What the store loop counts itself; the rest is read from the parts it holds. */
export interface StoreFigures {
  views: RuntimeViews;
  planner: StorePlanner;
  ledger: ChunkLedger;
  tier: HostTier;
  loads: StoreLoads;
  lower: LowerLookups | undefined;
  capture: EventCapture | undefined;
  lookupTiming: LookupTiming;
  /** The host level's counters, filled in here from the tier and the loads. */
  host: TierCounters;
  jobsInFlight: number;
  bytesCopied: number;
  jobsCompleted: number;
  jobsTransferFailed: number;
  hostStoreUs: number;
}

export function publishStoreStats(f: StoreFigures): void {
  const s = f.views.stats;
  const c = f.planner.counters;
  publishStat(s, 'chunksStored', c.chunksStored);
  publishStat(s, 'resets', c.resets);
  publishStat(s, 'chunksDiscardedByReset', c.chunksDiscardedByReset);
  publishStat(s, 'chunksDeferred', c.chunksDeferred);
  publishStat(s, 'chunksSkippedUnready', c.chunksSkippedUnready);
  publishStat(s, 'chunksDeferredThenStored', f.ledger.deferredThenStored);
  publishStat(s, 'allocationRetries', c.allocationFailures);
  publishStat(s, 'chunksDroppedForCapacity', c.chunksDroppedForCapacity);
  publishStat(s, 'chunksDroppedUnready', c.chunksDroppedUnready);
  publishStat(s, 'chunksUnreachable', c.chunksUnreachable);
  publishStat(s, 'snapshotRetries', c.snapshotRetries);
  publishStat(s, 'bytesCopied', f.bytesCopied);
  publishStat(s, 'jobsInFlight', f.jobsInFlight);
  publishStat(s, 'jobsCompleted', f.jobsCompleted);
  publishStat(s, 'jobsTransferFailed', f.jobsTransferFailed);
  publishStat(s, 'chunksTransferFailed', c.chunksTransferFailed);
  publishStat(s, 'rankAckTimeouts', c.rankAckTimeouts);
  publishStat(s, 'rankAcksLate', c.rankAcksLate);
  publishStat(s, 'jobsHeld', f.planner.jobsHeld);
  publishStat(s, 'tierUsed', f.tier.stats().used);
  publishStat(s, 'holes', f.ledger.holes);
  publishStat(s, 'doubleStores', f.ledger.doubleStores);
  publishStat(s, 'storePasses', c.passes);
  publishStat(s, 'lookupsDeferred', f.loads.deferred);
  publishStat(s, 'lookupsRetried', f.loads.retried);
  publishStat(s, 'loadFailures', f.loads.loadFailures);
  publishStat(s, 'loadFailureTokensRecomputed', f.loads.loadFailureTokensRecomputed);
  publishStat(s, 'requestsFailedByLoad', f.loads.requestsFailedByLoad);
  publishStat(s, 'storesBelowThreshold', f.tier.admissionSkips);
  if (f.capture) {
    publishStat(s, 'eventsQueued', f.capture.queue.queued);
    publishStat(s, 'eventsDropped', f.capture.queue.dropped);
  }
  const t = f.tier.stats();
  const host = f.host;
  host.storedChunks = t.stores;
  host.evictions = t.evictions;
  host.bytesWritten = f.bytesCopied;
  host.bytesRead = f.loads.bytesRead;
  host.droppedChunks = c.chunksDroppedForCapacity;
  host.fullChunks = c.allocationFailures;
  host.storeUs = f.hostStoreUs;
  host.loadUs = f.loads.loadUs;
  host.hitTokens = f.loads.hitTokens.host;
  const chunkBytes = f.views.config.blocksPerChunk * f.views.config.bytesPerBlock;
  host.entries = t.used;
  host.bytesUsed = t.used * chunkBytes;
  host.capacityBytes = t.capacityChunks * chunkBytes;
  host.storesPending = t.writing;
  publishTierCounters(f.views.tierStats, 'host', host);
  for (const level of f.lower?.cascade.levels ?? []) {
    const counters: TierCounters = {
      ...level.counters,
      hitTokens: f.loads.hitTokens[level.name],
      storesPending: level.storesInFlight,
      ...level.usage?.(),
    };
    publishTierCounters(f.views.tierStats, level.name, counters);
  }
  const lt = f.lookupTiming;
  publishStat(s, 'lookupCalls', lt.syncCount);
  publishStat(s, 'lookupCallUs', lt.syncSeconds * 1e6);
  publishStat(s, 'lookupsResolvedAfterDefer', lt.resolvedCount);
  publishStat(s, 'lookupDeferredUs', lt.resolvedSeconds * 1e6);
}
