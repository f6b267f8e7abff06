// Regression: an explicit prompt that validateRequestInput accepts (up to
// maxTokensPerRequest - 1 tokens) could be larger than one record of the
// submit ring (half of its 65,536 words). submit() then threw inside its own
// promise after registering the request, so the request stayed pending: the
// runtime kept the process alive and close() waited its whole bound and threw
// TimeoutError. With other submits queued behind a full ring, the record went
// to the backlog and the retry timer threw it: an uncaught exception that
// ended the process. The submit ring is now sized for the largest record
// submit() accepts, and a config past that size is refused up front.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { RequestCapacityError } from '../../src/errors.js';
import { RINGS } from '../../src/runtime/thread-words.js';
import {
  OffloadRuntime,
  SUBMIT_RING_WORDS_MAX,
  submitRingWords,
} from '../../src/runtime/runtime.js';
import { KvoffServer } from '../../src/serve/server.js';
import { runNode } from '../helpers/cli.js';
import { NO_LEAKS } from '../helpers/runtime.js';

/** 41,600 tokens per request: more than one 65,536-word ring record holds. */
const LONG_PROMPTS = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
  blocksPerChunk: 4,
  tokensPerHash: 16,
  maxRequests: 2,
  maxBlocksPerRequest: 2600,
  gpuBlocks: 5400,
  tierChunks: 64,
  bytesPerBlock: 16,
};

const prompt = (n: number, salt: number) =>
  Array.from({ length: n }, (_, i) => (i * 7 + salt) % 5000);

describe('regression: an explicit prompt larger than a submit-ring record', () => {
  it('the ring holds the largest record submit() accepts, up to its cap', () => {
    expect(submitRingWords({ maxTokensPerRequest: 64 })).toBe(RINGS.submit.words);
    for (const tokens of [32_758, 32_759, 41_600, 1 << 20]) {
      const words = submitRingWords({ maxTokensPerRequest: tokens });
      const recordWords = 8 + tokens - 1 + 2;
      // A record holds at most half the ring, less its length word.
      expect(words / 2 - 1).toBeGreaterThanOrEqual(recordWords);
      // The smallest such power of two, and never below the default.
      expect(words === RINGS.submit.words || words / 4 - 1 < recordWords).toBe(true);
    }
    expect(submitRingWords({ maxTokensPerRequest: 1 << 30 })).toBe(SUBMIT_RING_WORDS_MAX);
  });

  it('a 40,000-token explicit prompt runs, also behind a full ring; close() is prompt and clean', async () => {
    const rt = await OffloadRuntime.start({ config: LONG_PROMPTS, closeTimeoutMs: 20_000 });
    const a = prompt(30_000, 1);
    const b = prompt(40_000, 2);
    // Six 30,000-token records fill the default ring at once: the long one queues behind them.
    const all = [...Array.from({ length: 6 }, () => a), b].map((p) =>
      rt.submit({ promptTokens: p, maxDecodeTokens: 2 }),
    );
    const results = await Promise.allSettled(all);
    expect(results.map((r) => r.status)).toEqual(Array(7).fill('fulfilled'));
    const last = (results[6] as PromiseFulfilledResult<{ promptTokens: number; holes: number }>)
      .value;
    expect(last.promptTokens).toBe(40_000);
    expect(last.holes).toBe(0);
    const started = Date.now();
    await rt.close();
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  }, 120_000);

  it('past the ring cap the prompt is refused with RequestCapacityError before anything is held', async () => {
    // 4 Mi tokens per request: a ring for it would be past SUBMIT_RING_WORDS_MAX.
    const config = {
      groups: [{ kind: 'full' as const, tokensPerBlock: 65_536 }],
      tokensPerHash: 65_536,
      maxRequests: 1,
      maxBlocksPerRequest: 64,
      gpuBlocks: 128,
      tierChunks: 4,
      bytesPerBlock: 8,
    };
    expect(resolveConfig(config).maxTokensPerRequest).toBe(1 << 22);
    const rt = await OffloadRuntime.start({ config, closeTimeoutMs: 20_000 });
    const tokens = new Array<number>(3_000_000).fill(5);
    await expect(rt.submit({ promptTokens: tokens, maxDecodeTokens: 1 })).rejects.toBeInstanceOf(
      RequestCapacityError,
    );
    const s = await rt.submit({ promptTokens: tokens.slice(0, 70_000), maxDecodeTokens: 1 });
    expect(s.status).toBe('finished');
    const started = Date.now();
    await rt.close();
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  }, 120_000);

  it('a host process that submits a long prompt and closes exits on its own, without a crash', async () => {
    const host = `
const { OffloadRuntime } = await import(${JSON.stringify(new URL('../../src/runtime/runtime.ts', import.meta.url).href)});
const rt = await OffloadRuntime.start({ config: ${JSON.stringify(LONG_PROMPTS)}, closeTimeoutMs: 20000 });
const p = (n) => Array.from({ length: n }, (_, i) => i % 5000);
const a = p(30000), b = p(40000);
const r = await Promise.allSettled([a, a, a, b].map((t) => rt.submit({ promptTokens: t, maxDecodeTokens: 2 })));
console.log(JSON.stringify(r.map((x) => x.status)));
`;
    const run = await runNode(['--import', 'tsx', '--input-type=module', '-e', host], {
      timeoutMs: 90_000,
    });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout.trim())).toEqual(Array(4).fill('fulfilled'));
  }, 120_000);

  it('over HTTP: concurrent 30,000- and 40,000-token prompts all answer 200; the server stays up', async () => {
    const rt = await OffloadRuntime.start({ config: LONG_PROMPTS, closeTimeoutMs: 20_000 });
    const server = new KvoffServer(rt);
    const { port } = await server.listen(0, '127.0.0.1');
    try {
      const post = (n: number, salt: number) =>
        fetch(`http://127.0.0.1:${port}/v1/requests`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ promptTokens: prompt(n, salt), maxDecodeTokens: 2 }),
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as { holes?: number } }));
      const answers = await Promise.all([
        ...Array.from({ length: 5 }, (_, i) => post(30_000, i)),
        post(40_000, 9),
      ]);
      expect(answers.map((a) => a.status)).toEqual(Array(6).fill(200));
      expect(answers.every((a) => a.body.holes === 0)).toBe(true);
      const health = await fetch(`http://127.0.0.1:${port}/healthz`);
      expect(health.status).toBe(200);
    } finally {
      await server.drain();
    }
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  }, 120_000);
});
