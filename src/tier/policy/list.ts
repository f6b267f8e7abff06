// An intrusive doubly linked list of policy entries: O(1) append, unlink and
// move after the tier's one map lookup, no allocation per operation. Each
// entry is in at most one list at a time (its prev/next links are the list's).
import type { PolicyEntry } from './types.js';

/** `queue` of an entry in no list. */
const NO_QUEUE = -1;

export class EntryList {
  /** Oldest (least recent) first. */
  private head: PolicyEntry | null = null;
  private tail: PolicyEntry | null = null;
  private count = 0;
  /** Stamped into an entry's `queue` while it is in this list. */
  readonly id: number;

  constructor(id: number) {
    this.id = id;
  }

  get size(): number {
    return this.count;
  }

  /** The oldest entry (the eviction end), or null. */
  get oldest(): PolicyEntry | null {
    return this.head;
  }

  has(e: PolicyEntry): boolean {
    return e.queue === this.id;
  }

  /** Appends at the newest end. */
  push(e: PolicyEntry): void {
    e.queue = this.id;
    e.prev = this.tail;
    e.next = null;
    if (this.tail === null) this.head = e;
    else this.tail.next = e;
    this.tail = e;
    this.count += 1;
  }

  unlink(e: PolicyEntry): void {
    if (e.prev === null) this.head = e.next;
    else e.prev.next = e.next;
    if (e.next === null) this.tail = e.prev;
    else e.next.prev = e.prev;
    e.prev = null;
    e.next = null;
    e.queue = NO_QUEUE;
    this.count -= 1;
  }

  /** Moves an entry of this list to its newest end. */
  moveToNewest(e: PolicyEntry): void {
    if (this.tail === e) return;
    this.unlink(e);
    this.push(e);
  }

  /** Keys oldest first (tests and debugging). */
  keys(): bigint[] {
    const out: bigint[] = [];
    for (let e = this.head; e !== null; e = e.next) out.push(e.key);
    return out;
  }
}

/**
 * A bounded FIFO of keys without entries (a ghost list): a Map keeps insertion
 * order, so the oldest key is the first one; re-adding a key moves it to the
 * newest end. Only policies with ghosts use it, never the tier's hot path.
 */
export class KeyFifo {
  private readonly keys = new Map<bigint, true>();
  private capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get size(): number {
    return this.keys.size;
  }

  has(key: bigint): boolean {
    return this.keys.has(key);
  }

  /** Adds (or moves) `key` to the newest end, then drops the oldest beyond capacity. */
  push(key: bigint): void {
    this.keys.delete(key);
    this.keys.set(key, true);
    this.trim();
  }

  delete(key: bigint): boolean {
    return this.keys.delete(key);
  }

  /** Drops the oldest keys beyond capacity. */
  trim(): void {
    while (this.keys.size > this.capacity) {
      const oldest = this.keys.keys().next();
      if (oldest.done === true) return;
      this.keys.delete(oldest.value);
    }
  }

  /** Keys oldest first (tests and debugging). */
  list(): bigint[] {
    return [...this.keys.keys()];
  }
}
