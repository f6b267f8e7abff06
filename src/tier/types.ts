// The offloading manager contract the store planner relies on. `keysToStore`
// is an order-preserving subsequence of the offered keys and `slots[i]` is the
// destination of `keysToStore[i]`; a key becomes visible to lookups only at
// `completeStore` (publish after complete).

export type PrepareStoreResult =
  | {
      readonly ok: true;
      /** Offered keys the tier will write, in offer order (present or in-flight keys are skipped). */
      readonly keysToStore: readonly bigint[];
      /** Tier slot of each key in keysToStore. */
      readonly slots: readonly number[];
      /** Keys evicted to make room. */
      readonly evicted: readonly bigint[];
    }
  | {
      readonly ok: false;
      readonly reason: 'cannot-allocate';
      /** Slots that were needed beyond the free ones. */
      readonly needed: number;
      /** Entries that could have been evicted. */
      readonly evictable: number;
    };

/**
 * A tier's answer for one key: 'hit' (stored, readable), 'miss', 'pending'
 * (present, not readable yet: being written, or read by another load) or
 * 'retry' (the tier cannot say now, e.g. a lower level has not answered yet:
 * nothing is known, ask again later; vLLM's LookupResult.RETRY).
 */
export type LookupState = 'hit' | 'pending' | 'miss' | 'retry';

export interface TierEvent {
  readonly kind: 'stored' | 'removed';
  readonly keys: readonly bigint[];
}

export interface OffloadTier {
  readonly capacityChunks: number;
  /** Length of the prefix of `keys` that is stored and readable. */
  lookup(keys: readonly bigint[]): number;
  state(key: bigint): LookupState;
  /**
   * Marks keys recently used (vLLM's touch). A tier with no recency order
   * leaves it out, and then nobody builds the key lists (the planner would
   * otherwise read every key of a request after each of its stores). The
   * array is lent for the call only: a tier must not keep it.
   */
  touch?(keys: readonly bigint[]): void;
  /**
   * One sighting of every key of an answered lookup (a lookup answered "ask
   * again later" is not one): what a store threshold counts. A tier without
   * one leaves it out.
   */
  recordLookup?(keys: readonly bigint[]): void;
  prepareStore(keys: readonly bigint[]): PrepareStoreResult;
  completeStore(keys: readonly bigint[], success?: boolean): void;
  /** Protects readable keys from eviction while they are read; returns their slots. */
  prepareLoad(keys: readonly bigint[]): number[];
  completeLoad(keys: readonly bigint[]): void;
  slotOf(key: bigint): number | undefined;
  takeEvents(): TierEvent[];
  stats(): TierStats;
  /**
   * vLLM's reset_cache: every entry leaves the index at once (nothing is
   * readable, nothing pending). An entry being written or read keeps its
   * slot *retired* until its job ends and gives it back with releaseRetired:
   * a copy in flight must not find its slot reused. A tier without it cannot
   * be reset (StorePlanner.reset refuses).
   */
  reset?(): void;
  /** Gives back the retired slots of a job that was in flight at a reset (one call per job and slot). */
  releaseRetired?(slots: readonly number[]): void;
  /**
   * A store job failed while a copy may still be writing (a tensor-parallel
   * rank that has not reported): its keys being written leave the index and
   * their slots are retired, as at a reset, until releaseRetired gives them
   * back. Returns those slots. Keys not being written are left alone.
   */
  abandonStore?(keys: readonly bigint[]): number[];
}

export interface TierStats {
  readonly capacityChunks: number;
  readonly used: number;
  readonly writing: number;
  readonly reading: number;
  readonly evictable: number;
  readonly stores: number;
  readonly evictions: number;
  readonly allocationFailures: number;
  /** Slots held by jobs that were in flight at a reset, until they end. */
  readonly retired?: number;
}
