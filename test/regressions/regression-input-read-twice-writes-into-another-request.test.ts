// Regression: the scheduler and allocator roles checked a caller's array and
// then read it again to write it. An array-like that answers differently on
// the second read (a Proxy, an accessor, or an Int32Array over a
// SharedArrayBuffer that another thread changes meanwhile) got past every
// check: a prompt whose length grew after the capacity check was written past
// its slot into the next request's tokens (that request then hashed to keys of
// a prompt it does not have) and published a prompt length above the
// capacity; block IDs that changed after the owner check put one GPU block in
// two live requests' tables; a batch entry could name another slot at write
// time than at check time. Each input is now read once into private memory,
// checked there, and written from there.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { S_COMPUTED_TOKENS, S_PROMPT_TOKENS } from '../../src/layout.js';
import { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';

const CONFIG = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  tokensPerHash: 4,
  maxRequests: 3,
  maxBlocksPerRequest: 4,
  gpuBlocks: 16,
  tierChunks: 16,
  bytesPerBlock: 8,
};

/** An array-like over `first` whose length and entries change after `honestReads` reads. */
function shifty(
  first: number[],
  later: { length?: number; value?: number },
  honestReads = 1,
): { values: ArrayLike<number>; reads: Map<string, number> } {
  const reads = new Map<string, number>();
  const values = new Proxy(first, {
    get(target, key, receiver) {
      if (typeof key !== 'string') return Reflect.get(target, key, receiver) as unknown;
      const n = (reads.get(key) ?? 0) + 1;
      reads.set(key, n);
      if (key === 'length')
        return n > honestReads && later.length !== undefined ? later.length : target.length;
      const i = Number(key);
      if (Number.isInteger(i))
        return n > honestReads && later.value !== undefined ? later.value : target[i];
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
  return { values, reads };
}

/** Slot 0 free again, slot 1 held by B (8 tokens, hashed): the next open takes slot 0, B is its neighbour. */
async function neighbours(): Promise<{
  lo: LocalOffload;
  b: RequestHandle;
  bTokens: number[];
  bKeys: bigint[];
}> {
  const lo = await LocalOffload.create(CONFIG);
  const a = lo.open({ requestId: 1, promptTokens: [1, 2, 3, 4] });
  const bTokens = [11, 12, 13, 14, 15, 16, 17, 18];
  const b = lo.open({ requestId: 2, promptTokens: bTokens });
  lo.hash(a);
  lo.hash(b);
  lo.finish(a);
  lo.settle(a);
  lo.plan();
  lo.release(a);
  return { lo, b, bTokens, bKeys: lo.keys(b, 0) };
}

function tokensOf(lo: LocalOffload, h: RequestHandle, n: number): number[] {
  const base = lo.state.tokenBase(h.slot);
  return Array.from(lo.state.tokens.subarray(base, base + n));
}

describe('regression: an input read twice wrote into another request', () => {
  it('open: a prompt whose length grows after the check stays in its slot; the neighbour is untouched', async () => {
    const { lo, b, bTokens, bKeys } = await neighbours();
    const { values, reads } = shifty([7, 7, 7, 7], { length: 32, value: 7 });
    const e = lo.open({ requestId: 3, promptTokens: values });
    expect(e.slot).toBe(0);
    expect(reads.get('length')).toBe(1);
    for (const i of ['0', '1', '2', '3']) expect(reads.get(i)).toBe(1);
    expect(Atomics.load(lo.state.control, lo.state.schedulerWord(e.slot, S_PROMPT_TOKENS))).toBe(4);
    expect(tokensOf(lo, b, 8)).toEqual(bTokens);
    lo.hash(b);
    expect(lo.keys(b, 0)).toEqual(bKeys);
  });

  it('open and appendTokens: an entry that turns invalid after its check is not what is written', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const p = shifty([1, 2, 3, 4], { value: -5 });
    const h = lo.open({ requestId: 1, promptTokens: p.values });
    expect(tokensOf(lo, h, 4)).toEqual([1, 2, 3, 4]);
    const more = shifty([9, 9], { value: 2 ** 40, length: 12 });
    lo.appendTokens(h, more.values);
    expect(tokensOf(lo, h, 6)).toEqual([1, 2, 3, 4, 9, 9]);
    expect(lo.groupProgress(h, 0).tokenChunks).toBe(0);
    // An entry that is bad on its only read is refused, and nothing changes.
    expect(() => lo.appendTokens(h, shifty([-1], {}).values)).toThrow(InvalidArgumentError);
    expect(tokensOf(lo, h, 7)).toEqual([1, 2, 3, 4, 9, 9, 0]);
  });

  it('appendTokens: a length that grows past the capacity after the check writes nothing past the slot', async () => {
    const { lo, b, bTokens } = await neighbours();
    const e = lo.open({ requestId: 3, promptTokens: [1, 2, 3, 4] });
    lo.appendTokens(e, shifty([5, 6], { length: 40, value: 6 }).values);
    expect(tokensOf(lo, e, 6)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(tokensOf(lo, b, 8)).toEqual(bTokens);
  });

  it('appendBlocks: IDs that change after the owner check never put one block in two live tables', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const a = lo.open({ requestId: 1, promptTokens: [1, 2, 3, 4, 5, 6, 7, 8] });
    const b = lo.open({ requestId: 2, promptTokens: [1, 2, 3, 4, 5, 6, 7, 8] });
    lo.appendBlocks(a, 0, [5, 6]);
    // Checked as 7 and 8, then read again as 5 (held by a): the table must hold 7 and 8.
    lo.appendBlocks(b, 0, shifty([7, 8], { value: 5, length: 4 }).values);
    const base = lo.state.blockBase(b.slot, 0);
    expect(lo.groupProgress(b, 0).blocks).toBe(2);
    expect(Array.from(lo.state.blocks.subarray(base, base + 2))).toEqual([7, 8]);
    // The next slot's table is untouched.
    const next = lo.state.blockBase(b.slot + 1, 0);
    expect(Array.from(lo.state.blocks.subarray(next, next + 4))).toEqual([0, 0, 0, 0]);
    // And 5 is still refused for b: a holds it.
    expect(() => lo.appendBlocks(b, 0, [5])).toThrow(InvalidArgumentError);
  });

  it('batches: the handles, counts and progress written are the ones checked', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const prompt = [1, 2, 3, 4, 5, 6, 7, 8];
    const a = lo.open({ requestId: 1, promptTokens: prompt });
    const b = lo.open({ requestId: 2, promptTokens: prompt });
    const c = lo.open({ requestId: 3, promptTokens: prompt });
    // handles[0] is `a` when checked, `c` when read again.
    let reads0 = 0;
    const swapping = new Proxy([a, b], {
      get(target, key, receiver) {
        if (key === '0') {
          reads0 += 1;
          return reads0 > 1 ? c : a;
        }
        return Reflect.get(target, key, receiver) as unknown;
      },
    });
    lo.scheduler.progressBatch(swapping, shifty([4, 8], { value: 9_999 }).values);
    const computed = (h: RequestHandle) =>
      Atomics.load(lo.state.control, lo.state.schedulerWord(h.slot, S_COMPUTED_TOKENS));
    expect([computed(a), computed(b), computed(c)]).toEqual([4, 8, 0]);
    reads0 = 0;
    lo.allocator.appendBlocksBatch(swapping, 0, [3, 4, 9], shifty([1, 2], { value: 0 }).values);
    expect([a, b, c].map((h) => lo.groupProgress(h, 0).blocks)).toEqual([1, 2, 0]);
  });

  it('a handle whose slot reads differently later is used as first read: checked and written request are one', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const prompt = [1, 2, 3, 4, 5, 6, 7, 8];
    const a = lo.open({ requestId: 1, promptTokens: prompt });
    const b = lo.open({ requestId: 2, promptTokens: prompt });
    /** Names `a` on its first read of `slot`, `b` on every later one. */
    const lying = (): RequestHandle => {
      let reads = 0;
      return {
        get slot() {
          reads += 1;
          return reads > 1 ? b.slot : a.slot;
        },
        generation: a.generation,
      };
    };
    lo.progress(lying(), 8);
    lo.appendBlocks(lying(), 0, [3, 4]);
    lo.hash(lying());
    lo.finish(lying());
    expect(lo.groupProgress(a, 0)).toMatchObject({ tokenChunks: 2, keys: 2, blocks: 2 });
    expect(lo.groupProgress(b, 0)).toMatchObject({ tokenChunks: 0, keys: 0, blocks: 0 });
    // b was neither finished nor given progress: it still runs.
    lo.progress(b, 4);
    expect(() => lo.progress(a, 8)).toThrow(/finished/);
    // A revoked Proxy is a typed refusal, not a TypeError.
    const { proxy, revoke } = Proxy.revocable(b, {});
    revoke();
    expect(() => lo.progress(proxy, 8)).toThrow(InvalidArgumentError);
    expect(() => lo.scheduler.progressBatch([proxy], [8])).toThrow(InvalidArgumentError);
  });
});
