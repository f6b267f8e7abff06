// main's part of the runtime fuzz target, the bookkeeping the OffloadRuntime
// keeps on the main thread: submissions pushed when due (a full submit ring
// retried on a timer), reset() and close() at their virtual times, and the
// settle of each request once both its ended and its drained message arrived.
// RuntimeWorld (runtime-world.ts) calls it between decisions and carries out
// what it says on the roles.
import type { EngineSummary } from '../runtime/engine-request.js';
import type { DrainedRequest } from '../runtime/store-loop.js';
import { SUBMIT_RETRY_MS, SubmitQueue, encodeSubmit } from '../runtime/submit-queue.js';
import type { RuntimeScenario, RuntimeSubmission } from './runtime-scenario.js';

interface PendingRequest {
  ended?: EngineSummary;
  drained?: DrainedRequest;
}

/** What main does to the roles when a call of its falls due (RuntimeWorld's part). */
export interface MainCalls {
  /** reset(): the store runs it between two of its steps. */
  reset(): void;
  /** close(): the control word says closing; the engine aborts what is left. */
  close(): void;
  /** `n` submission records went onto the submit ring. */
  submitted(n: number): void;
}

export class RuntimeMainThread {
  /** close() was called: later submits and resets are refused. */
  closing = false;
  /** Submissions main has not pushed yet, in time order. */
  private readonly toSubmit: { atMs: number; s: RuntimeSubmission }[] = [];
  private submitRetryMs = 0;
  private closeAtMs = Infinity;
  /** Virtual times at which main calls reset(), ascending. */
  private readonly resetsAtMs: number[] = [];
  private readonly pending = new Map<number, PendingRequest>();

  constructor(
    scenario: RuntimeScenario,
    /** main's submit ring queue (OffloadRuntime's), retried every SUBMIT_RETRY_MS while records wait. */
    private readonly submits: SubmitQueue,
  ) {
    for (const e of scenario.events) {
      if (e.kind === 'request') this.toSubmit.push({ atMs: e.atMs, s: e.submission });
      else if (e.kind === 'close') this.closeAtMs = Math.min(this.closeAtMs, e.atMs);
      else if (e.kind === 'reset') this.resetsAtMs.push(e.atMs);
    }
    this.toSubmit.sort((a, b) => a.atMs - b.atMs);
    this.resetsAtMs.sort((a, b) => a - b);
  }

  /** main's calls due by `nowMs`, in its order: resets, close(), submissions. */
  runDue(nowMs: number, calls: MainCalls): void {
    while (this.resetsAtMs.length > 0 && this.resetsAtMs[0]! <= nowMs) {
      this.resetsAtMs.shift();
      // After close() a reset is refused (ClosedError): nothing happens.
      if (!this.closing) calls.reset();
    }
    if (!this.closing && nowMs >= this.closeAtMs) {
      this.closing = true;
      // close(): later submits are refused (ClosedError).
      this.toSubmit.length = 0;
      calls.close();
    }
    while (this.toSubmit.length > 0 && this.toSubmit[0]!.atMs <= nowMs) {
      const { s } = this.toSubmit.shift()!;
      this.pending.set(s.requestId, {});
      this.submits.enqueue(encodeSubmit(s));
      this.submitRetryMs = nowMs;
    }
    if (this.submits.queued > 0 && nowMs >= this.submitRetryMs) {
      const n = this.submits.flush();
      if (this.submits.queued > 0) this.submitRetryMs = nowMs + SUBMIT_RETRY_MS;
      if (n > 0) calls.submitted(n);
    }
  }

  /** Every submission is on the ring and every request settled (close() may stop the roles). */
  get settled(): boolean {
    return this.toSubmit.length === 0 && this.submits.queued === 0 && this.pending.size === 0;
  }

  /** main's next due call after now, through `later` (the world's earliest wake-up). */
  wakeTimes(later: (t: number) => void): void {
    if (this.toSubmit.length > 0) later(this.toSubmit[0]!.atMs);
    if (this.submits.queued > 0) later(this.submitRetryMs);
    if (!this.closing) later(this.closeAtMs);
    if (this.resetsAtMs.length > 0) later(this.resetsAtMs[0]!);
  }

  /** The engine's ended message. */
  ended(summary: EngineSummary): void {
    const p = this.pending.get(summary.requestId);
    if (p === undefined) return;
    p.ended = summary;
    if (!summary.opened || p.drained !== undefined) this.pending.delete(summary.requestId);
  }

  /** The store's drained message. */
  drained(d: DrainedRequest): void {
    const p = this.pending.get(d.requestId);
    if (p === undefined) return;
    p.drained = d;
    if (p.ended !== undefined) this.pending.delete(d.requestId);
  }

  /** The requests not settled, for a hang's message. */
  describePending(): string {
    const parts = [...this.pending.entries()].map(
      ([id, p]) =>
        `r${id}:${p.ended ? `ended(${p.ended.status})` : 'running'}${p.drained ? ',drained' : ''}`,
    );
    return parts.join(' ') || 'no request pending';
  }
}
