// What a level below the host tier offers the cascade, and the counters every
// level keeps under the same names (stats(), --json and /metrics use them).
// A lower level is best-effort by contract: a store it cannot take is dropped
// and counted, a load it cannot serve is a miss, and nothing it does blocks
// the store path or answers a byte that failed its checks.
import type { LookupState } from './types.js';

export const TIER_NAMES = ['host', 'disk', 'redis'] as const;
export type TierName = (typeof TIER_NAMES)[number];
export type LowerTierName = Exclude<TierName, 'host'>;

/** Per-level counters, in chunks (one offload key of one group) and bytes. */
export const TIER_COUNTER_FIELDS = [
  /** Entries written and published at this level. */
  'storedChunks',
  /** Keys a lookup found readable here (for lower levels: read and checked; promoted unless discarded). */
  'hitChunks',
  /**
   * Lower levels: chunks read and checked for a lookup that no answer used,
   * so never promoted: the lookup was answered first (its wait or the budget
   * ran out, or its request ended), a failed read ended the hit before them,
   * or host memory had no room.
   */
  'discardedChunks',
  /** Keys a lookup asked this level for and it did not have (or could not serve). */
  'missChunks',
  /** Lookups that found a key here still being written (the request looks again later). */
  'pendingChunks',
  'bytesWritten',
  'bytesRead',
  /** Failed operations: I/O errors, timeouts, refused connections, bad entries found. */
  'errors',
  /** Stores not made: over the in-flight bound, circuit open, level full, or failed. */
  'droppedChunks',
  'evictions',
  /** 1 while the circuit breaker is open (stores skipped, lookups miss). */
  'circuitOpen',
  /** Stores refused because the level is full (byte cap, free-space floor, OOM reply). */
  'fullChunks',
  /** Commands that got no answer within the level's timeout (each is also an error). */
  'timeouts',
  /** Values whose authentication tag was wrong or missing: never served, deleted (each is also an error). */
  'authFailures',
  /** Stores not sent because the level is known to hold the chunk already (written or found by this process). */
  'skippedChunks',
  /** 1 while the level is not doing its job: Redis not connected or its circuit open, disk failing its writes. */
  'degraded',
  /**
   * Lookups that found, under the key word asked for, a sound entry of
   * another chunk (the whole 256-bit identity differs): never served, a miss.
   */
  'keyCollisions',
  /** Entries found from before the scope's last shared reset (another epoch): never served, deleted. */
  'retiredChunks',
  /** Stores refused because the level's write queue or in-flight bound was full. */
  'busyChunks',
  /** Stores not sent because the level was unreachable (circuit open, no connection, closing). */
  'unavailableChunks',
  /** Time spent storing at this level (host: store copies; disk, Redis: writes), in microseconds. */
  'storeUs',
  /** Time spent loading from this level (host: load copies; disk, Redis: reads and checks), in microseconds. */
  'loadUs',
  /** Tokens of lookup hits this level served (counted in the first full-attention group). */
  'hitTokens',
  /** Gauge: entries held (0 where the level cannot tell: Redis). */
  'entries',
  /** Gauge: bytes of those entries. */
  'bytesUsed',
  /** Gauge: the level's capacity in bytes (0 where it has none of its own: Redis). */
  'capacityBytes',
  /** Gauge: stores accepted and not yet visible (copies, queued and in-flight writes). */
  'storesPending',
] as const;

/** Fields that are levels or states (gauges), not running totals. */
export const TIER_GAUGE_FIELDS: ReadonlySet<TierCounterField> = new Set([
  'circuitOpen',
  'entries',
  'bytesUsed',
  'capacityBytes',
  'storesPending',
  'degraded',
]);
export type TierCounterField = (typeof TIER_COUNTER_FIELDS)[number];
export type TierCounters = Record<TierCounterField, number>;

export function zeroCounters(): TierCounters {
  const c = {} as TierCounters;
  for (const f of TIER_COUNTER_FIELDS) c[f] = 0;
  return c;
}

/** One store's latency, from the offer to the entry being visible at its level. */
export interface TierStoreSample {
  readonly tier: TierName;
  readonly latencyMs: number;
}

export interface LowerTier {
  readonly name: LowerTierName;
  readonly counters: TierCounters;
  /**
   * The scope's epoch as this level last read it: what its stores carry and
   * its loads must match. A shared reset anywhere moves it.
   */
  readonly epoch: bigint;
  /**
   * Reads the scope's epoch from the level (the cascade calls it before each
   * resolution, so a lookup that starts after any instance's shared reset
   * ended serves nothing from before it). Never rejects: a level that cannot
   * answer keeps what it knew.
   */
  refreshEpoch(): Promise<void>;
  /**
   * Shared reset: moves the scope's epoch in the level to a new random value
   * (so every entry of the scope written before, by any instance, is retired)
   * and forgets this instance's index of them. Other scopes are untouched.
   * Resolves once the new epoch is stored; rejects when it could not be.
   */
  retire(): Promise<void>;
  /**
   * States of `keys` in order, stopping after the first miss: the answer is a
   * prefix of hits and pendings, then at most one 'miss'. Never rejects: a
   * level that cannot answer answers 'miss'.
   */
  states(keys: readonly bigint[]): Promise<LookupState[]>;
  /**
   * Offers a sealed value (header + payload) for `key`. Returns at once: the
   * write runs in the background, bounded; a store the level cannot take is
   * dropped and counted. The level keeps `value` until the write ends and
   * never changes it.
   */
  store(key: bigint, value: Buffer): void;
  /** A value for `key` holding `payload`, sealed as this level checks it (header, and its tag with a secret). */
  seal(key: bigint, payload: Uint8Array): Buffer;
  /** The checked payload of `key`, or undefined (miss). A bad entry is deleted. Never rejects. */
  load(key: bigint): Promise<Buffer | undefined>;
  /** Stores still being written. */
  readonly storesInFlight: number;
  /**
   * While the level is degraded (counters.degraded), why: one line, never a
   * credential (an open that failed, the last error). Undefined otherwise.
   */
  readonly problem: string | undefined;
  /** Store latencies since the last call (bounded). */
  takeSamples(): TierStoreSample[];
  /** Entries, their bytes and the capacity, where the level knows them. */
  usage?(): { entries: number; bytesUsed: number; capacityBytes: number };
  /** Entries stored here and gone from here, for KV events (recorded once enabled). */
  readonly events: LevelEventLog;
  /** Waits (bounded by `timeoutMs`) for writes in flight, then releases handles. */
  close(timeoutMs: number): Promise<void>;
}

/** An entry stored at a level or gone from it (evicted, found bad, vanished): what KV events announce. */
export interface LevelEvent {
  readonly kind: 'stored' | 'removed';
  readonly key: bigint;
}

/** Level events kept between two takes; beyond this they are counted as lost. */
const LEVEL_EVENTS_MAX = 1 << 16;

/**
 * A level's entry changes, recorded only once KV events are on (the store
 * loop turns it on): off, each call is one branch.
 */
export class LevelEventLog {
  enabled = false;
  private events: LevelEvent[] = [];
  private lostCount = 0;
  stored(key: bigint): void {
    if (this.enabled) this.add({ kind: 'stored', key });
  }
  removed(key: bigint): void {
    if (this.enabled) this.add({ kind: 'removed', key });
  }
  /** The events since the last take, and how many the bound lost. */
  take(): { events: LevelEvent[]; lost: number } {
    const out = { events: this.events, lost: this.lostCount };
    this.events = [];
    this.lostCount = 0;
    return out;
  }
  private add(e: LevelEvent): void {
    if (this.events.length < LEVEL_EVENTS_MAX) this.events.push(e);
    else this.lostCount += 1;
  }
}

/** Samples kept between two takeSamples calls; beyond this they are not recorded. */
const SAMPLES_MAX = 4096;

export class SampleBuffer {
  private samples: TierStoreSample[] = [];
  constructor(private readonly tier: TierName) {}
  push(latencyMs: number): void {
    if (this.samples.length < SAMPLES_MAX) this.samples.push({ tier: this.tier, latencyMs });
  }
  take(): TierStoreSample[] {
    const out = this.samples;
    this.samples = [];
    return out;
  }
}

/**
 * Test-only switches of the lower levels, each re-creating a failure class
 * its rule prevents, so the failure-class tests (test/failure-classes/) can
 * show the rule is load-bearing. All off by default; never turn one on
 * otherwise. A level ignores the ones that do not apply to it.
 */
export interface LowerTierSwitches {
  /** F7 (disk): the byte cap evicts entries being written or read too. */
  readonly unsafeEvictInUse?: boolean;
  /** F9: a store the level could not take (full, failed, OOM) is marked stored and counted as stored. */
  readonly unsafeAckOnAllocFailure?: boolean;
  /** F11: a value's CRC-32 and authentication tag are not checked before it is served. */
  readonly unsafeSkipChecksum?: boolean;
  /**
   * F12: an entry is visible before its write completed (disk: written in
   * place under its final name and readable at once; Redis: a key whose SET
   * is in flight answers 'hit').
   */
  readonly unsafePublishBeforeComplete?: boolean;
  /** Only the key word of an entry is compared, so a colliding entry is served (see Config.unsafeKeyBits). */
  readonly unsafeKeyWordOnly?: boolean;
}
