// S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction",
// SOSP 2023), over the tier's entries: a small FIFO S sized at 10% of the
// capacity, a main FIFO M, a ghost FIFO G of keys (as many as M holds), and a
// 2-bit access counter per entry.
//
// - insert: into M if the key is in G (it was evicted from S recently and came
//   back: it is reused), else into S; the counter starts at 0.
// - read (a load reads it): counter + 1, capped at 3. A touch is not an
//   access here: the store path touches a request's keys after its lookup and
//   after each of its stores, so touches would count one request several times.
// - evict: from S while S holds at least 10% of the capacity, else from M.
//   From S, the oldest entry moves to M if it was read at least twice (the
//   paper's freq > 1) with its counter reset, else it is the victim and its
//   key goes to G. From M, the oldest entry with a counter above 0 goes back
//   to M's newest end with the counter less one; one at 0 is the victim.
//   Entries the tier may not evict (being written or read, or offered in the
//   same store) are passed over where they stand. When the chosen queue has no
//   victim the other is tried; the tier only asks for as many victims as it has
//   evictable entries, so one of them always has one.
import { EntryList, KeyFifo } from './list.js';
import type { CachePolicy, PolicyEntry } from './types.js';

/** The small queue's share of the capacity. */
const S3_FIFO_SMALL_SHARE = 0.1;
/** Reads in S that earn a move to M (the paper's `t.freq > 1`). */
const S3_FIFO_MOVE_TO_MAIN_READS = 2;
/** The counter's cap (two bits). */
const S3_FIFO_FREQ_MAX = 3;

export class S3FifoPolicy implements CachePolicy {
  readonly name = 's3-fifo' as const;
  readonly smallTarget: number;
  private readonly small = new EntryList(1);
  private readonly main = new EntryList(2);
  private readonly ghost: KeyFifo;

  constructor(capacity: number) {
    this.smallTarget = Math.max(1, Math.floor(capacity * S3_FIFO_SMALL_SHARE));
    this.ghost = new KeyFifo(Math.max(1, capacity - this.smallTarget));
  }

  insert(e: PolicyEntry): void {
    e.freq = 0;
    if (this.ghost.delete(e.key)) this.main.push(e);
    else this.small.push(e);
  }

  remove(e: PolicyEntry): void {
    if (this.small.has(e)) this.small.unlink(e);
    else this.main.unlink(e);
  }

  published(): void {}

  touch(): void {}

  read(e: PolicyEntry): void {
    if (e.freq < S3_FIFO_FREQ_MAX) e.freq += 1;
  }

  evict(n: number, evictable: (e: PolicyEntry) => boolean): PolicyEntry[] | undefined {
    const victims: PolicyEntry[] = [];
    while (victims.length < n) {
      const fromSmall = this.small.size >= this.smallTarget;
      const v = fromSmall
        ? (this.evictSmall(evictable) ?? this.evictMain(evictable))
        : (this.evictMain(evictable) ?? this.evictSmall(evictable));
      // The tier asks only for victims it has: reaching this is a tier bug, and
      // the victims taken so far are already out of the queues.
      if (v === undefined) return undefined;
      victims.push(v);
    }
    return victims;
  }

  /** One victim from S, moving the entries read twice to M on the way; undefined when S has none. */
  private evictSmall(evictable: (e: PolicyEntry) => boolean): PolicyEntry | undefined {
    let e = this.small.oldest;
    // Each entry of S is looked at once: it moves to M, is the victim, or is passed over.
    while (e !== null) {
      const next = e.next;
      if (e.freq >= S3_FIFO_MOVE_TO_MAIN_READS) {
        this.small.unlink(e);
        e.freq = 0;
        this.main.push(e);
      } else if (evictable(e)) {
        this.small.unlink(e);
        this.ghost.push(e.key);
        return e;
      }
      e = next;
    }
    return undefined;
  }

  /** One victim from M (FIFO with reinsertion); undefined when M has none it may take. */
  private evictMain(evictable: (e: PolicyEntry) => boolean): PolicyEntry | undefined {
    // A counter drops on each visit, so within FREQ_MAX + 2 rounds of M every
    // evictable entry was met at 0: the bound ends a walk over pinned entries.
    let steps = (S3_FIFO_FREQ_MAX + 2) * this.main.size;
    let e = this.main.oldest;
    while (e !== null && steps > 0) {
      steps -= 1;
      const next = e.next;
      if (e.freq > 0) {
        e.freq -= 1;
        this.main.moveToNewest(e);
      } else if (evictable(e)) {
        this.main.unlink(e);
        return e;
      }
      // A pinned entry at 0 stays where it stands; the walk goes on.
      e = next ?? this.main.oldest;
    }
    return undefined;
  }

  /** Queues oldest first, with counters (tests). */
  queues(): { small: bigint[]; main: bigint[]; ghost: bigint[] } {
    return { small: this.small.keys(), main: this.main.keys(), ghost: this.ghost.list() };
  }
}
