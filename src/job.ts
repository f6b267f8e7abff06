// A store job: chunks of one request generation to copy from GPU blocks into
// tier slots. Chunks are in group order, then chunk order; each chunk lists its
// non-null source blocks in block order.
import type { ChunkCopy } from './copy.js';

export interface StoreJob {
  readonly jobId: number;
  readonly slot: number;
  readonly generation: number;
  readonly requestId: number;
  readonly chunks: readonly ChunkCopy[];
}
