// The data behind `kvoff simulate --report`: the run's summary plus, for a few
// traced requests, what each store pass saw per group. The renderer is a pure
// function of this object, so the page can be tested without running anything.

/** One store pass over one group of one traced request. Counts are in chunks. */
export interface ReportPass {
  /** Milliseconds since the run started. */
  tMs: number;
  /** Request generation (bumped by a preemption). */
  generation: number;
  /** Chunks whose tokens are offloadable (the token-derived boundary). */
  tokenChunks: number;
  /** Offload keys published by the hasher. */
  keys: number;
  /** floor(block IDs published by the allocator / blocksPerChunk). */
  blockChunks: number;
  /** min(tokenChunks, keys, blockChunks). */
  ready: number;
  /** Cursor before this pass. */
  cursorBefore: number;
  /** Cursor after this pass. */
  cursorAfter: number;
  /** Chunks dispatched to the transfer backend by this pass: [cursorBefore, cursorBefore + stored). */
  stored: number;
  /** Token-ready chunks left for a later pass: tokenChunks - max(ready, cursorAfter) when positive. */
  deferred: number;
  /**
   * Token-ready, not ready chunks this pass moved the cursor past without
   * storing them (a legacy policy's holes): [max(ready, cursorBefore), cursorAfter).
   */
  skipped: number;
}

export interface ReportGroupTrace {
  group: number;
  kind: string;
  tokensPerChunk: number;
  passes: ReportPass[];
}

export interface ReportRequestTrace {
  requestId: number;
  status: string;
  promptTokens: number;
  groups: ReportGroupTrace[];
}

/** One line of the summary table. `bad` marks a value that should have been zero. */
export interface ReportSummaryRow {
  label: string;
  value: string;
  bad?: boolean;
}

export interface ReportData {
  title: string;
  /** ISO time the run ended. */
  generatedAt: string;
  policy: string;
  /** Workload options as given (name -> value). */
  workload: Record<string, string | number | boolean>;
  summary: ReportSummaryRow[];
  /** A line under the summary (which figures depend on thread timing). */
  note?: string;
  requests: ReportRequestTrace[];
}
