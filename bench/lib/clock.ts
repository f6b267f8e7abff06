// One clock every thread agrees on: epoch milliseconds with sub-microsecond
// resolution. performance.now() alone is relative to each thread's own
// timeOrigin, so cross-thread latencies add timeOrigin back.
import { performance } from 'node:perf_hooks';

export function epochMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Resolves after `ms` without blocking the thread. */
export function sleepMs(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
