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
import type { Round } from '../lib/threads.js';
import { KvoffStore, KvoffWriters, setupKvoffDesign } from './kvoff.js';
import { STORE_PARK_MS, attachBell, checkDeadline, pubIndex } from './stream.js';
import type { Source, StoreOutcome, StreamShape } from './stream.js';

const DELTA_WORDS = 5;

export function messagedStoreThread(
  p: { shape: StreamShape; ports: readonly MessagePort[]; bell: SharedArrayBuffer },
  round: Round,
  ready: () => void,
): StoreOutcome {
  const { shape } = p;
  // The store's private state: the same layout, never handed to another thread.
  const setup = setupKvoffDesign(shape);
  const state = SharedState.attach(resolveConfig(setup.config), setup.buffers);
  const writers = new KvoffWriters(state, setup.pub, shape, setup.handles);
  const store = new KvoffStore(state, setup.pub, shape);
  const pub = new Float64Array(setup.pub);
  const bell = attachBell(p.bell);
  const total = shape.requests * shape.chunks;
  let messages = 0;
  ready();
  round.waitGo();
  while (store.dispatched < total) {
    const seen = bell.read();
    let got = 0;
    for (const port of p.ports) {
      for (let m = receiveMessageOnPort(port); m !== undefined; m = receiveMessageOnPort(port)) {
        const d = m.message as Float64Array;
        got += 1;
        for (let at = 0; at + DELTA_WORDS <= d.length; at += DELTA_WORDS) {
          pub[pubIndex(shape, d[at + 1]!, d[at + 2]!, d[at]! as Source)] = d[at + 4]!;
        }
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
  for (const port of p.ports) port.close();
  const out = store.outcome(epochMs() - round.startMs);
  return { ...out, notes: { ...out.notes, messages } };
}
