// The one table of benchmark 3: every design's figures per CPU and per event
// beside the floor's (the same stream on one thread, nothing handed over),
// with its jobs and latencies. Shared by the terminal and the Markdown.
import type { DesignResults, DesignRow } from './designs/run.js';
import type { Figure } from './lib/stats.js';

export type DesignCell = string | number;

/** bLean sends a message per event, which no one would write: every table says so. */
export function designLabel(design: string): string {
  return design === 'bLean' ? 'bLean (handicapped: a message per event)' : design;
}

const round = (f: Figure | undefined, digits: number): DesignCell =>
  f === undefined || f.median === null || !Number.isFinite(f.median)
    ? ''
    : Number(f.median.toFixed(digits));

export function designTableRows(d: DesignResults): Record<string, DesignCell>[] {
  return d.rows.map((r: DesignRow) => {
    const oneThread = r.design === 'd' || r.design === 'floor';
    return {
      design: designLabel(r.design),
      writers: r.writers,
      'events/CPU-s': round(r.eventsPerCpuSecond, 0),
      'CPU ns/event': round(r.cpuNsPerEvent, 0),
      'writers ns/event': round(r.writerCpuNsPerEvent, 0),
      'store ns/event': round(r.storeCpuNsPerEvent, 0),
      '× floor': round(r.cpuOverFloor, 2),
      'a ÷ this (CPU)': round(r.aCpuAdvantage, 2),
      'aLean ÷ this (CPU)': round(r.aLeanCpuAdvantage, 2),
      'jobs/run': r.store.jobs === undefined ? '' : Math.round(r.store.jobs),
      'events/s': round(r.eventsPerSecond, 0),
      'p99 ms, max rate': r.design === 'floor' ? '' : round(r.latencyMsP99, 3),
      'p99 ms at load': oneThread ? '' : round(r.loadLatencyMsP99, 3),
      'p99 at load ÷ a': oneThread ? '' : round(r.loadLatencyP99OverA, 2),
    };
  });
}

/** What the table's columns mean, under it. */
export function designTableNotes(d: DesignResults): string[] {
  const loads = d.loads.map(
    (l) =>
      `${l.writers} writer(s): ${Math.round(l.offeredEventsPerSecond)} events/s offered, half of the slowest (${designLabel(l.slowestDesign)}, ${Math.round(l.slowestEventsPerSecond)} events/s)`,
  );
  const hash = d.rows
    .filter((r) => r.design === 'floor' && r.hashCpuNsPerEvent !== undefined)
    .map((r) => `${round(r.hashCpuNsPerEvent, 0)} ns per event (${r.writers} writer(s) run)`);
  const roles = d.rows
    .filter((r) => r.design === 'a' && r.roleCpuNsPerEvent !== undefined)
    .map((r) => `${round(r.roleCpuNsPerEvent, 0)} ns per event (${r.writers} writer(s) run)`);
  const gc = d.rows
    .filter((r) => r.loadGcPauses !== undefined && (r.design === 'a' || r.design === 'cLean'))
    .map(
      (r) =>
        `${designLabel(r.design)} ${round(r.loadGcPauses, 1)} (longest ${round(r.loadGcPauseMsMax, 2)} ms, ${r.writers} writer(s))`,
    );
  return [
    d.cpuMeasure === 'run'
      ? "CPU: every thread but the harness from go to the last dispatch (writers and store apart from each thread's own counter); × floor: CPU per event over the floor's, paired per repeat; the floor's writers and store columns are its two phases, the least a publication and the least the store's side cost per event."
      : 'CPU: the whole process over the whole run, harness included (this file predates the per-run measure, aLean and the floor).',
    `Load at 50%: ${loads.join('; ')}.`,
    ...(hash.length
      ? [
          `The hash stand-in alone, as a's hasher role calls it per chunk (a, b, c and d hash; the lean designs and the floor are handed precomputed keys), timed on the floor's thread outside its run: ${hash.join(', ')}.`,
        ]
      : []),
    ...(roles.length
      ? [
          `Design a's writer role calls alone (the same calls its writer threads make, the hash stand-in included), on one bench thread with no store, a task of its own after each repeat: ${roles.join(', ')}.`,
        ]
      : []),
    ...(gc.length
      ? [
          `Garbage-collection pauses per run at 50% load, every thread of the design (median of repeats): ${gc.join('; ')}.`,
        ]
      : []),
  ];
}
