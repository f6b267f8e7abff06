// The runtime fuzzer's check of the load path (oracle invariant 7), at the
// moment the store role answers a lookup (StoreLoopOptions.onLookupAnswered):
// the answer must be what the independent specification (spec/lookup-spec.ts,
// which shares no function with src/lookup.ts) allows over the tier state the
// store read, with the request's limits; and every chunk a hit protects for
// its load must hold its key's bytes in the tier, whole, read here from the
// tier arena rather than taken from the store's bookkeeping.
import type { Config } from '../config.js';
import { tierChunkMatches } from '../copy.js';
import type { ArenaGeometry } from '../copy.js';
import type { LookupAnswered } from '../runtime/store-loads.js';
import type { LookupState } from '../tier/types.js';
import type { InvariantName } from './oracle.js';
import { specLookup, specLookupMismatch } from './spec/lookup-spec.js';

export interface LookupOracleViews {
  readonly config: Config;
  readonly tier: Uint32Array;
  readonly geometry: ArenaGeometry;
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
  const why = specLookupMismatch(
    specLookup(config, lookup, a.state),
    a.answer,
    config.maxRecomputePendingTokens,
  );
  if (why !== undefined) {
    return {
      invariant: 'load-decision',
      message: `lookup of request ${lookup.tag} (${lookup.numTokens} tokens, cap ${lookup.maxLoadTokens ?? 'none'}, skip ${lookup.skipReadingPrefixCache}, force ${lookup.force}): ${why}`,
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

/** True when a hit is one only the recompute budget allows: with a budget of 0 the specification would not. */
export function budgetWasUsed(config: Config, a: LookupAnswered): boolean {
  if (a.lower || config.maxRecomputePendingTokens === 0 || typeof a.answer !== 'number') {
    return false;
  }
  return specLookupMismatch(specLookup(config, a.lookup, a.state), a.answer, 0) !== undefined;
}
