// Design (b): message passing, written as a skilled engineer would. Writer
// threads send their deltas (source, request, chunk, value, publication time)
// in transferred Float64Array batches (up to 64 deltas, and at the end of
// each round) and ring a doorbell; the store thread owns the whole state
// privately, drains every port with receiveMessageOnPort (no event-loop task
// per message), applies each delta through the same role code as design (a)
// to its own copy of the layout (one role batch call per source and
// message, as design (a)'s writers make one per source and round), then runs one planner pass (the same
// StorePlanner; its dirty bits make it visit only the requests the batch
// touched). When the ports are empty it parks on the doorbell (bounded).
import { receiveMessageOnPort } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';
import { resolveConfig } from '../../src/config.js';
import { SharedState } from '../../src/state.js';
import { epochMs } from '../lib/clock.js';
import { ThreadCpuClock } from '../lib/cpu.js';
import type { Round } from '../lib/threads.js';
import { KvoffStore, KvoffWriters, setupKvoffDesign } from './kvoff.js';
import { DELTA_WORDS } from './lean-message.js';
import { STORE_PARK_MS, attachBell, checkDeadline } from './stream.js';
import type { StoreOutcome, StreamShape } from './stream.js';

export function messagedStoreThread(
  p: {
    shape: StreamShape;
    ports: readonly MessagePort[];
    bell: SharedArrayBuffer;
    pub: SharedArrayBuffer;
  },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const { shape } = p;
  // The store's private state: the same layout, never handed to another thread.
  const setup = setupKvoffDesign(shape);
  const state = SharedState.attach(resolveConfig(setup.config), setup.buffers);
  // The publication times are the writers' (instrumentation, shared by every design).
  const writers = new KvoffWriters(state, p.pub, shape, setup.handles);
  const store = new KvoffStore(state, p.pub, shape);
  const bell = attachBell(p.bell);
  const total = shape.requests * shape.chunks;
  let messages = 0;
  ready();
  round.waitGo();
  const cpu = new ThreadCpuClock();
  while (store.dispatched < total) {
    const seen = bell.read();
    let got = 0;
    for (const port of p.ports) {
      for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) {
        const d = m.message as Float64Array;
        got += 1;
        writers.applyDeltas(d, DELTA_WORDS);
      }
    }
    if (got === 0) {
      bell.park(seen, STORE_PARK_MS);
      checkDeadline(round.startMs, epochMs(), 'design b');
      continue;
    }
    messages += got;
    store.pass();
  }
  const out = store.outcome(epochMs() - round.startMs, cpu);
  for (const port of p.ports) port.close();
  return { ...out, notes: { ...out.notes, messages } };
}
