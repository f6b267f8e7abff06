// Garbage-collection pauses of one bench thread during a task, from Node's
// `gc` performance entries. A young-generation collection stops the thread
// that allocated (about a millisecond here when another thread's work shares
// the core), so a design whose threads allocate per event pays it in its tail
// latency, and one that allocates nothing does not: the designs bench reports
// both beside the p99 they explain.
import { PerformanceObserver } from 'node:perf_hooks';
import type { PerformanceEntry } from 'node:perf_hooks';

/** What one thread's task paused for: collections that started after the task did. */
export interface GcPauses {
  readonly count: number;
  readonly msMax: number;
  readonly msTotal: number;
}

/** Longest a thread keeps its entries: far more than any task's collections. */
const ENTRIES_MAX = 4096;

export class GcPauseLog {
  private readonly entries: PerformanceEntry[] = [];
  private readonly observer: PerformanceObserver;

  constructor() {
    this.observer = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        if (this.entries.length >= ENTRIES_MAX) this.entries.shift();
        this.entries.push(e);
      }
    });
    this.observer.observe({ entryTypes: ['gc'] });
  }

  /**
   * The pauses that started at or after `markMs` (this thread's performance.now()). Entries are delivered on
   * the event loop, so this waits two turns first: a task that ran without
   * yielding has its collections still queued when it returns.
   */
  async since(markMs: number): Promise<GcPauses> {
    for (let turn = 0; turn < 2; turn += 1) await new Promise((r) => setImmediate(r));
    let count = 0;
    let msMax = 0;
    let msTotal = 0;
    for (const e of this.entries) {
      if (e.startTime < markMs) continue;
      count += 1;
      msMax = Math.max(msMax, e.duration);
      msTotal += e.duration;
    }
    return { count, msMax, msTotal };
  }
}
