// The host tier: a fixed pool of chunk slots keyed by offload key, with LRU
// eviction. An entry's refCount is -1 while it is being written (invisible to
// lookups, never evicted), 0 when readable and idle (the only evictable state),
// and > 0 while loads read it (never evicted). prepareStore is atomic: it
// either reserves every slot it needs or changes nothing.
//
// Two test-only switches (HostTierOptions) re-create the bugs these rules
// prevent, so the failure-class tests can show each rule is load-bearing.
import { InvalidArgumentError, invariant } from '../errors.js';
import type {
  LookupState,
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
} from './types.js';

/**
 * An entry is also a link of the recency list. Touching a request's keys after
 * every store it makes is vLLM's rule (every key of a full-attention group),
 * so a long prompt's thousands of keys move on each of its jobs: a Map
 * delete-and-set per key (two more hashes of a BigInt, and rehashes as the
 * table fills with deleted entries) was the store's largest single cost. A
 * list splice moves an entry in O(1) after the one lookup.
 */
interface Entry {
  readonly key: bigint;
  slot: number;
  refCount: number;
  /** Less recent neighbour (the sentinel at the LRU end). */
  prev: Entry;
  /** More recent neighbour (the sentinel at the MRU end). */
  next: Entry;
}

function newSentinel(): Entry {
  const s = { key: -1n, slot: -1, refCount: 0 } as Entry;
  s.prev = s;
  s.next = s;
  return s;
}

const WRITING = -1;

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
}

export class HostTier implements OffloadTier {
  readonly capacityChunks: number;
  private readonly entries = new Map<bigint, Entry>();
  /** Recency order: sentinel.next is the least recently used entry, sentinel.prev the most. */
  private readonly recency: Entry = newSentinel();
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
  /** Slot -> jobs still holding it: entries dropped by reset() while written or read. */
  private readonly retiredSlots = new Map<number, number>();
  private readonly evictInUse: boolean;
  private readonly publishBeforeComplete: boolean;

  constructor(capacityChunks: number, options: HostTierOptions = {}) {
    if (!Number.isInteger(capacityChunks) || capacityChunks < 1) {
      throw new InvalidArgumentError('capacityChunks', 'must be a positive integer');
    }
    this.capacityChunks = capacityChunks;
    this.evictInUse = options.unsafeEvictInUse ?? false;
    this.publishBeforeComplete = options.unsafePublishBeforeComplete ?? false;
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

  /** Marks keys recently used, in reverse so the first key ends most recent (prefix heads outlive tails). */
  touch(keys: readonly bigint[]): void {
    for (let i = keys.length - 1; i >= 0; i -= 1) {
      const key = keys[i]!;
      const e = this.entries.get(key);
      if (e === undefined || e.refCount !== 0) continue;
      this.makeMostRecent(e);
    }
  }

  prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    const keysToStore: bigint[] = [];
    const seen = new Set<bigint>();
    for (const key of keys) {
      if (seen.has(key)) continue;
      seen.add(key);
      if (!this.entries.has(key)) keysToStore.push(key);
    }
    if (keysToStore.length === 0) return { ok: true, keysToStore, slots: [], evicted: [] };
    const free = this.freeSlots.length + (this.capacityChunks - this.nextFreshSlot);
    const needed = keysToStore.length - free;
    let evicted: bigint[] = [];
    if (needed > 0) {
      const candidates = this.evictInUse ? this.entries.size : this.evictableCount;
      const victims = needed <= candidates ? this.pickVictims(needed, seen) : undefined;
      if (victims === undefined) {
        this.allocationFailureCount += 1;
        return { ok: false, reason: 'cannot-allocate', needed, evictable: this.evictableCount };
      }
      for (const key of victims) this.remove(key);
      evicted = victims;
      this.evictionCount += victims.length;
      this.events.push({ kind: 'removed', keys: victims });
    }
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
        // Becoming readable makes the entry most recent.
        this.makeMostRecent(e);
        stored.push(key);
        this.storeCount += 1;
      } else {
        this.unlink(e);
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

  reset(): void {
    for (const e of this.entries.values()) {
      if (e.refCount === 0) this.freeSlots.push(e.slot);
      // Written by one job, or read by refCount loads: each gives its slot back when it ends.
      else this.retiredSlots.set(e.slot, e.refCount === WRITING ? 1 : e.refCount);
    }
    this.entries.clear();
    this.recency.next = this.recency;
    this.recency.prev = this.recency;
    this.evictableCount = 0;
    this.writingCount = 0;
    this.readingCount = 0;
    // Events of entries that no longer exist (vLLM resets its event tracker too).
    this.events = [];
  }

  releaseRetired(slots: readonly number[]): void {
    for (const slot of slots) {
      const n = this.retiredSlots.get(slot);
      if (n === undefined) invariant(false, `slot ${slot} was retired by a reset`);
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

  /** Exactly `n` idle, unprotected entries from the LRU end, or undefined. */
  private pickVictims(n: number, protectedKeys: ReadonlySet<bigint>): bigint[] | undefined {
    const victims: bigint[] = [];
    // Bounded by the entry count: the list holds each entry once.
    for (let e = this.recency.next; e !== this.recency; e = e.next) {
      if (victims.length === n) break;
      if ((e.refCount === 0 || this.evictInUse) && !protectedKeys.has(e.key)) victims.push(e.key);
    }
    return victims.length === n ? victims : undefined;
  }

  private remove(key: bigint): void {
    const e = this.entries.get(key);
    invariant(
      e !== undefined && (e.refCount === 0 || this.evictInUse),
      'only idle entries are evicted',
    );
    this.unlink(e);
    if (e.refCount === 0) this.evictableCount -= 1;
    else if (e.refCount === WRITING) this.writingCount -= 1;
    else this.readingCount -= 1;
    this.freeSlots.push(e.slot);
  }

  /** A new entry, most recent. */
  private insert(key: bigint, slot: number, refCount: number): void {
    const last = this.recency.prev;
    const e: Entry = { key, slot, refCount, prev: last, next: this.recency };
    last.next = e;
    this.recency.prev = e;
    this.entries.set(key, e);
  }

  private makeMostRecent(e: Entry): void {
    if (this.recency.prev === e) return;
    e.prev.next = e.next;
    e.next.prev = e.prev;
    const last = this.recency.prev;
    e.prev = last;
    e.next = this.recency;
    last.next = e;
    this.recency.prev = e;
  }

  /** Removes the entry from the map and the recency list. */
  private unlink(e: Entry): void {
    e.prev.next = e.next;
    e.next.prev = e.prev;
    this.entries.delete(e.key);
  }
}
