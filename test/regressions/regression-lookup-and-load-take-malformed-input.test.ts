// Regression: the lookup and load doors did not check what they hashed or
// loaded. LocalOffload.lookup([1n]) threw a TypeError from inside the hashing,
// token 1.5 was silently hashed as 1, null options threw a TypeError;
// LocalOffload.load(handle, null) threw a TypeError and a forged answer
// without a hit length reached an internal assertion; the external host's
// lookup, load and cancel failed the same way. Each is now an
// InvalidArgumentError and changes nothing, and the prompt is read once, so
// the tokens hashed are the tokens checked.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { LocalOffload } from '../../src/local.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { ExternalRuntime } from '../../src/runtime/runtime.js';
import { TINY_FULL } from '../helpers/configs.js';

const CONFIG = TINY_FULL;
const PROMPT = Array.from({ length: 40 }, (_, i) => i + 1);
const BAD_PROMPTS: unknown[] = [
  null,
  'abcd',
  7,
  [1n],
  [1.5],
  [-1],
  [2 ** 31],
  [Number.NaN],
  { length: -1 },
];

describe('regression: lookup and load took malformed input (facade)', () => {
  it('lookup: bad prompts and options are InvalidArgumentError and touch nothing', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const before = JSON.stringify(lo.tier.stats());
    for (const p of BAD_PROMPTS) {
      expect(() => lo.lookup(p as number[]), String(p)).toThrow(InvalidArgumentError);
    }
    expect(() => lo.lookup(PROMPT, null as never)).toThrow(InvalidArgumentError);
    expect(JSON.stringify(lo.tier.stats())).toBe(before);
  });

  it('lookup reads the prompt once: entries that change after the first read are not what is hashed', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const reads = new Map<string, number>();
    const shifty = new Proxy(PROMPT, {
      get(target, key, receiver) {
        if (typeof key === 'string') reads.set(key, (reads.get(key) ?? 0) + 1);
        if (typeof key === 'string' && /^\d+$/.test(key) && (reads.get(key) ?? 0) > 1) return 9;
        return Reflect.get(target, key, receiver) as unknown;
      },
    });
    const a = lo.lookup(shifty);
    const b = lo.lookup(PROMPT);
    expect(a.deferred).toBe(false);
    expect(b.deferred).toBe(false);
    if (a.deferred || b.deferred) return;
    expect(a.keys).toEqual(b.keys);
    expect(Math.max(...reads.values())).toBe(1);
  });

  it('load: a missing or forged answer is InvalidArgumentError and changes nothing', async () => {
    const lo = await LocalOffload.create(CONFIG);
    const h = lo.open({ requestId: 1, promptTokens: PROMPT });
    const shared = () => Array.from(new Int32Array(lo.state.buffers.control));
    const before = shared();
    for (const answer of [
      null,
      7,
      {},
      { deferred: true },
      { deferred: false, localHitTokens: 0, hitTokens: '8' },
      { deferred: false, localHitTokens: -4, hitTokens: 8 },
      { deferred: false, localHitTokens: 0, hitTokens: 0 },
      { deferred: 'no', localHitTokens: 0, hitTokens: 8 },
    ]) {
      expect(() => lo.load(h, answer as never), JSON.stringify(answer)).toThrow(
        InvalidArgumentError,
      );
    }
    expect(shared()).toEqual(before);
  });
});

describe('regression: lookup and load took malformed input (external host)', () => {
  let rt: ExternalRuntime;
  beforeAll(async () => {
    rt = await OffloadRuntime.start({ config: CONFIG, external: true });
  });
  afterAll(async () => {
    await rt.close();
  });

  it('lookup, load and cancel refuse bad input with InvalidArgumentError', async () => {
    const host = rt.external;
    for (const p of BAD_PROMPTS) {
      await expect(host.lookup(p as number[]), String(p)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    await expect(host.lookup(PROMPT, null as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    const h = host.scheduler.open({ requestId: 1, promptTokens: PROMPT });
    for (const answer of [null, 5, { deferred: false, tag: 12345 }]) {
      await expect(host.load(h, answer as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    expect(() => host.cancel(null as never)).toThrow(InvalidArgumentError);
    // A good lookup still answers.
    const answer = await host.lookup(PROMPT);
    expect(answer.deferred).toBe(false);
  });
});
