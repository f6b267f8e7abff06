// vLLM's store_threshold: a chunk is stored only once it was looked up at
// least `threshold` times. Counts live in an LRU-bounded table (vLLM's
// max_tracker_size, 64,000 keys by default): a key not looked up for a long
// time is forgotten and starts again from 1.
//
// Every key of a lookup is counted, not only the keys up to the first miss:
// vLLM counted inside its prefix scan, which stops at the first miss, so a
// cold prefix gained one countable chunk per two repetitions and a long prompt
// was practically never admitted (vllm-project/vllm #52022, fixed by #52227).
// The store path counts a request's lookup once, when it is answered (a lookup
// asked again after "not yet" is not a new sighting).
import { InvalidArgumentError } from '../../errors.js';

/** vLLM's default max_tracker_size. */
const ADMISSION_TRACKER_KEYS_DEFAULT = 64_000;
/** Largest accepted store threshold (a count a workload could plausibly reach). */
export const STORE_THRESHOLD_MAX = 1 << 20;

export class AdmissionCounter {
  readonly threshold: number;
  readonly trackerKeysMax: number;
  /** Insertion order is recency: the first key is the least recently looked up. */
  private readonly counts = new Map<bigint, number>();

  constructor(threshold: number, trackerKeysMax = ADMISSION_TRACKER_KEYS_DEFAULT) {
    if (!Number.isInteger(threshold) || threshold < 1 || threshold > STORE_THRESHOLD_MAX) {
      throw new InvalidArgumentError(
        'storeThreshold',
        `must be an integer in [1, ${STORE_THRESHOLD_MAX}]`,
      );
    }
    if (!Number.isInteger(trackerKeysMax) || trackerKeysMax < 1) {
      throw new InvalidArgumentError('admissionTrackerKeys', 'must be a positive integer');
    }
    this.threshold = threshold;
    this.trackerKeysMax = trackerKeysMax;
  }

  /** One sighting of every key of a lookup. */
  record(keys: readonly bigint[]): void {
    for (const key of keys) {
      const n = this.counts.get(key);
      if (n !== undefined) {
        this.counts.delete(key);
        this.counts.set(key, n + 1);
        continue;
      }
      if (this.counts.size >= this.trackerKeysMax) {
        const oldest = this.counts.keys().next();
        if (oldest.done !== true) this.counts.delete(oldest.value);
      }
      this.counts.set(key, 1);
    }
  }

  admits(key: bigint): boolean {
    return (this.counts.get(key) ?? 0) >= this.threshold;
  }

  count(key: bigint): number {
    return this.counts.get(key) ?? 0;
  }
}
