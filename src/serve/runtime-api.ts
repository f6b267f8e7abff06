// The part of OffloadRuntime that the HTTP layer uses. The server is written
// against this small interface so it can be tested with a stand-in and so any
// runtime with the same surface can be embedded.
import type { JobEvent, RequestSummary, RuntimeStats, RequestInput } from '../runtime/runtime.js';

import type { TierStoreSample } from '../tier/lower.js';
import type { KvEventBatch } from '../events/types.js';
import type { LookupSample } from '../runtime/lookup-timing.js';

export type { JobEvent, RequestSummary, RuntimeStats, RequestInput, TierStoreSample };

export interface EmbeddableRuntime {
  readonly config: { readonly maxTokensPerRequest: number };
  submit(req: RequestInput): Promise<RequestSummary>;
  stats(): RuntimeStats;
  close(): Promise<void>;
  /** The failure that stopped the runtime (a worker died), if any. */
  readonly failedWith?: Error | undefined;
  on(event: 'job', fn: (e: JobEvent) => void): unknown;
  /** Store latency per level (host, disk, redis); optional so simple stand-ins need not offer it. */
  onTierStore?(fn: (e: TierStoreSample) => void): unknown;
  /** vLLM's reset_cache (OffloadRuntime.reset); POST /v1/reset answers 501 without it. */
  reset?(options: { shared?: boolean }): Promise<void>;
  /** Lookup timings (the /metrics lookup histograms); optional like onTierStore. */
  onLookup?(fn: (e: LookupSample) => void): unknown;
  /** KV-event batches (GET /v1/events); throws InvalidArgumentError when the runtime has none. */
  events?(options?: { bufferMax?: number }): AsyncIterableIterator<KvEventBatch>;
}
