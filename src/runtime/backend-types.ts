// The transfer backend's contract: copy tasks in, completions out. Its own
// file so every backend (the shared-memory ones in backend.ts, the WebGPU one)
// and the ring client they share can name it without importing each other.

export interface TransferCompletion {
  readonly jobId: number;
  readonly kind: 'store' | 'load';
  /** The tensor-parallel rank whose copy this was (0 with one rank; absent: 0). */
  readonly rank?: number;
  readonly ok: boolean;
  /** Bytes copied; for a failed load, those copied (entry by entry, in task order) before it failed. */
  readonly bytes: number;
  readonly latencyMs: number;
  readonly error?: unknown;
}

export interface TransferBackend {
  readonly name: string;
  /** Tasks submitted and not yet collected by takeCompletions. */
  readonly inFlight: number;
  submit(task: Int32Array): void;
  /** Completions since the last call, in completion order. */
  takeCompletions(): TransferCompletion[];
  /** Waits for in-flight tasks (bounded by the caller) and frees threads. */
  close(): Promise<void>;
}
