// The store role's lookup and load decisions as functions of what they read
// (StoreLoads in store-loads.ts keeps the state and sends the answers): the one
// lookup decision over the host tier's state within the request's cap, whether
// the levels below host must resolve first, and how much of a load whose copy
// failed part-way the request holds.
import type { Config } from '../config.js';
import { rankShard } from '../copy.js';
import { invariant } from '../errors.js';
import { asksAgain, loadPlan, loadedPrefixChunks, lookupHitTokens } from '../lookup.js';
import type {
  ChunkState,
  ChunkStateOf,
  LookupRequest,
  LookupResult,
  LookupUnsafe,
} from '../lookup.js';
import type { TransferCompletion } from './backend.js';
import type { LowerLookups } from './lower-lookup.js';
import type { DecodedLookup } from './lookup-record.js';

/** A hit protected for its load (StoreLoads' lock). */
export interface HitLock {
  readonly keys: bigint[];
  /** Per loaded (group, chunk), group-major: tier slot. */
  readonly slots: number[];
  readonly chunks: { group: number; chunk: number }[];
  readonly hit: number;
  /** The load entry each chunk's blocks start at, and past the last (filled by load()). */
  readonly entryStarts: number[];
  /** The store's reset count when the hit was answered: from an earlier one, its slots are retired. */
  readonly resets: number;
}

export /** What a lookup decided, and what it asked for. */
interface LookupDecision {
  readonly request: LookupRequest;
  /** Hit tokens, or DEFER. */
  readonly result: LookupResult;
  /** The hit in tokens (0 when deferred). */
  readonly hitTokens: number;
  readonly state: ChunkStateOf;
  /** Tokens per chunk (every group's, for the runtime's loads). */
  readonly tpc: number;
  /** Chunks the request asks for. */
  readonly asked: number;
}

/** The one lookup decision over the host tier's state, in whole chunks within the request's cap. */
export function decideLookup(
  config: Config,
  decoded: DecodedLookup,
  state: ChunkStateOf,
  lookupUnsafe: LookupUnsafe,
): LookupDecision {
  const groups = config.groups;
  const { numTokens, keys, maxLoadTokens, skipReadingPrefixCache } = decoded;
  const tpc = groups[0]!.tokensPerChunk;
  // The runtime loads whole chunks, so the lookup itself must only consider
  // hits that end on a chunk boundary: rounding an unaligned hit down after
  // the fact would move a sliding-window group's window onto chunks that
  // were never checked (the store then threw on a key it could not load).
  const anyWindow =
    !lookupUnsafe.unsafeLastTokenLoaded && groups.some((g) => g.windowChunks !== null);
  const loadable = Math.min(numTokens - (anyWindow ? 1 : 0), maxLoadTokens ?? Infinity);
  const request = {
    numTokens,
    keys,
    maxLoadTokens: Math.floor(Math.max(0, loadable) / tpc) * tpc,
    skipReadingPrefixCache,
    maxRecomputePendingTokens: config.maxRecomputePendingTokens,
  };
  const result = groups.every((g) => g.tokensPerChunk === tpc)
    ? lookupHitTokens(groups, request, state, lookupUnsafe)
    : 0;
  invariant(
    asksAgain(result) || result % tpc === 0,
    'a runtime lookup hit ends on a chunk boundary',
  );
  invariant(
    asksAgain(result) || result <= request.maxLoadTokens,
    'a runtime lookup hit is within the cap',
  );
  // What the request asks for, in chunks: up to its cap (and the EAGLE tail
  // chunk a widened query reads).
  const capChunks =
    maxLoadTokens === undefined
      ? Infinity
      : Math.floor(maxLoadTokens / tpc) + (groups.some((g) => g.eagle) ? 1 : 0);
  const asked = Math.min(capChunks, ...keys.map((k) => k.length));
  return { request, result, hitTokens: asksAgain(result) ? 0 : result, state, tpc, asked };
}

/**
 * Below a host prefix shorter than asked: the lower levels resolve (and
 * promote) first; the request asks again meanwhile ('retry' while a level
 * has not answered, 'pending' while an entry is on its way up; null: answer
 * now). Not for a request that reads nothing.
 */
export function lowerMustWait(
  lower: LowerLookups,
  config: Config,
  decoded: DecodedLookup,
  d: LookupDecision,
  lookupUnsafe: LookupUnsafe,
): ReturnType<LowerLookups['mustWait']> {
  const { force, skipReadingPrefixCache, keys, tag } = decoded;
  if (force || skipReadingPrefixCache || d.hitTokens / d.tpc >= d.asked) {
    return null;
  }
  const groups = config.groups;
  const prefixHit = (present: (k: bigint) => boolean) => {
    const t = lookupHitTokens(
      groups,
      d.request,
      (k) => (present(k) ? 'hit' : 'miss'),
      lookupUnsafe,
    );
    return asksAgain(t) ? 0 : Math.floor(t / d.tpc);
  };
  const view = { count: d.asked, key: (g: number, c: number) => keys[g]![c]!, prefixHit };
  return lower.mustWait(tag, view);
}

/**
 * Entries (blocks, in task order) a failed rank copied wholly before its
 * copy stopped: its bytes over its shard's bytes per block. A rank with an
 * empty shard copies nothing and never fails part-way.
 */
export function copiedEntries(config: Config, c: TransferCompletion): number {
  const { ranks, rankLayout, bytesPerBlock } = config;
  if (ranks === 1) return Math.floor(c.bytes / bytesPerBlock);
  const { from, to } = rankShard(bytesPerBlock / 4, ranks, rankLayout, c.rank ?? 0);
  return to === from ? 0 : Math.floor(c.bytes / ((to - from) * 4));
}

/**
 * The prefix of a completed load's hit, in chunks, that every group holds
 * soundly: the whole hit when every rank's copy succeeded; else the chunks
 * wholly copied (by every rank) before the first entry that was not.
 */
export function loadedChunks(config: Config, lock: HitLock, copied: number): number {
  const groups = config.groups;
  const plans = loadPlan(groups, 0, lock.hit * groups[0]!.tokensPerChunk);
  const failedAt = plans.map((p) => p.endChunk);
  let i = 0;
  while (i < lock.chunks.length && lock.entryStarts[i + 1]! <= copied) i += 1;
  // Chunk i is the first not wholly copied; in its group and every later one nothing from there on.
  for (let j = i; j < lock.chunks.length; j += 1) {
    const { group, chunk } = lock.chunks[j]!;
    failedAt[group] = Math.min(failedAt[group]!, chunk);
  }
  return loadedPrefixChunks(groups, plans, failedAt);
}

export /** Every key's state now, frozen (for a hook that runs after the state moved on). */
function snapshotState(keys: readonly (readonly bigint[])[], state: ChunkStateOf): ChunkStateOf {
  const frozen = new Map<bigint, ChunkState>();
  for (const ks of keys) for (const k of ks) frozen.set(k, state(k));
  return (k) => frozen.get(k) ?? state(k);
}
