// Regression (issue 10, item 4): the doors disagreed. OffloadRuntime.submit
// accepted {}, {promptLength, promptTokens} and unknown fields that the HTTP
// layer refused; maxOffloadTokens -1 (the internal no-cap value) was accepted;
// decodedTokens ran past maxDecodeTokens (EAGLE drafts); bad handles gave
// RangeError/TypeError; the external role views kept writing after close().
// Now one validator serves submit and HTTP, and every refusal is typed.
import { describe, expect, it } from 'vitest';
import { ClosedError, InvalidArgumentError, KvoffError } from '../../src/errors.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { validateRequestInput } from '../../src/runtime/request-rules.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { HttpError, parseRequestInput } from '../../src/serve/validate.js';
import { local, tokens } from '../helpers/local.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

const BODIES: unknown[] = [
  {},
  { promptLength: 10, promptTokens: [1] },
  { promptLength: 100, bogus: 1 },
  { promptLength: 0 },
  { promptLength: 1.5 },
  { promptLength: 100, maxDecodeTokens: 0 },
  { promptLength: 4095, maxDecodeTokens: 2 },
  { promptTokens: [] },
  { promptTokens: [1, -1] },
  { promptTokens: 'abc' },
  { promptLength: 100, sharedPrefixTokens: 101 },
  { promptLength: 100, prefixId: -1 },
  { promptLength: 100, abortAfterTokens: -1 },
  { promptLength: 100 },
  { promptTokens: [1, 2, 3], maxDecodeTokens: 4 },
  { promptLength: 64, prefixId: 2, sharedPrefixTokens: 32, abortAfterTokens: 10 },
];

describe('regression: one validation for every door', () => {
  it('submit and HTTP accept and refuse the same bodies, with the same field named', () => {
    const limits = { maxTokensPerRequest: 4096 };
    for (const body of BODIES) {
      let direct: unknown;
      let http: unknown;
      try {
        direct = validateRequestInput(body, limits);
      } catch (err) {
        direct = err;
      }
      try {
        http = parseRequestInput(body, limits);
      } catch (err) {
        http = err;
      }
      if (direct instanceof InvalidArgumentError) {
        expect(http, JSON.stringify(body)).toBeInstanceOf(HttpError);
        expect((http as HttpError).status).toBe(400);
        expect(direct.message).toContain((http as HttpError).message);
      } else {
        expect(http, JSON.stringify(body)).toEqual(direct);
      }
    }
  });

  it('through a running runtime: submit refuses what HTTP refuses, with InvalidArgumentError, and starts nothing', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID });
    try {
      for (const body of [
        {},
        { promptLength: 10, promptTokens: [1] },
        { promptLength: 100, bogus: 1 },
      ]) {
        await expect(rt.submit(body as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      }
      await expect(rt.submit(null as never)).rejects.toBeInstanceOf(InvalidArgumentError);
      expect(rt.stats().requests).toBe(0);
    } finally {
      await rt.close();
    }
  });

  it('decodedTokens never exceeds maxDecodeTokens (EAGLE drafts accepted at the limit are cut)', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      simulator: {
        eagleDraftTokens: 3,
        eagleAcceptRate: 1,
        abortQueuedRate: 0,
        abortRunningRate: 0,
      },
    });
    try {
      const limits = [32, 8, 4, 5, 1];
      const summaries = await Promise.all(
        limits.map((maxDecodeTokens) => rt.submit({ promptLength: 64, maxDecodeTokens })),
      );
      expect(summaries.map((s) => s.decodedTokens)).toEqual(limits);
    } finally {
      await rt.close();
    }
  });

  it('maxOffloadTokens -1 is refused at open; absent still means no cap', async () => {
    const lo = await local();
    expect(() => lo.open({ requestId: 1, promptTokens: tokens(4), maxOffloadTokens: -1 })).toThrow(
      InvalidArgumentError,
    );
    expect(lo.scheduler.freeSlotCount).toBe(lo.config.maxRequests);
    lo.open({ requestId: 1, promptTokens: tokens(4) });
  });

  it('bad handles and wait bounds on the external host are InvalidArgumentError; after close() every write is ClosedError', async () => {
    const rt = await OffloadRuntime.start({
      config: { ...SMALL_HYBRID, groups: [{ kind: 'full', tokensPerBlock: 4 }] },
      external: true,
    });
    const host = rt.external!;
    const bad = [{ slot: 99, generation: 1 }, null, { slot: -1, generation: 1 }, 'x', {}];
    for (const h of bad) {
      expect(() => host.release(h as unknown as RequestHandle)).toThrow(InvalidArgumentError);
      await expect(host.whenDrained(h as unknown as RequestHandle)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
      await expect(host.whenHashed(h as unknown as RequestHandle)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    const h = host.scheduler.open({ requestId: 1, promptTokens: tokens(8) });
    await expect(host.whenDrained(h, -5)).rejects.toBeInstanceOf(InvalidArgumentError);
    host.scheduler.abort(h);
    host.allocator.settle(h);
    await host.whenDrained(h);
    host.release(h);
    const live = host.scheduler.open({ requestId: 2, promptTokens: tokens(8) });
    await rt.close();
    const closed: [string, () => unknown][] = [
      ['open', () => host.scheduler.open({ requestId: 3, promptTokens: tokens(4) })],
      ['appendTokens', () => host.scheduler.appendTokens(live, [1])],
      ['progress', () => host.scheduler.progress(live, 4)],
      ['finish', () => host.scheduler.finish(live)],
      ['abort', () => host.scheduler.abort(live)],
      ['appendBlocks', () => host.allocator.appendBlocks(live, 0, [1])],
      ['clear', () => host.allocator.clear(live)],
      ['pool.allocate', () => host.pool.allocate(1)],
    ];
    for (const [name, call] of closed) {
      expect(call, name).toThrow(ClosedError);
      expect(call, name).toThrow(KvoffError);
    }
  });
});
