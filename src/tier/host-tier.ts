// The host tier: a fixed pool of chunk slots keyed by offload key. An entry's
// refCount is -1 while it is being written (invisible to lookups, never
// evicted), 0 when readable and idle (the only evictable state), and > 0 while
// loads read it (never evicted). prepareStore is atomic: it either reserves
// every slot it needs or changes nothing. Which idle entry goes first is the
// cache policy's choice (src/tier/policy/: LRU by default, ARC, S3-FIFO); an
// optional admission threshold (vLLM's store_threshold) keeps chunks out until
// they were looked up often enough.
//
// Two test-only switches (HostTierOptions) re-create the bugs these rules
// prevent, so the failure-class tests can show each rule is load-bearing.
import { InvalidArgumentError, invariant } from '../errors.js';
import { AdmissionCounter, createCachePolicy, parseCachePolicy } from './policy/index.js';
import type { CachePolicy, CachePolicyName, PolicyEntry } from './policy/index.js';
import { WRITING } from './policy/index.js';
import type {
  LookupState,
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
} from './types.js';

/**
 * An entry is also a link of its policy's queues. Touching a request's keys
 * after every store it makes is vLLM's rule (every key of a full-attention
 * group), so a long prompt's thousands of keys move on each of its jobs: a Map
 * delete-and-set per key (two more hashes of a BigInt, and rehashes as the
 * table fills with deleted entries) was the store's largest single cost. A
 * list splice moves an entry in O(1) after the one lookup.
 */
interface Entry extends PolicyEntry {
  slot: number;
}

export interface HostTierOptions {
  /**
   * Test-only: eviction picks victims among entries being written or read
   * too (LMCache's "evicted outside the lock": failure class F7). Exists so a
   * test can show the refCount rule is what protects them; never turn it on
   * otherwise.
   */
  unsafeEvictInUse?: boolean;
  /**
   * Test-only: an entry is readable from prepareStore on, before its copy ran
   * (publish before complete: failure class F12). Exists so a test can show
   * that only completeStore may publish; never turn it on otherwise.
   */
  unsafePublishBeforeComplete?: boolean;
  /** Which idle entry is evicted first; default 'lru'. */
  policy?: CachePolicyName;
  /** Store a chunk only once recordLookup saw it this many times (vLLM's store_threshold); default 1. */
  storeThreshold?: number;
  /** Keys the admission counter remembers (vLLM's max_tracker_size); default 64,000. */
  admissionTrackerKeys?: number;
}

export class HostTier implements OffloadTier {
  readonly capacityChunks: number;
  private currentPolicy: CachePolicy;
  private readonly entries = new Map<bigint, Entry>();
  /** Lookup counts for the store threshold; undefined when every chunk is admitted. */
  private admission: AdmissionCounter | undefined;
  private readonly admissionTrackerKeys: number | undefined;
  /** Slot -> jobs still holding it: entries dropped by reset() while written or read. */
  private readonly retiredSlots = new Map<number, number>();
  /** Freed slots are reused last-in first-out; fresh ones are handed out in order. */
  private readonly freeSlots: number[] = [];
  private nextFreshSlot = 0;
  private evictableCount = 0;
  private writingCount = 0;
  private readingCount = 0;
  private events: TierEvent[] = [];
  private storeCount = 0;
  private evictionCount = 0;
  private allocationFailureCount = 0;
  private admissionSkipCount = 0;
  private readonly evictInUse: boolean;
  private readonly publishBeforeComplete: boolean;

  constructor(capacityChunks: number, options: HostTierOptions = {}) {
    if (!Number.isInteger(capacityChunks) || capacityChunks < 1) {
      throw new InvalidArgumentError('capacityChunks', 'must be a positive integer');
    }
    this.capacityChunks = capacityChunks;
    this.evictInUse = options.unsafeEvictInUse ?? false;
    this.publishBeforeComplete = options.unsafePublishBeforeComplete ?? false;
    this.currentPolicy = createCachePolicy(
      parseCachePolicy(options.policy ?? 'lru'),
      capacityChunks,
    );
    // A threshold of 1 admits everything: no counting at all (the counter validates the rest).
    const threshold = options.storeThreshold ?? 1;
    this.admissionTrackerKeys = options.admissionTrackerKeys;
    this.admission =
      threshold === 1 ? undefined : new AdmissionCounter(threshold, options.admissionTrackerKeys);
  }

  /** The cache policy: the order of the entries (a reset starts it afresh). */
  get policy(): CachePolicy {
    return this.currentPolicy;
  }

  /** Offered chunks the store threshold kept out so far. */
  get admissionSkips(): number {
    return this.admissionSkipCount;
  }

  /**
   * One sighting of each key of an answered lookup, every key of the prompt
   * (not only those up to the first miss): the store threshold counts these.
   */
  recordLookup(keys: readonly bigint[]): void {
    this.admission?.record(keys);
  }

  lookup(keys: readonly bigint[]): number {
    let n = 0;
    for (const key of keys) {
      const e = this.entries.get(key);
      if (e === undefined || e.refCount === WRITING) break;
      n += 1;
    }
    return n;
  }

  state(key: bigint): LookupState {
    const e = this.entries.get(key);
    if (e === undefined) return 'miss';
    return e.refCount === WRITING ? 'pending' : 'hit';
  }

  /** vLLM's touch: the policy walks the keys in reverse, so a prefix head outlives its tail. */
  touch(keys: readonly bigint[]): void {
    this.policy.touch(keys, this.entries);
  }

  prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    const keysToStore: bigint[] = [];
    const seen = new Set<bigint>();
    let skipped = 0;
    for (const key of keys) {
      if (seen.has(key)) continue;
      seen.add(key);
      if (this.entries.has(key)) continue;
      // Below the store threshold: left out, as vLLM's prepare_store filters it.
      if (this.admission !== undefined && !this.admission.admits(key)) skipped += 1;
      else keysToStore.push(key);
    }
    if (keysToStore.length === 0) {
      this.admissionSkipCount += skipped;
      return { ok: true, keysToStore, slots: [], evicted: [] };
    }
    const free = this.freeSlots.length + (this.capacityChunks - this.nextFreshSlot);
    const needed = keysToStore.length - free;
    let evicted: bigint[] = [];
    if (needed > 0) {
      const victims = needed <= this.candidates(seen) ? this.pickVictims(needed, seen) : undefined;
      if (victims === undefined) {
        this.allocationFailureCount += 1;
        return { ok: false, reason: 'cannot-allocate', needed, evictable: this.evictableCount };
      }
      for (const e of victims) this.remove(e);
      evicted = victims.map((e) => e.key);
      this.evictionCount += victims.length;
      this.events.push({ kind: 'removed', keys: evicted });
    }
    this.admissionSkipCount += skipped;
    const slots: number[] = [];
    for (const key of keysToStore) {
      const slot = this.freeSlots.pop() ?? this.nextFreshSlot++;
      invariant(slot < this.capacityChunks, 'tier slot within capacity');
      if (this.publishBeforeComplete) {
        // The unsafe variant: readable before a byte is copied (completeStore then finds nothing to publish).
        this.insert(key, slot, 0);
        this.evictableCount += 1;
        this.storeCount += 1;
      } else {
        this.insert(key, slot, WRITING);
        this.writingCount += 1;
      }
      slots.push(slot);
    }
    return { ok: true, keysToStore, slots, evicted };
  }

  /** Publishes written keys (success) or drops the reservation (failure). Unknown or ready keys are ignored. */
  completeStore(keys: readonly bigint[], success = true): void {
    const stored: bigint[] = [];
    for (const key of keys) {
      const e = this.entries.get(key);
      if (e === undefined || e.refCount !== WRITING) continue;
      this.writingCount -= 1;
      if (success) {
        e.refCount = 0;
        this.evictableCount += 1;
        this.policy.published(e);
        stored.push(key);
        this.storeCount += 1;
      } else {
        this.policy.remove(e);
        this.entries.delete(key);
        this.freeSlots.push(e.slot);
      }
    }
    if (stored.length > 0) this.events.push({ kind: 'stored', keys: stored });
  }

  prepareLoad(keys: readonly bigint[]): number[] {
    const slots: number[] = [];
    for (const key of keys) {
      const e = this.entries.get(key);
      if (e === undefined || e.refCount === WRITING) {
        throw new InvalidArgumentError('keys', `key ${key} is not readable in the tier`);
      }
    }
    for (const key of keys) {
      const e = this.entries.get(key)!;
      if (e.refCount === 0) {
        this.evictableCount -= 1;
        this.readingCount += 1;
      }
      e.refCount += 1;
      this.policy.read(e);
      slots.push(e.slot);
    }
    return slots;
  }

  completeLoad(keys: readonly bigint[]): void {
    for (const key of keys) {
      const e = this.entries.get(key);
      // The unsafe variant evicted it mid-read (or its slot went to a new write): silently nothing to end.
      if (this.evictInUse && (e === undefined || e.refCount <= 0)) continue;
      invariant(e !== undefined && e.refCount > 0, 'completeLoad of a key being read');
      e.refCount -= 1;
      if (e.refCount === 0) {
        this.evictableCount += 1;
        this.readingCount -= 1;
      }
    }
  }

  slotOf(key: bigint): number | undefined {
    return this.entries.get(key)?.slot;
  }

  /**
   * vLLM's reset_cache: every entry leaves at once, the policy's order and
   * the admission counts start afresh. An entry being written or read keeps
   * its slot retired until the job holding it ends (releaseRetired): a copy in
   * flight must not find its slot handed to a new store.
   */
  reset(): void {
    for (const e of this.entries.values()) {
      if (e.refCount === 0) this.freeSlots.push(e.slot);
      // Written by one job, or read by refCount loads: each gives its slot back when it ends.
      else this.retiredSlots.set(e.slot, e.refCount === WRITING ? 1 : e.refCount);
    }
    this.entries.clear();
    this.currentPolicy = createCachePolicy(this.currentPolicy.name, this.capacityChunks);
    if (this.admission !== undefined) {
      this.admission = new AdmissionCounter(this.admission.threshold, this.admissionTrackerKeys);
    }
    this.evictableCount = 0;
    this.writingCount = 0;
    this.readingCount = 0;
    // Events of entries that no longer exist (vLLM resets its event tracker too).
    this.events = [];
  }

  abandonStore(keys: readonly bigint[]): number[] {
    const slots: number[] = [];
    for (const key of keys) {
      const e = this.entries.get(key);
      if (e === undefined || e.refCount !== WRITING) continue;
      this.writingCount -= 1;
      this.policy.remove(e);
      this.entries.delete(key);
      this.retiredSlots.set(e.slot, 1);
      slots.push(e.slot);
    }
    return slots;
  }

  releaseRetired(slots: readonly number[]): void {
    for (const slot of slots) {
      const n = this.retiredSlots.get(slot);
      if (n === undefined) invariant(false, `slot ${slot} was retired`);
      if (n > 1) this.retiredSlots.set(slot, n - 1);
      else {
        this.retiredSlots.delete(slot);
        this.freeSlots.push(slot);
      }
    }
  }

  takeEvents(): TierEvent[] {
    const out = this.events;
    this.events = [];
    return out;
  }

  stats(): TierStats {
    return {
      capacityChunks: this.capacityChunks,
      used: this.entries.size,
      writing: this.writingCount,
      reading: this.readingCount,
      evictable: this.evictableCount,
      stores: this.storeCount,
      evictions: this.evictionCount,
      allocationFailures: this.allocationFailureCount,
      retired: this.retiredSlots.size,
    };
  }

  /** Entries the policy may take for a store that offers `protectedKeys`. */
  private candidates(protectedKeys: ReadonlySet<bigint>): number {
    let n = this.evictInUse ? this.entries.size : this.evictableCount;
    for (const key of protectedKeys) {
      const e = this.entries.get(key);
      if (e !== undefined && (e.refCount === 0 || this.evictInUse)) n -= 1;
    }
    return n;
  }

  /** Exactly `n` idle, unprotected entries in the policy's order, or undefined. */
  private pickVictims(n: number, protectedKeys: ReadonlySet<bigint>): Entry[] | undefined {
    const evictInUse = this.evictInUse;
    return this.policy.evict(
      n,
      (e) => (e.refCount === 0 || evictInUse) && !protectedKeys.has(e.key),
    ) as Entry[] | undefined;
  }

  /** Takes an evicted entry (already out of the policy's queues) out of the tier. */
  private remove(e: Entry): void {
    invariant(e.refCount === 0 || this.evictInUse, 'only idle entries are evicted');
    this.entries.delete(e.key);
    if (e.refCount === 0) this.evictableCount -= 1;
    else if (e.refCount === WRITING) this.writingCount -= 1;
    else this.readingCount -= 1;
    this.freeSlots.push(e.slot);
  }

  /** A new entry, handed to the policy. */
  private insert(key: bigint, slot: number, refCount: number): void {
    const e: Entry = { key, slot, refCount, prev: null, next: null, queue: -1, freq: 0 };
    this.entries.set(key, e);
    this.policy.insert(e);
  }
}
