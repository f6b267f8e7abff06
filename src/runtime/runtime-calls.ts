// The runtime's calls the workers answer: a submit() settles on the engine's
// ended message and the store's drained message (in either order: they come
// over different ports), a verify() or reset() on the store's answer. Each
// settles exactly once; every settled call gives back its hold on the workers.
import { LoadFailedError, SharedResetFailedError } from '../errors.js';
import type { EngineSummary } from './engine-request.js';
import type { DrainedRequest, VerifyReport } from './store-messages.js';

export interface RequestSummary {
  requestId: number;
  status: 'finished' | 'aborted';
  promptTokens: number;
  decodedTokens: number;
  chunksStored: number;
  chunksDeferred: number;
  hitChunks: number;
  preemptions: number;
  /** Chunks token-ready when the request ended, summed over groups (0 if it never held a slot). */
  tokenChunks: number;
  /** Of those, chunks accounted for without being stored: loaded, already present, slid out, or counted as dropped. */
  chunksCounted: number;
  /** Token-ready chunks neither stored nor counted (must be 0). */
  holes: number;
  /** Why the engine ended it early, e.g. `gpu-pool: ...` when it can never fit the GPU pool. */
  reason?: string;
}

interface PendingRequest {
  resolve: (s: RequestSummary) => void;
  reject: (e: Error) => void;
  engine?: EngineSummary;
  store?: DrainedRequest;
}

interface PendingAnswer<T> {
  resolve: (value: T) => void;
  reject: (e: Error) => void;
}

export class PendingCalls {
  private readonly requests = new Map<number, PendingRequest>();
  /** verify() calls the store has not answered yet. */
  private readonly verifies = new Map<number, PendingAnswer<VerifyReport>>();
  /** reset() calls the store has not answered yet. */
  private readonly resets = new Map<number, PendingAnswer<void>>();
  private nextAnswerId = 1;

  /**
   * `storeRuns`: whether a drained message will come (no store runs with
   * offload: false); `release` gives back one settled call's hold.
   */
  constructor(
    private readonly storeRuns: boolean,
    private readonly release: () => void,
  ) {}

  get requestCount(): number {
    return this.requests.size;
  }

  request(requestId: number): Promise<RequestSummary> {
    return new Promise<RequestSummary>((resolve, reject) => {
      this.requests.set(requestId, { resolve, reject });
    });
  }

  /** The engine's word on a request: with no store running (or nothing opened) no drained message comes. */
  ended(summary: EngineSummary): void {
    const p = this.requests.get(summary.requestId);
    if (p === undefined) return;
    p.engine = summary;
    if (!summary.opened || !this.storeRuns || p.store) this.settle(summary.requestId, p);
  }

  drained(request: DrainedRequest): void {
    const p = this.requests.get(request.requestId);
    if (p === undefined) return;
    p.store = request;
    if (p.engine) this.settle(request.requestId, p);
  }

  /** A new verify() call's id, and its settlement once the store answers. */
  verify(): { id: number; answered: Promise<VerifyReport> } {
    const id = this.nextAnswerId++;
    const answered = new Promise<VerifyReport>((resolve, reject) => {
      this.verifies.set(id, this.releasing(resolve, reject));
    });
    return { id, answered };
  }

  reset(): { id: number; answered: Promise<void> } {
    const id = this.nextAnswerId++;
    const answered = new Promise<void>((resolve, reject) => {
      this.resets.set(id, this.releasing(resolve, reject));
    });
    return { id, answered };
  }

  verified(id: number, report: VerifyReport): void {
    const done = this.verifies.get(id);
    this.verifies.delete(id);
    done?.resolve(report);
  }

  resetDone(id: number, failedTier: string | undefined, cause: string | undefined): void {
    const done = this.resets.get(id);
    this.resets.delete(id);
    if (failedTier === undefined) done?.resolve();
    else done?.reject(new SharedResetFailedError(failedTier, cause));
  }

  /** Rejects every unsettled submit() with `err`; their holds are dropped with them by the caller. */
  rejectRequests(err: Error): void {
    const pending = [...this.requests.values()];
    this.requests.clear();
    for (const p of pending) p.reject(err);
  }

  /** Settles every unanswered verify() and reset() with `err` (each exactly once). */
  rejectAnswers(err: Error): void {
    const pending = [...this.verifies.values(), ...this.resets.values()];
    this.verifies.clear();
    this.resets.clear();
    for (const v of pending) v.reject(err);
  }

  private releasing<T>(resolve: (value: T) => void, reject: (e: Error) => void): PendingAnswer<T> {
    return {
      resolve: (value) => {
        this.release();
        resolve(value);
      },
      reject: (err) => {
        this.release();
        reject(err);
      },
    };
  }

  private settle(requestId: number, p: PendingRequest): void {
    this.requests.delete(requestId);
    this.release();
    const e = p.engine!;
    if (e.loadFailed !== undefined) {
      const { firstFailedChunk, hitChunks } = e.loadFailed;
      p.reject(new LoadFailedError(firstFailedChunk, hitChunks, `request ${requestId}`));
      return;
    }
    p.resolve({
      requestId,
      status: e.status,
      promptTokens: e.promptTokens,
      decodedTokens: e.decodedTokens,
      chunksStored: p.store?.chunksStored ?? 0,
      chunksDeferred: p.store?.chunksDeferred ?? 0,
      hitChunks: e.hitChunks,
      preemptions: e.preemptions,
      tokenChunks: p.store?.tokenChunks ?? 0,
      chunksCounted: p.store?.chunksCounted ?? 0,
      holes: p.store?.holes ?? 0,
      ...(e.reason === undefined ? {} : { reason: e.reason }),
    });
  }
}
