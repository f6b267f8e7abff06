// Regression (issue 10, item 3): external mode and the facade accepted what
// they cannot honour: duplicate block IDs ([b, b]), IDs the pool never handed
// out, a block held by another live request (verify then found mismatches and
// release threw an untyped AssertionError), progress past the known tokens
// (failure class F4: tokens appended later counted as computed), and the
// facade released a running or not yet drained request. Each is now refused
// with a typed error before anything is written.
import { describe, expect, it } from 'vitest';
import { IllegalTransitionError, InvalidArgumentError, KvoffError } from '../../src/errors.js';
import type { LocalOffload } from '../../src/local.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { SharedState } from '../../src/state.js';
import { local, tokens } from '../helpers/local.js';

/** Every shared buffer's bytes, to compare before and after a refused call. */
export function stateBytes(state: SharedState): Uint8Array[] {
  const b = state.buffers;
  return [b.control, b.tokens, b.hashes, b.keys, b.blocks, b.pins].map((x) =>
    new Uint8Array(x).slice(),
  );
}

/**
 * The words the host's roles (scheduler, allocator) write: their lines of
 * every slot, the owner words, tokens and block IDs. The runtime's hasher and
 * store threads write the rest concurrently.
 */
function hostWords(state: SharedState): number[] {
  const out: number[] = [];
  const g = state.geometry;
  const lineWords = g.slotWords / 4;
  for (let slot = 0; slot < state.config.maxRequests; slot += 1) {
    for (let i = 0; i < lineWords; i += 1) {
      out.push(Atomics.load(state.control, state.schedulerWord(slot, i)));
      out.push(Atomics.load(state.control, state.allocatorWord(slot, i)));
    }
  }
  out.push(Atomics.load(state.control, state.ownerWord('scheduler')));
  out.push(Atomics.load(state.control, state.ownerWord('allocator')));
  out.push(...state.tokens, ...state.blocks);
  return out;
}

function refusedCleanly(
  state: SharedState,
  call: () => unknown,
  type: typeof KvoffError,
  snapshot: (s: SharedState) => unknown = stateBytes,
): void {
  const before = snapshot(state);
  expect(call).toThrow(type);
  expect(snapshot(state)).toEqual(before);
}

describe('regression: the facade accepts what it cannot honour', () => {
  it('duplicate block IDs, in one call or across calls, are refused; release returns each block once', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    refusedCleanly(lo.state, () => lo.appendBlocks(h, 0, [5, 5]), InvalidArgumentError);
    lo.appendBlocks(h, 0, [5, 1]);
    refusedCleanly(lo.state, () => lo.appendBlocks(h, 0, [5]), InvalidArgumentError);
    refusedCleanly(lo.state, () => lo.appendBlocks(h, 0, [2, 1]), InvalidArgumentError);
    lo.appendBlocks(h, 0, [0, 0, 2]); // null positions may repeat
    lo.abort(h);
    lo.settle(h);
    lo.plan();
    expect(lo.release(h).sort((a, b) => a - b)).toEqual([1, 2, 5]);
  });

  it('a block held by another live request is refused; once that one is released it may be reused', async () => {
    const lo = await local();
    const a = lo.open({ requestId: 1, promptTokens: tokens(8) });
    const b = lo.open({ requestId: 2, promptTokens: tokens(8, 1) });
    lo.appendBlocks(a, 0, [7, 8]);
    refusedCleanly(lo.state, () => lo.appendBlocks(b, 0, [9, 8]), InvalidArgumentError);
    expect(() => lo.appendBlocks(b, 0, [8])).toThrow(/held by the live request in slot/);
    lo.abort(a);
    lo.settle(a);
    lo.plan();
    lo.release(a);
    lo.appendBlocks(b, 0, [8, 7]);
    expect(lo.groupProgress(b, 0).blocks).toBe(2);
  });

  it('F4: progress past the known tokens is refused; scheduled tokens may run past them', async () => {
    const lo = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    refusedCleanly(lo.state, () => lo.progress(h, 32), InvalidArgumentError);
    refusedCleanly(lo.state, () => lo.progress(h, 17, 0), InvalidArgumentError);
    lo.progress(h, 16, 4); // drafts in flight
    lo.appendTokens(h, tokens(16, 2));
    // The tokens appended later are not computed: only 16 + 4 are offloadable.
    lo.hash(h);
    lo.appendBlocks(
      h,
      0,
      Array.from({ length: 8 }, (_, i) => 100 + i),
    );
    expect(lo.groupProgress(h, 0).tokenChunks).toBe(5);
  });

  it('release of a running or not yet drained request is refused (its final pass has not run)', async () => {
    const lo: LocalOffload = await local();
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [1, 2, 3, 4]);
    lo.progress(h, 16);
    refusedCleanly(lo.state, () => lo.release(h), IllegalTransitionError);
    lo.finish(h);
    refusedCleanly(lo.state, () => lo.release(h), IllegalTransitionError);
    lo.settle(h);
    for (const j of lo.plan()) lo.complete(j);
    expect(lo.drained(h)).toBe(true);
    expect(lo.release(h).sort((a, b) => a - b)).toEqual([1, 2, 3, 4]);
    expect(lo.counters.chunksStored).toBe(4);
  });
});

describe('regression: external mode accepts what it cannot honour (real threads)', () => {
  it('duplicates, IDs the pool never handed out, blocks of another live request and F4 progress are refused unchanged', async () => {
    const rt = await OffloadRuntime.start({
      config: {
        groups: [{ kind: 'full', tokensPerBlock: 4 }],
        blocksPerChunk: 2,
        tokensPerHash: 4,
        maxRequests: 4,
        maxBlocksPerRequest: 32,
        gpuBlocks: 64,
        tierChunks: 32,
        bytesPerBlock: 64,
      },
      external: true,
    });
    try {
      const host = rt.external!;
      const state = host.roles.state;
      const refused = (call: () => unknown) =>
        refusedCleanly(state, call, InvalidArgumentError, hostWords);
      const a = host.scheduler.open({ requestId: 1, promptTokens: tokens(16) });
      const b = host.scheduler.open({ requestId: 2, promptTokens: tokens(16, 1) });
      const [x, y, z] = host.pool.allocate(3)!;
      refused(() => host.allocator.appendBlocks(a, 0, [x!, x!]));
      const never = [...Array(64).keys()].find((i) => i > 0 && ![x, y, z].includes(i))!;
      refused(() => host.allocator.appendBlocks(a, 0, [never]));
      expect(() => host.allocator.appendBlocks(a, 0, [never])).toThrow(
        /not handed out by the pool/,
      );
      host.allocator.appendBlocks(a, 0, [x!, y!]);
      refused(() => host.allocator.appendBlocks(b, 0, [z!, y!]));
      refused(() => host.scheduler.progress(a, 32));
      host.allocator.appendBlocks(b, 0, [z!]);
      for (const h of [a, b]) {
        host.scheduler.abort(h);
        host.allocator.settle(h);
        await host.whenDrained(h);
        host.release(h);
      }
      expect(host.pool.inUse).toBe(0);
      // The host's pool refuses a double free or a block it never handed out, freeing nothing.
      const [p] = host.pool.allocate(1)!;
      expect(() => host.pool.release([p!, p!])).toThrow(InvalidArgumentError);
      expect(host.pool.inUse).toBe(1);
      host.pool.release([p!]);
      expect(() => host.pool.release([p!])).toThrow(InvalidArgumentError);
      expect(host.pool.inUse).toBe(0);
    } finally {
      await rt.close();
    }
    expect(rt.leakReport()).toMatchObject({ blocksInUse: 0, pinsOutstanding: 0, slotsInUse: 0 });
  });
});
