// What the store loop tells the runtime's main thread: finished jobs, drained
// requests and verify()'s report (main, the fuzzer's runtime world and the
// one-thread tests all read these shapes).
import type { TracedRequest } from './trace-recorder.js';

/** One finished store job, as `rt.on('job')` reports it (loads are not reported there). */
export interface JobEvent {
  jobId: number;
  chunks: number;
  bytes: number;
  latencyMs: number;
}

/** Sent to main once per request generation, just before it is marked drained. */
export interface DrainedRequest {
  requestId: number;
  slot: number;
  generation: number;
  status: 'finished' | 'aborted';
  chunksStored: number;
  chunksDeferred: number;
  /** Chunks token-ready when the request ended, summed over groups. */
  tokenChunks: number;
  /**
   * Of those, chunks accounted for without this generation storing them:
   * loaded at admission, already in the tier, slid out of the window, or
   * counted as dropped (for capacity, or never ready).
   */
  chunksCounted: number;
  /** Token-ready chunks neither stored nor counted (the chunk ledger's holes; must be 0). */
  holes: number;
  /** The first of them, in group then chunk order. */
  firstHole?: { group: number; chunk: number };
  doubleStores: number;
  /** Per-pass windows, for a traced request only (options.traceRequests). */
  trace?: TracedRequest;
}

export interface VerifyReport {
  ok: boolean;
  entriesChecked: number;
  /**
   * Entries whose store copy was still in flight when the check ran, so not
   * checked: verify() waits (bounded) for the copies dispatched before it was
   * called, so this is 0 unless a copy took longer than that wait or new
   * copies were dispatched meanwhile.
   */
  entriesInFlight: number;
  blocksChecked: number;
  mismatches: number;
  holes: number;
  doubleStores: number;
  /** The first few mismatching keys, as hex. */
  mismatchKeys: string[];
}

export interface StoreLoopEvents {
  jobs(events: JobEvent[]): void;
  drained(request: DrainedRequest): void;
}
