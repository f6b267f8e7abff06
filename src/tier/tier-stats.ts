// Per-level counters in shared memory: one BigInt64 word per (level, field),
// written only by the store thread (it owns every level) with Atomics.store,
// read by main for stats(), --json and /metrics.
import { TIER_COUNTER_FIELDS, TIER_NAMES, zeroCounters } from './lower.js';
import type { TierCounters, TierName } from './lower.js';

export type PerTierCounters = Record<TierName, TierCounters>;

export const TIER_STATS_BYTES = TIER_NAMES.length * TIER_COUNTER_FIELDS.length * 8;

function word(tier: TierName, field: number): number {
  return TIER_NAMES.indexOf(tier) * TIER_COUNTER_FIELDS.length + field;
}

export function publishTierCounters(
  view: BigInt64Array,
  tier: TierName,
  counters: Readonly<TierCounters>,
): void {
  TIER_COUNTER_FIELDS.forEach((f, i) => {
    Atomics.store(view, word(tier, i), BigInt(Math.trunc(counters[f])));
  });
}

export function readTierStats(view: BigInt64Array): PerTierCounters {
  const out = {} as PerTierCounters;
  for (const tier of TIER_NAMES) {
    const c = zeroCounters();
    TIER_COUNTER_FIELDS.forEach((f, i) => (c[f] = Number(Atomics.load(view, word(tier, i)))));
    out[tier] = c;
  }
  return out;
}
