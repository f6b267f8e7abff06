// Worker entry of every multi-threaded benchmark: receives one task per round,
// runs the named thread function (see bench/lib/thread-tasks.ts) and posts its
// result. No logic of its own.
import { parentPort } from 'node:worker_threads';
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
    .then(
      (result) => port.postMessage({ type: 'result', result }),
      (error: unknown) =>
        port.postMessage({
          type: 'error',
          error: error instanceof Error ? (error.stack ?? error.message) : String(error),
        }),
    );
});
