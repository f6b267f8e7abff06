// The cache mode of a trace replay: no threads, no bytes, the host tier's
// index and cache policy alone over the request sequence, like the Mooncake
// paper's Figure 9. Each request makes the calls the store thread makes for a
// request that runs alone (its prefill in one step, so its chunks are stored in
// one job, and it starts after the previous one's copies completed), with the
// same code: HostTier, its policy, the lookup decision and the touch rule.
//
//   lookup at arrival: count the lookup (store threshold), the hit = the
//     maximal prefix of readable chunks (lookupHitTokens), touch every key,
//     read the hit (prepareLoad, completeLoad);
//   store after it: prepareStore of the chunks past the hit, then, if it
//     stored something, touch every key and complete the store. A request
//     whose chunks cannot fit even after evicting every idle entry stores
//     nothing (the store thread drops them for capacity too).
//
// The threaded replay with a window of one request makes exactly these calls,
// so both give the same hits at the same capacity and policy (a test).
import { invariant } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { asksAgain, lookupHitTokens, touchRanges } from '../lookup.js';
import type { LookupGroup } from '../lookup.js';
import { HostTier } from '../tier/host-tier.js';
import type { CachePolicyName } from '../tier/policy/index.js';
import { InvalidArgumentError } from '../errors.js';
import { chunkKeys } from './tokens.js';
import { checkTraceChunk, traceFigures } from './trace.js';
import type { Trace, TraceFigures, TraceRequest } from './trace.js';

export interface CacheReplayOptions {
  /** Tokens per offloaded chunk; must divide the trace's block size. */
  tokensPerChunk: number;
  /** Host tier capacity in tokens, rounded down to whole chunks; 0: unlimited (nothing is evicted). */
  capacityTokens: number;
  /** Default 'lru'. */
  policy?: CachePolicyName;
  /** vLLM's store_threshold; default 1 (every chunk stored). */
  storeThreshold?: number;
  /**
   * The keys of a request's chunks, in chunk order. Default: chunk keys from
   * the hash IDs (chunkKeys). A test passes the token path's keys instead.
   */
  keysOf?: (r: TraceRequest, index: number) => readonly bigint[];
  /** Called after each request with its hit tokens. */
  onRequest?: (index: number, hitTokens: number) => void;
  /** The option name a bad chunk size is reported under; default 'tokensPerChunk'. */
  chunkOption?: string;
}

export interface CacheReplayResult {
  trace: TraceFigures;
  policy: CachePolicyName;
  storeThreshold: number;
  tokensPerChunk: number;
  /** 0: unlimited. */
  capacityTokens: number;
  capacityChunks: number;
  chunksStored: number;
  evictions: number;
  /** Offered chunks the store threshold kept out. */
  admissionSkips: number;
  /** Chunks of requests whose store could not fit the tier at all. */
  chunksDroppedForCapacity: number;
  wallSeconds: number;
}

const GROUP: LookupGroup = { tokensPerChunk: 0, windowChunks: null, eagle: false };

export function replayCache(
  trace: Trace,
  hashing: Hashing,
  options: CacheReplayOptions,
): CacheReplayResult {
  const t0 = performance.now();
  const tpc = options.tokensPerChunk;
  if (!Number.isInteger(tpc) || tpc < 1) {
    throw new InvalidArgumentError(
      options.chunkOption ?? 'tokensPerChunk',
      'must be a positive integer',
    );
  }
  checkTraceChunk(tpc, trace.blockTokens, options.chunkOption ?? 'tokensPerChunk');
  const capacityTokens = options.capacityTokens;
  if (!Number.isSafeInteger(capacityTokens) || capacityTokens < 0) {
    throw new InvalidArgumentError(
      'capacityTokens',
      'must be a non-negative integer (0: unlimited)',
    );
  }
  let promptTokens = 0;
  let chunksMax = 0;
  for (const r of trace.requests) {
    promptTokens += r.inputLength;
    chunksMax += Math.floor(r.inputLength / tpc);
  }
  // Unlimited: room for every chunk the trace could ever store.
  const capacityChunks =
    capacityTokens === 0 ? Math.max(1, chunksMax) : Math.floor(capacityTokens / tpc);
  if (capacityChunks < 1) {
    throw new InvalidArgumentError(
      'capacityTokens',
      `${capacityTokens} tokens hold no ${tpc}-token chunk (0 means unlimited)`,
    );
  }
  const policy = options.policy ?? 'lru';
  const storeThreshold = options.storeThreshold ?? 1;
  const tier = new HostTier(capacityChunks, { policy, storeThreshold });
  const groups = [{ ...GROUP, tokensPerChunk: tpc }];
  const keysOf =
    options.keysOf ?? ((r: TraceRequest) => chunkKeys(hashing, r, trace.blockTokens, tpc));
  let hitTokens = 0;
  let dropped = 0;
  trace.requests.forEach((r, index) => {
    const keys = keysOf(r, index);
    const out = replayRequest(tier, groups, r.inputLength, keys);
    dropped += out.dropped;
    hitTokens += out.hit * tpc;
    options.onRequest?.(index, out.hit * tpc);
  });
  const s = tier.stats();
  return {
    trace: traceFigures(trace.requests.length, promptTokens, hitTokens),
    policy,
    storeThreshold,
    tokensPerChunk: tpc,
    capacityTokens,
    capacityChunks,
    chunksStored: s.stores,
    evictions: s.evictions,
    admissionSkips: tier.admissionSkips,
    chunksDroppedForCapacity: dropped,
    wallSeconds: (performance.now() - t0) / 1000,
  };
}

/**
 * One request's tier calls, as the store thread makes them (see the file
 * comment): its hit in chunks, and the chunks it could not store at all.
 */
function replayRequest(
  tier: HostTier,
  groups: readonly LookupGroup[],
  numTokens: number,
  keys: readonly bigint[],
): { hit: number; dropped: number } {
  const tpc = groups[0]!.tokensPerChunk;
  tier.recordLookup(keys);
  const result = lookupHitTokens(
    groups,
    { numTokens, keys: [keys], maxLoadTokens: Math.floor(numTokens / tpc) * tpc },
    (k) => tier.state(k),
  );
  // Nothing is being written or read between requests: nothing can defer.
  if (asksAgain(result)) invariant(false, 'a lone request never defers');
  const hit = result / tpc;
  for (const t of touchRanges(groups, [keys.length], result)) tier.touch(keys.slice(t.from, t.to));
  if (hit > 0) {
    const read = keys.slice(0, hit);
    tier.prepareLoad(read);
    tier.completeLoad(read);
  }
  if (hit === keys.length) return { hit, dropped: 0 };
  const out = tier.prepareStore(keys.slice(hit));
  if (!out.ok) return { hit, dropped: keys.length - hit };
  if (out.keysToStore.length > 0) {
    tier.touch(keys);
    tier.completeStore(out.keysToStore);
  }
  return { hit, dropped: 0 };
}
