// ARC as vLLM's offloading manager runs it (vllm/v1/kv_offload/cpu/policies/
// arc.py): T1 holds entries seen once, T2 entries touched again, B1 and B2 the
// keys recently evicted from each, and target1 the share T1 aims for.
//
// - insert: into T1 (newest end), and out of both ghost lists.
// - touch, keys in reverse: an entry of T1 moves to T2 if readable (being
//   written it only moves to T1's newest end: "prepared, not touched twice");
//   an entry of T2 moves to T2's newest end; a key in B1 raises target1 by
//   max(1, |B2|/|B1|) (at most the capacity), a key in B2 lowers it by
//   max(1, |B1|/|B2|) (at least 0), and the ghost key moves to its list's
//   newest end.
// - evict: while T1 (less what is already picked) is at least floor(target1),
//   the oldest evictable entry of T1, else of T2; when T1 has none left, T2;
//   when T2 has none either, the eviction fails and nothing changes. Victims
//   go to B1 or B2; each ghost list keeps at most `capacity` keys.
// - completeStore and loads change nothing (vLLM's policy has no hook there).
import { EntryList, KeyFifo } from './list.js';
import type { CachePolicy, PolicyEntry } from './types.js';
import { WRITING } from './types.js';

export class ArcPolicy implements CachePolicy {
  readonly name = 'arc' as const;
  readonly capacity: number;
  private readonly t1 = new EntryList(1);
  private readonly t2 = new EntryList(2);
  private readonly b1: KeyFifo;
  private readonly b2: KeyFifo;
  private target1 = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.b1 = new KeyFifo(capacity);
    this.b2 = new KeyFifo(capacity);
  }

  /** The adaptive T1 target (tests). */
  get targetT1(): number {
    return this.target1;
  }

  insert(e: PolicyEntry): void {
    this.t1.push(e);
    this.b1.delete(e.key);
    this.b2.delete(e.key);
  }

  remove(e: PolicyEntry): void {
    if (this.t1.has(e)) this.t1.unlink(e);
    else this.t2.unlink(e);
  }

  published(): void {}

  touch(keys: readonly bigint[], entries: ReadonlyMap<bigint, PolicyEntry>): void {
    for (let i = keys.length - 1; i >= 0; i -= 1) {
      const key = keys[i]!;
      const e = entries.get(key);
      if (e !== undefined && this.t1.has(e)) {
        if (e.refCount === WRITING) this.t1.moveToNewest(e);
        else {
          this.t1.unlink(e);
          this.t2.push(e);
        }
      } else if (e !== undefined && this.t2.has(e)) {
        this.t2.moveToNewest(e);
      } else if (this.b1.has(key)) {
        const delta = Math.max(1, this.b1.size > 0 ? this.b2.size / this.b1.size : 1);
        this.target1 = Math.min(this.target1 + delta, this.capacity);
        this.b1.push(key);
      } else if (this.b2.has(key)) {
        const delta = Math.max(1, this.b2.size > 0 ? this.b1.size / this.b2.size : 1);
        this.target1 = Math.max(this.target1 - delta, 0);
        this.b2.push(key);
      }
    }
  }

  read(): void {}

  evict(n: number, evictable: (e: PolicyEntry) => boolean): PolicyEntry[] | undefined {
    if (n === 0) return [];
    // Pick first, change nothing until n are found (the eviction is atomic).
    const picked: PolicyEntry[] = [];
    let t1Left = this.t1.size;
    let c1 = this.t1.oldest;
    let c2 = this.t2.oldest;
    const target = Math.floor(this.target1);
    while (picked.length < n) {
      let e: PolicyEntry | null = null;
      if (t1Left >= target) {
        while (c1 !== null && !evictable(c1)) c1 = c1.next;
        if (c1 !== null) {
          e = c1;
          c1 = c1.next;
          t1Left -= 1;
        }
      }
      if (e === null) {
        while (c2 !== null && !evictable(c2)) c2 = c2.next;
        if (c2 === null) return undefined;
        e = c2;
        c2 = c2.next;
      }
      picked.push(e);
    }
    for (const e of picked) {
      if (this.t1.has(e)) {
        this.t1.unlink(e);
        this.b1.push(e.key);
      } else {
        this.t2.unlink(e);
        this.b2.push(e.key);
      }
    }
    return picked;
  }

  /** Keys of each list, oldest first (tests). */
  lists(): { t1: bigint[]; t2: bigint[]; b1: bigint[]; b2: bigint[] } {
    return { t1: this.t1.keys(), t2: this.t2.keys(), b1: this.b1.list(), b2: this.b2.list() };
  }
}
