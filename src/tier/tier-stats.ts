// Per-level counters in shared memory: one BigInt64 word per (level, field),
// written only by the store thread (it owns every level) with Atomics.store,
// read by main for stats(), --json and /metrics.
import { TIER_COUNTER_FIELDS, TIER_NAMES, zeroCounters } from './lower.js';
import type { LowerTierName, TierCounters, TierName } from './lower.js';

/** What a level below host memory is, beside its counters. */
export interface LowerTierFlags {
  /** Entries carry a tag under the deployment secret (false: anyone who can write there can change them). */
  readonly authenticated: boolean;
  /** off: not configured; degraded: not doing its job now; ok. */
  readonly state: 'off' | 'ok' | 'degraded';
  /** While degraded: why (an open that failed, the last error), one line without credentials. */
  readonly problem?: string;
}

export type LowerTierReport = TierCounters & LowerTierFlags;

export interface PerTierCounters {
  host: TierCounters;
  disk: LowerTierReport;
  redis: LowerTierReport;
}

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

/**
 * A snapshot of every level's counters; `configured` names the lower levels
 * in use and `authenticated` whether their entries carry a tag.
 */
export function readTierStats(
  view: BigInt64Array,
  configured: ReadonlySet<LowerTierName> = new Set(),
  authenticated = false,
  problems: ReadonlyMap<LowerTierName, string> = new Map(),
): PerTierCounters {
  const read = (tier: TierName) => {
    const c = zeroCounters();
    TIER_COUNTER_FIELDS.forEach((f, i) => (c[f] = Number(Atomics.load(view, word(tier, i)))));
    return c;
  };
  const lower = (tier: LowerTierName): LowerTierReport => {
    const c = read(tier);
    const on = configured.has(tier);
    const degraded = on && c.degraded === 1;
    const problem = problems.get(tier);
    return {
      ...c,
      authenticated: on && authenticated,
      state: !on ? 'off' : degraded ? 'degraded' : 'ok',
      ...(degraded && problem !== undefined ? { problem } : {}),
    };
  };
  return { host: read('host'), disk: lower('disk'), redis: lower('redis') };
}
