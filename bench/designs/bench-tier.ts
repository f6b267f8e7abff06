// A tier that accepts every chunk: design (a) must offer its chunks to a tier
// through the real planner, but the comparison is about sharing state between
// threads, not about tier bookkeeping, so this tier does no work beyond
// returning an answer (the other designs have no tier at all). It keeps no
// recency order, so it has no touch, as OffloadTier allows.
import type {
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
} from '../../src/tier/types.js';

export class AcceptAllTier implements OffloadTier {
  readonly capacityChunks: number;
  private readonly slots: number[];

  constructor(maxChunksPerJob: number) {
    this.capacityChunks = maxChunksPerJob;
    this.slots = new Array<number>(maxChunksPerJob).fill(0);
  }
  lookup(): number {
    return 0;
  }
  state(): 'miss' {
    return 'miss';
  }
  prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    return { ok: true, keysToStore: keys, slots: this.slots, evicted: [] };
  }
  completeStore(): void {}
  prepareLoad(): number[] {
    return [];
  }
  completeLoad(): void {}
  slotOf(): number | undefined {
    return undefined;
  }
  takeEvents(): TierEvent[] {
    return [];
  }
  stats(): TierStats {
    return {
      capacityChunks: this.capacityChunks,
      used: 0,
      writing: 0,
      reading: 0,
      evictable: 0,
      stores: 0,
      evictions: 0,
      allocationFailures: 0,
    };
  }
}
