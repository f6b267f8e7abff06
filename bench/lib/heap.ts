// Heap allocation of a piece of code. Node 20's v8.getHeapStatistics() has no
// total_allocated_bytes, so this forces a full GC, reads used_heap_size, runs
// the code, and reads it again: with no GC in between, the growth is what the
// code allocated. The read itself allocates a little; an empty run calibrates
// that away. A young-generation GC during the run would hide allocation, so
// runs are kept short (well under one semi-space) and the median of several
// trials is reported.
import v8 from 'node:v8';
import vm from 'node:vm';

export const HEAP_METHOD =
  'v8.getHeapStatistics().used_heap_size growth across N calls after a forced full GC (v8 --expose-gc via setFlagsFromString; Node 20 has no total_allocated_bytes), minus an empty-run calibration, median of trials';

let gcFn: (() => void) | undefined;

export function forceGc(): void {
  if (gcFn === undefined) {
    v8.setFlagsFromString('--expose-gc');
    gcFn = vm.runInNewContext('gc') as () => void;
  }
  gcFn();
}

// Two copies of the same loop, so each call site stays monomorphic: one loop
// alternating between the empty function and `fn` would deoptimise and
// reoptimise on every trial, and that allocates code on the heap.
function usedAfterEmpty(calls: number): number {
  forceGc();
  const before = v8.getHeapStatistics().used_heap_size;
  let sink = 0;
  for (let i = 0; i < calls; i += 1) sink += i;
  const used = v8.getHeapStatistics().used_heap_size - before;
  return sink < 0 ? -1 : used;
}

function usedAfter(fn: () => void, calls: number): number {
  forceGc();
  const before = v8.getHeapStatistics().used_heap_size;
  for (let i = 0; i < calls; i += 1) fn();
  return v8.getHeapStatistics().used_heap_size - before;
}

/** Bytes allocated per call of `fn`, one sample per trial (each never below 0). */
export function bytesPerCall(fn: () => void, calls: number, trials = 5): number[] {
  // Warm up first: optimising `fn` allocates code and feedback on the heap, which is not the pass's doing.
  for (let i = 0; i < calls; i += 1) fn();
  const samples: number[] = [];
  for (let t = 0; t < trials; t += 1) {
    const base = usedAfterEmpty(calls);
    samples.push(Math.max(0, (usedAfter(fn, calls) - base) / calls));
  }
  return samples;
}

/** Bytes one call of `fn` allocated (no warm-up: for calls that consume their input). */
export function bytesOfOneCall(fn: () => void): number {
  const base = usedAfterEmpty(1);
  return Math.max(0, usedAfter(fn, 1) - base);
}
