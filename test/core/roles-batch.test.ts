// The writer-side batch calls (SchedulerRole.progressBatch,
// AllocatorRole.appendBlocksBatch): the role's claim and each handle are
// checked once per batch. Property tests: an accepted batch leaves exactly
// the bytes the same calls one at a time leave, and a batch with any bad
// entry is refused with a typed error and changes nothing, not even the
// entries before the bad one.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import {
  IllegalTransitionError,
  InvalidArgumentError,
  KvoffError,
  StaleHandleError,
} from '../../src/errors.js';
import { S_COMPUTED_TOKENS } from '../../src/layout.js';
import { AllocatorRole } from '../../src/roles/allocator.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { SchedulerRole } from '../../src/roles/scheduler.js';
import { SharedState } from '../../src/state.js';

const CONFIG = resolveConfig({
  groups: [{ kind: 'full', tokensPerBlock: 4 }],
  blocksPerChunk: 1,
  tokensPerHash: 4,
  maxRequests: 6,
  maxBlocksPerRequest: 8,
  gpuBlocks: 64,
  tierChunks: 64,
  bytesPerBlock: 8,
});
const PROMPT = 24;

interface World {
  state: SharedState;
  scheduler: SchedulerRole;
  allocator: AllocatorRole;
  handles: RequestHandle[];
}

/** Six open requests of 24 known tokens; the last one released (its handle is stale). */
function world(): World {
  const state = SharedState.create(CONFIG);
  const scheduler = new SchedulerRole(state);
  const allocator = new AllocatorRole(state);
  const handles: RequestHandle[] = [];
  for (let r = 0; r < 6; r += 1) {
    handles.push(
      scheduler.open({ requestId: r, promptTokens: Array.from({ length: PROMPT }, (_, i) => i) }),
    );
  }
  scheduler.abort(handles[5]!);
  scheduler.release(handles[5]!);
  return { state, scheduler, allocator, handles };
}

/** The shared bytes, but the owner words (each role view claims with a token of its own). */
function bytes(state: SharedState): number[][] {
  const b = state.buffers;
  const control = Array.from(new Int32Array(b.control));
  for (const role of ['scheduler', 'allocator'] as const) control[state.ownerWord(role)] = 0;
  return [control, ...[b.tokens, b.blocks, b.dirty].map((x) => Array.from(new Uint8Array(x)))];
}

/** Distinct live requests (0..4) with a value each. */
const liveEntries = (value: fc.Arbitrary<number>) =>
  fc.uniqueArray(fc.tuple(fc.integer({ min: 0, max: 4 }), value), {
    selector: ([r]) => r,
    minLength: 1,
    maxLength: 5,
  });

describe('SchedulerRole.progressBatch', () => {
  it('leaves the same bytes as one progress call per entry', () => {
    fc.assert(
      fc.property(
        liveEntries(fc.integer({ min: 0, max: PROMPT })),
        fc.integer({ min: 0, max: 8 }),
        (entries, scheduled) => {
          const a = world();
          const b = world();
          a.scheduler.progressBatch(
            entries.map(([r]) => a.handles[r]!),
            entries.map(([, v]) => v),
            entries.map(() => scheduled),
          );
          for (const [r, v] of entries) b.scheduler.progress(b.handles[r]!, v, scheduled);
          expect(bytes(a.state)).toEqual(bytes(b.state));
        },
      ),
      { numRuns: 100 },
    );
  });

  it('refuses a batch with one bad entry anywhere, typed, and writes none of it', () => {
    const bad = fc.constantFrom('stale', 'past-known', 'negative', 'fraction', 'twice');
    fc.assert(
      fc.property(
        liveEntries(fc.integer({ min: 0, max: PROMPT })),
        bad,
        fc.nat(),
        (entries, kind, where) => {
          const w = world();
          const hs = entries.map(([r]) => w.handles[r]!);
          const vs = entries.map(([, v]) => v);
          const at = where % (hs.length + 1);
          if (kind === 'stale') hs.splice(at, 0, w.handles[5]!);
          else if (kind === 'twice') hs.splice(at, 0, hs[where % hs.length]!);
          else hs.splice(at, 0, w.handles[(where % 5) as 0]!);
          vs.splice(at, 0, kind === 'past-known' ? PROMPT + 1 : kind === 'negative' ? -1 : 1.5);
          if (kind === 'stale' || kind === 'twice') vs[at] = 1;
          // A live request named twice only because it was drawn twice is the 'twice' case.
          const before = bytes(w.state);
          let error: unknown;
          try {
            w.scheduler.progressBatch(hs, vs);
          } catch (e) {
            error = e;
          }
          expect(error).toBeInstanceOf(KvoffError);
          if (kind === 'stale') expect(error).toBeInstanceOf(StaleHandleError);
          expect(bytes(w.state)).toEqual(before);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('a view that handed the role off checks handles against shared memory again (regression guard for its private record)', () => {
    const prompt = Array.from({ length: PROMPT }, (_, i) => i);
    const state = SharedState.create(CONFIG);
    const a = new SchedulerRole(state);
    const h1 = a.open({ requestId: 1, promptTokens: prompt });
    const h2 = a.open({ requestId: 2, promptTokens: prompt });
    const h3 = a.open({ requestId: 3, promptTokens: prompt });
    a.progressBatch([h1, h2, h3], [8, 8, 8]);
    a.handOff();
    // Another view ends one, frees one, preempts one, then hands back.
    const b = new SchedulerRole(state);
    b.abort(h1);
    b.abort(h2);
    b.release(h2);
    b.preempt(h3);
    b.handOff();
    expect(() => a.progress(h1, 12)).toThrow(IllegalTransitionError);
    expect(() => a.progress(h2, 12)).toThrow(StaleHandleError);
    // Preempted to 0 by the other view: 4 is progress, not going back from 8.
    a.progress(h3, 4);
    expect(Atomics.load(state.control, state.schedulerWord(h3.slot, S_COMPUTED_TOKENS))).toBe(4);
    expect(() => a.progressBatch([h3], [2])).toThrow(InvalidArgumentError);
  });

  it('refuses arrays of different lengths', () => {
    const w = world();
    expect(() => w.scheduler.progressBatch([w.handles[0]!], [1, 2])).toThrow(InvalidArgumentError);
    expect(() => w.scheduler.progressBatch([w.handles[0]!], [1], [])).toThrow(InvalidArgumentError);
  });
});

describe('AllocatorRole.appendBlocksBatch', () => {
  /** Per entry: a live request and 0-3 fresh block IDs (no ID in two entries). */
  const appends = fc
    .uniqueArray(fc.integer({ min: 1, max: 63 }), { minLength: 0, maxLength: 12 })
    .chain((ids) =>
      liveEntries(fc.integer({ min: 0, max: 3 })).map((entries) => {
        let at = 0;
        return entries.map(([r, k]) => {
          const mine = ids.slice(at, at + k);
          at += mine.length;
          return { r, ids: mine };
        });
      }),
    );

  it('leaves the same bytes as one appendBlocks call per entry', () => {
    fc.assert(
      fc.property(appends, (entries) => {
        const a = world();
        const b = world();
        a.allocator.appendBlocksBatch(
          entries.map((e) => a.handles[e.r]!),
          0,
          entries.flatMap((e) => e.ids),
          entries.map((e) => e.ids.length),
        );
        for (const e of entries) b.allocator.appendBlocks(b.handles[e.r]!, 0, e.ids);
        expect(bytes(a.state)).toEqual(bytes(b.state));
      }),
      { numRuns: 100 },
    );
  });

  it('refuses a block given in two entries, a stale handle, or counts that do not add up, and writes nothing', () => {
    fc.assert(
      fc.property(
        appends.filter((e) => e.length >= 2 && e.some((x) => x.ids.length > 0)),
        fc.constantFrom('duplicate', 'stale', 'counts'),
        (entries, kind) => {
          const w = world();
          const hs = entries.map((e) => w.handles[e.r]!);
          const ids = entries.flatMap((e) => e.ids);
          const counts = entries.map((e) => e.ids.length);
          if (kind === 'duplicate') {
            // The last entry gets one more block: the first ID of the batch again.
            ids.push(ids[0]!);
            counts[counts.length - 1]! += 1;
          } else if (kind === 'stale') hs[hs.length - 1] = w.handles[5]!;
          else counts[0]! += 1;
          const before = bytes(w.state);
          expect(() => w.allocator.appendBlocksBatch(hs, 0, ids, counts)).toThrow(KvoffError);
          expect(bytes(w.state)).toEqual(before);
        },
      ),
      { numRuns: 200 },
    );
  });
});
