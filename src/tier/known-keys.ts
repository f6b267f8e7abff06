// Keys a remote level is known to hold: this process wrote them, or a lookup
// or a load found them there. A store of such a key would send the same bytes
// again (a warm restart re-stored every chunk the cluster already held), so it
// is skipped. Bounded: beyond `max` keys the oldest are forgotten (and stored
// again if offered: a wasted write, never a lost one). A key the level turns
// out not to hold (a miss, an eviction, a bad value) is forgotten at once.
import { invariant } from '../errors.js';

export class KnownKeys {
  /** Insertion order: the first is the oldest. */
  private readonly keys = new Set<bigint>();

  constructor(readonly max: number) {
    invariant(Number.isInteger(max) && max >= 1, 'a known-key set holds at least one key');
  }

  get size(): number {
    return this.keys.size;
  }

  has(key: bigint): boolean {
    return this.keys.has(key);
  }

  add(key: bigint): void {
    if (this.keys.has(key)) return;
    if (this.keys.size >= this.max) {
      const oldest = this.keys.values().next();
      if (!oldest.done) this.keys.delete(oldest.value);
    }
    this.keys.add(key);
  }

  delete(key: bigint): void {
    this.keys.delete(key);
  }

  /** Forgets every key (the level's entries were retired). */
  clear(): void {
    this.keys.clear();
  }
}
