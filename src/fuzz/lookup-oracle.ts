// The runtime fuzzer's check of the load path (oracle invariant 7), at the
// moment the store role answers a lookup (StoreLoopOptions.onLookupAnswered):
// the answer must be the shared lookup decision (src/lookup.ts) over the tier
// state it read, with the request's limits applied the way the runtime loads
// (whole chunks, the last token recomputed with a window, the cap rounded
// down to chunks, 0 when the request skips reading); and every chunk a hit
// protects for its load must hold its key's bytes in the tier, whole, read
// here from the tier arena rather than taken from the store's bookkeeping.
import type { Config } from '../config.js';
import { tierChunkMatches } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import { lookupHitTokens } from '../lookup.js';
import type { LookupResult } from '../lookup.js';
import type { LookupAnswered } from '../runtime/store-loads.js';
import type { LookupState } from '../tier/types.js';
import type { InvariantName } from './oracle.js';

export interface LookupOracleViews {
  readonly config: Config;
  readonly tier: Uint32Array;
  readonly geometry: ArenaGeometry;
}

/** The decision the runtime's lookup must give for `a.lookup` over `a.state`. */
export function expectedLookupAnswer(config: Config, a: LookupAnswered): LookupResult {
  const { lookup } = a;
  const tpc = config.groups[0]!.tokensPerChunk;
  // The runtime loads one chunk count for every group: other configs hit nothing.
  if (!config.groups.every((g) => g.tokensPerChunk === tpc)) return 0;
  const window = config.groups.some((g) => g.windowChunks !== null);
  const loadable = Math.min(lookup.numTokens - (window ? 1 : 0), lookup.maxLoadTokens ?? Infinity);
  return lookupHitTokens(
    config.groups,
    {
      numTokens: lookup.numTokens,
      keys: lookup.keys,
      maxLoadTokens: Math.floor(Math.max(0, loadable) / tpc) * tpc,
      skipReadingPrefixCache: lookup.skipReadingPrefixCache,
    },
    a.state,
  );
}

/**
 * The first violation of invariant 7 in one answer, or undefined. With
 * load-while-writing on, chunks being written count as hits on purpose, so
 * only the decision is checked (the engine's load check finds the bytes).
 */
export function lookupAnswerViolation(
  views: LookupOracleViews,
  a: LookupAnswered,
  tier: { state(key: bigint): LookupState },
  loadWhileWriting: boolean,
): { invariant: InvariantName; message: string } | undefined {
  if (a.lower) return undefined; // deferred for the levels below host: not a lookup decision
  const { config } = views;
  const { lookup } = a;
  const expected = expectedLookupAnswer(config, a);
  if (a.answer !== expected) {
    return {
      invariant: 'load-decision',
      message: `lookup of request ${lookup.tag} (${lookup.numTokens} tokens, cap ${lookup.maxLoadTokens ?? 'none'}, skip ${lookup.skipReadingPrefixCache}, force ${lookup.force}) answered ${a.answer}, the lookup decides ${expected}`,
    };
  }
  if (loadWhileWriting) return undefined;
  const positions = Array.from({ length: config.blocksPerChunk }, (_, p) => p);
  for (const c of a.locked) {
    if (
      tier.state(c.key) !== 'hit' ||
      !tierChunkMatches(views.tier, views.geometry, c.slot, c.key, positions)
    ) {
      return {
        invariant: 'mispairing',
        message: `lookup of request ${lookup.tag} hit chunk ${c.group}:${c.chunk}, but tier slot ${c.slot} does not hold key ${c.key.toString(16)} whole`,
      };
    }
  }
  return undefined;
}
