// A copy backend of your own, loaded by the store worker when a runtime starts
// with `transferBackendModule` (see examples/custom-backend.mjs). The store
// role submits small Int32Array tasks — a store (GPU blocks -> tier slot) or
// a load (tier slot -> GPU block) — and collects completions each step.
//
// This one copies with kvoff's own `runTransferTask` on the store worker's
// thread, one task per event-loop turn. A backend for real device memory would
// start a DMA in `submit` and report the completion from its callback. Two
// rules the design relies on: report a completion only once the bytes are in
// place (the tier publishes the entry then), and let every store task unpin its
// source blocks, failed or not (runTransferTask does both).
import { performance } from 'node:perf_hooks';
import { TASK_LOAD, attachArenas, runTransferTask } from 'kvoff';

/**
 * @param {import('kvoff').TransferArenas} arenas the shared GPU and tier arenas and pin counts
 * @returns {import('kvoff').TransferBackend}
 */
export function createTransferBackend(arenas) {
  const attached = attachArenas(arenas);
  /** @type {import('kvoff').TransferCompletion[]} */
  let done = [];
  let submitted = 0;
  return {
    name: 'example-deferred',
    get inFlight() {
      return submitted; // submitted and not yet collected, as the interface says
    },
    submit(task) {
      submitted += 1;
      const t0 = performance.now();
      const jobId = task[1] ?? -1; // [kind, jobId, ...]
      const kind = task[0] === TASK_LOAD ? 'load' : 'store';
      setImmediate(() => {
        try {
          const bytes = runTransferTask(attached, task);
          done.push({ jobId, kind, ok: true, bytes, latencyMs: performance.now() - t0 });
        } catch (error) {
          done.push({ jobId, kind, ok: false, bytes: 0, latencyMs: 0, error });
        }
      });
    },
    takeCompletions() {
      const out = done;
      done = [];
      submitted -= out.length;
      return out;
    },
    close() {
      return Promise.resolve();
    },
  };
}
