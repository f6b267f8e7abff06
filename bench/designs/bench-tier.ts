// A tier that accepts every chunk: design (a) must offer its chunks to a tier
// through the real planner, but the comparison is about sharing state between
// threads, not about tier bookkeeping, so this tier does no work beyond
// returning an answer (the other designs have no tier at all). It keeps no
// recency order, so it has no touch, as OffloadTier allows, and allocates
// nothing per offer (the keys are lent to it, and lent back in its answer).
import type {
  OffloadTier,
  PrepareStoreResult,
  TierEvent,
  TierStats,
} from '../../src/tier/types.js';

/** The one answer AcceptAllTier gives, refilled per offer (the planner reads it before its next offer). */
interface Acceptance {
  readonly ok: true;
  keysToStore: readonly bigint[];
  readonly slots: readonly number[];
  readonly evicted: readonly bigint[];
}

export class AcceptAllTier implements OffloadTier {
  readonly capacityChunks: number;
  private readonly answer: Acceptance;

  constructor(maxChunksPerJob: number) {
    this.capacityChunks = maxChunksPerJob;
    const slots = new Array<number>(maxChunksPerJob).fill(0);
    this.answer = { ok: true, keysToStore: [], slots, evicted: Object.freeze([]) };
  }
  lookup(): number {
    return 0;
  }
  state(): 'miss' {
    return 'miss';
  }
  /** Every key, no work: one answer object refilled per offer. */
  prepareStore(keys: readonly bigint[]): PrepareStoreResult {
    this.answer.keysToStore = keys;
    return this.answer;
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
