// A tier that refuses store allocations on demand (the simulator's "tier
// allocation failure" fault); everything else goes to the wrapped tier.
import type {
  LookupState,
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
} from '../tier/types.js';

export class FaultyTier implements OffloadTier {
  readonly capacityChunks: number;
  private readonly inner: OffloadTier;
  /** prepareStore calls still to refuse. */
  failNext = 0;
  refused = 0;

  constructor(inner: OffloadTier) {
    this.inner = inner;
    this.capacityChunks = inner.capacityChunks;
  }

  prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    if (this.failNext > 0 && keys.length > 0) {
      this.failNext -= 1;
      this.refused += 1;
      return { ok: false, reason: 'cannot-allocate', needed: keys.length, evictable: 0 };
    }
    return this.inner.prepareStore(keys);
  }
  lookup(keys: readonly bigint[]): number {
    return this.inner.lookup(keys);
  }
  state(key: bigint): LookupState {
    return this.inner.state(key);
  }
  touch(keys: readonly bigint[]): void {
    this.inner.touch?.(keys);
  }
  completeStore(keys: readonly bigint[], success?: boolean): void {
    this.inner.completeStore(keys, success);
  }
  prepareLoad(keys: readonly bigint[]): number[] {
    return this.inner.prepareLoad(keys);
  }
  completeLoad(keys: readonly bigint[]): void {
    this.inner.completeLoad(keys);
  }
  slotOf(key: bigint): number | undefined {
    return this.inner.slotOf(key);
  }
  takeEvents(): TierEvent[] {
    return this.inner.takeEvents();
  }
  stats(): TierStats {
    return this.inner.stats();
  }
  reset(): void {
    this.inner.reset?.();
  }
  releaseRetired(slots: readonly number[]): void {
    this.inner.releaseRetired?.(slots);
  }
}
