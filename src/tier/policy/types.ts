// The contract between the host tier and its cache policy. The tier owns the
// entries' keys, slots and reference counts (being written, readable and idle,
// being read) and every rule about them: only idle readable entries are ever
// evicted, and only the tier says which ones are. A policy owns the order of
// the entries (its queues, ghost lists and counters) and, asked for victims,
// picks them among the entries the tier lets it take.

/** refCount of an entry being written: invisible to lookups, never evicted. */
export const WRITING = -1;

/** One host-tier entry as its policy sees it. */
export interface PolicyEntry {
  readonly key: bigint;
  /** WRITING (-1), 0 readable and idle, > 0 being read. Written by the tier only. */
  refCount: number;
  /** Links of the policy queue that holds it; null while in none. Policy-owned. */
  prev: PolicyEntry | null;
  next: PolicyEntry | null;
  /** Which of the policy's queues holds it (policy-defined). Policy-owned. */
  queue: number;
  /** Access counter of frequency-aware policies. Policy-owned. */
  freq: number;
}

/** The cache policies kvoff ships, by their --cache-policy names. */
export const CACHE_POLICIES = ['lru', 'arc', 's3-fifo'] as const;
export type CachePolicyName = (typeof CACHE_POLICIES)[number];

export interface CachePolicy {
  readonly name: CachePolicyName;
  /** A new entry (prepareStore), being written. */
  insert(e: PolicyEntry): void;
  /** An entry leaves without being evicted (its store failed). */
  remove(e: PolicyEntry): void;
  /** Its copy completed: it is readable from now on. */
  published(e: PolicyEntry): void;
  /**
   * vLLM's touch: `keys` in prefix order, as the store path passes them after
   * a lookup and after a store (the policy decides the order it walks them).
   * Keys the tier does not hold are passed too: a policy with ghost lists
   * learns from them. The array is lent for the call only.
   */
  touch(keys: readonly bigint[], entries: ReadonlyMap<bigint, PolicyEntry>): void;
  /** A load reads it (prepareLoad): once per request whose hit covers it. */
  read(e: PolicyEntry): void;
  /**
   * Exactly `n` victims among the entries `evictable` accepts, taken out of the
   * policy's queues (with whatever ghost bookkeeping it keeps), or undefined
   * with nothing changed when the policy cannot name `n`.
   */
  evict(n: number, evictable: (e: PolicyEntry) => boolean): PolicyEntry[] | undefined;
}
