// LRU, as the host tier always did it: one recency list. A new entry is most
// recent; becoming readable makes it most recent again; a touch moves the
// touched keys that are readable and idle to the most recent end in reverse,
// so a request's first chunk ends up most recent and its prefix head outlives
// its tail (vLLM's touch order); victims come from the least recent end.
import { EntryList } from './list.js';
import type { CachePolicy, PolicyEntry } from './types.js';

export class LruPolicy implements CachePolicy {
  readonly name = 'lru' as const;
  private readonly recency = new EntryList(0);

  insert(e: PolicyEntry): void {
    this.recency.push(e);
  }

  remove(e: PolicyEntry): void {
    this.recency.unlink(e);
  }

  published(e: PolicyEntry): void {
    this.recency.moveToNewest(e);
  }

  touch(keys: readonly bigint[], entries: ReadonlyMap<bigint, PolicyEntry>): void {
    for (let i = keys.length - 1; i >= 0; i -= 1) {
      const e = entries.get(keys[i]!);
      if (e === undefined || e.refCount !== 0) continue;
      this.recency.moveToNewest(e);
    }
  }

  read(): void {}

  evict(n: number, evictable: (e: PolicyEntry) => boolean): PolicyEntry[] | undefined {
    const victims: PolicyEntry[] = [];
    // Bounded by the entry count: the list holds each entry once.
    for (let e = this.recency.oldest; e !== null && victims.length < n; e = e.next) {
      if (evictable(e)) victims.push(e);
    }
    if (victims.length < n) return undefined;
    for (const e of victims) this.recency.unlink(e);
    return victims;
  }

  /** Keys least recent first (tests). */
  order(): bigint[] {
    return this.recency.keys();
  }
}
