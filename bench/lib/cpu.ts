// CPU time, for figures per CPU-second that count the work of a run and not
// the harness around it (thread setup before go, latency summaries after).
//
// The kernel brings a running thread's CPU total up to date only at a tick or
// a context switch; a parked thread's total is exact. So the run's CPU is
// read by the main thread while every bench thread is parked: just before go
// (each has called ready and waits for go) and once every result is in (each
// has gone back to wait for its next task), a millisecond after each to let
// the threads park. process.cpuUsage() covers every thread of the process,
// V8's garbage-collection and compiler threads included.
//
// Per thread (which side of a design spends it), Linux only: the first field
// of /proc/thread-self/schedstat, nanoseconds on a CPU, read by the thread
// itself right after go (it just woke: exact) and at its end after parking
// for a few microseconds (a switch brings its own total up to date).
import { readFileSync } from 'node:fs';

/** Process CPU time so far, µs (every thread, user + system). */
export function processCpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

const SCHEDSTAT = '/proc/thread-self/schedstat';
let schedstatMissing = false;
const SETTLE_CELL = new Int32Array(new SharedArrayBuffer(4));
/** Long enough for the kernel to switch the thread out (a futex wait that times out). */
const SETTLE_MS = 0.05;

/**
 * This thread's CPU time so far, ms; NaN where the kernel does not say (not
 * Linux, or no schedstats). With `settle` it parks briefly first so the total
 * is current: worker threads only.
 */
export function threadCpuMs(settle = false): number {
  if (schedstatMissing) return Number.NaN;
  if (settle) Atomics.wait(SETTLE_CELL, 0, 0, SETTLE_MS);
  try {
    const ns = Number(readFileSync(SCHEDSTAT, 'latin1').split(' ', 1)[0]);
    return ns > 0 ? ns / 1e6 : Number.NaN;
  } catch {
    schedstatMissing = true;
    return Number.NaN;
  }
}

/** A bench thread's own CPU from go (construct right after go) to `elapsed()`. */
export class ThreadCpuClock {
  private readonly atGoMs = threadCpuMs();

  /** This thread's CPU ms since go; parks a few microseconds first. */
  elapsed(): number {
    return threadCpuMs(true) - this.atGoMs;
  }
}
