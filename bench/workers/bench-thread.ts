// Worker entry of every multi-threaded benchmark: receives one task per round,
// runs the named thread function (see bench/lib/thread-tasks.ts) and posts its
// result. No logic of its own.
import { performance } from 'node:perf_hooks';
import { parentPort } from 'node:worker_threads';
import { GcPauseLog } from '../lib/gc-pauses.js';
import { profileDir, startThreadProfile } from '../lib/profile.js';
import { CLOSE_MESSAGE, Round } from '../lib/threads.js';
import { THREAD_TASKS } from '../lib/thread-tasks.js';
import type { ThreadKind } from '../lib/thread-tasks.js';

interface TaskMessage {
  kind: ThreadKind;
  params: never;
  round: SharedArrayBuffer;
}

const port = parentPort;
if (port === null) throw new Error('bench-thread must run as a worker');

const dir = profileDir();
const writeProfile = dir === undefined ? undefined : startThreadProfile(dir);
const gcLog = new GcPauseLog();

port.on('message', (msg: TaskMessage | typeof CLOSE_MESSAGE) => {
  if (msg === CLOSE_MESSAGE) {
    // The pool is closing: write this thread's profile (if one runs), then say so.
    void (writeProfile?.() ?? Promise.resolve()).finally(() => port.postMessage(CLOSE_MESSAGE));
    return;
  }
  const run = THREAD_TASKS[msg.kind];
  const round = new Round(msg.round);
  const ready = () => port.postMessage({ type: 'ready' });
  Promise.resolve()
    .then(() => run(msg.params, round, ready))
    .then(async (result) => {
      // Every thread result is an object; the pauses of the task ride along.
      // From the go (on the shared epoch clock): set-up collections do not count.
      const gc = await gcLog.since(round.startMs - performance.timeOrigin);
      return typeof result === 'object' && result !== null ? { ...result, gc } : result;
    })
    .then(
      (result) => port.postMessage({ type: 'result', result }),
      (error: unknown) =>
        port.postMessage({
          type: 'error',
          error: error instanceof Error ? (error.stack ?? error.message) : String(error),
        }),
    );
});
