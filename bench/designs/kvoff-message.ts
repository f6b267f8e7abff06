// Design (b): message passing. Writer threads postMessage each delta (the
// lean writer of lean-message.ts: source, request, chunk, value, publication
// time) to a store thread that owns the whole state privately: it applies
// each delta through the same role code as design (a) to its own copy of the
// layout, then plans the one request the delta touched with the same planner
// (StorePlanner.planSlot). Nothing is shared between threads; every delta is
// structured-cloned and is one task on the store's event loop.
import type { MessagePort } from 'node:worker_threads';
import { resolveConfig } from '../../src/config.js';
import { SharedState } from '../../src/state.js';
import { epochMs } from '../lib/clock.js';
import type { Round } from '../lib/threads.js';
import { KvoffStore, KvoffWriters, setupKvoffDesign } from './kvoff.js';
import { checkDeadline, pubIndex } from './stream.js';
import type { Source, StoreOutcome, StreamShape } from './stream.js';

const DELTA_WORDS = 5;

export function messagedStoreThread(
  p: { shape: StreamShape; ports: readonly MessagePort[] },
  round: Round,
  ready: () => void,
): Promise<StoreOutcome> {
  const { shape } = p;
  // The store's private state: the same layout, never handed to another thread.
  const setup = setupKvoffDesign(shape);
  const state = SharedState.attach(resolveConfig(setup.config), setup.buffers);
  const writers = new KvoffWriters(state, setup.pub, shape, setup.handles);
  const store = new KvoffStore(state, setup.pub, shape);
  const pub = new Float64Array(setup.pub);
  const total = shape.requests * shape.chunks;
  let messages = 0;
  return new Promise<StoreOutcome>((resolve, reject) => {
    const onMessage = (m: number[] | Float64Array) => {
      try {
        messages += 1;
        for (let at = 0; at + DELTA_WORDS <= m.length; at += DELTA_WORDS) {
          const source = m[at]! as Source;
          const r = m[at + 1]!;
          const c = m[at + 2]!;
          pub[pubIndex(shape, r, c, source)] = m[at + 4]!;
          writers.apply(r, c, source);
          store.planSlot(r);
        }
        if (store.dispatched >= total) {
          for (const port of p.ports) port.close();
          const out = store.outcome(epochMs() - round.startMs);
          resolve({ ...out, notes: { ...out.notes, messages } });
        } else if ((messages & 1023) === 0) checkDeadline(round.startMs, epochMs(), 'design b');
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    };
    for (const port of p.ports) port.on('message', onMessage);
    ready();
  });
}
