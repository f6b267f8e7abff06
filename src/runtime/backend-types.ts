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
  /**
   * Copies the backend works on at once (its threads, or what its device
   * keeps in flight); Infinity for one that copies within submit. While
   * inFlight is at or above it the store plans no pass, so chunks that become
   * ready meanwhile gather into fewer, larger jobs when a copy completes;
   * below it a ready chunk is dispatched at once. Absent (a backend of your
   * own that does not say): only the store's jobsInFlightMax bounds passes.
   */
  readonly capacity?: number;
  submit(task: Int32Array): void;
  /** Completions since the last call, in completion order. */
  takeCompletions(): TransferCompletion[];
  /** Waits for in-flight tasks (bounded by the caller) and frees threads. */
  close(): Promise<void>;
}
