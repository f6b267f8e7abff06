// The part of OffloadRuntime that the HTTP layer uses. The server is written
// against this small interface so it can be tested with a stand-in and so any
// runtime with the same surface can be embedded.
export interface SimRequest {
  promptTokens?: number[];
  promptLength?: number;
  prefixId?: number;
  sharedPrefixTokens?: number;
  maxDecodeTokens?: number;
  abortAfterTokens?: number;
}

export interface RequestSummary {
  requestId: number;
  status: 'finished' | 'aborted';
  promptTokens: number;
  decodedTokens: number;
  chunksStored: number;
  chunksDeferred: number;
  hitChunks: number;
  preemptions: number;
  holes: number;
}

export interface RuntimeStats {
  requests: number;
  completed: number;
  aborted: number;
  preemptions: number;
  chunksStored: number;
  chunksDeferred: number;
  chunksDeferredThenStored: number;
  allocationRetries: number;
  tierHits: number;
  bytesCopied: number;
  pinsOutstanding: number;
  snapshotRetries: number;
  jobsInFlight: number;
  tierUsed: number;
  tierCapacity: number;
  holes: number;
  mismatches: number;
  chunksDroppedForCapacity: number;
}

export interface JobEvent {
  jobId: number;
  chunks: number;
  bytes: number;
  latencyMs: number;
}

export interface EmbeddableRuntime {
  readonly config: { readonly maxTokensPerRequest: number };
  submit(req: SimRequest): Promise<RequestSummary>;
  stats(): RuntimeStats;
  close(): Promise<void>;
  on(event: 'job', fn: (e: JobEvent) => void): unknown;
}
