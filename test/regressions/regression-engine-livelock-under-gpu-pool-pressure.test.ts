// Regression (issue 10, item 1): the built-in engine livelocked under GPU-pool
// pressure. An allocation refusal preempted the newest request that was not
// itself waiting for an answer, which in a step where every newer request
// waited was the oldest one: requests that each fit the pool preempted one
// another forever (195,931 preemptions, 0 of 40 ended in 90 s). Now the engine
// schedules as vLLM does on its own count of the pool: the oldest running
// request is served first and only ever preempts newer ones, so it always
// progresses; a request that cannot fit even alone is ended with a reason.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import { RequestCapacityError } from '../../src/errors.js';
import type { EngineOptions } from '../../src/runtime/engine-options.js';
import type { EngineSummary } from '../../src/runtime/engine-request.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { runCli } from '../helpers/cli.js';
import { oneThreadLoops } from '../helpers/one-thread-loops.js';
import { checkAndClose } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

/** Every role loop from one thread (inline copies); returns the engine's summaries. */
async function runInline(
  config: ConfigInput,
  prompts: readonly number[],
  engineOptions: Partial<EngineOptions>,
  maxDecodeTokens = 16,
  roundsMax = 400_000,
): Promise<{ ended: EngineSummary[]; leftInUse: number }> {
  const loops = await oneThreadLoops({
    config,
    engine: { stepMs: 0, abortQueuedRate: 0, abortRunningRate: 0, ...engineOptions },
    engineClock: 'wall',
    allocatorLag: { publishDelayMs: 1, jitterMs: 1, seed: 1 },
  });
  const { ended, allocator } = loops;
  prompts.forEach((promptLength, i) =>
    loops.submit({ requestId: i + 1, promptLength, maxDecodeTokens }),
  );
  loops.runUntil(() => ended.length >= prompts.length, roundsMax);
  loops.drainLeftovers();
  return { ended, leftInUse: allocator.pool.inUse };
}

describe('regression: engine livelock under GPU-pool pressure', () => {
  it('the issue command (6 x 900 tokens, 6000-token pool, no aborts) completes with all 6 finished', async () => {
    const run = await runCli(
      [
        'simulate',
        '--requests',
        '6',
        '--prompt-tokens',
        '900',
        '--gpu-tokens',
        '6000',
        '--abort-rate',
        '0',
        '--decode-tokens',
        '16',
        '--json',
      ],
      { timeoutMs: 60_000 },
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const r = JSON.parse(run.stdout) as { requests: number; completed: number; aborted: number };
    expect(r).toMatchObject({ requests: 6, completed: 6, aborted: 0 });
  });

  it('real threads: 40 requests of 900 tokens (239 of 1,500 blocks each) all finish', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      simulator: { abortQueuedRate: 0, abortRunningRate: 0, maxRunning: 16 },
    });
    const summaries = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        rt.submit({ promptLength: 900, prefixId: i % 3, maxDecodeTokens: 16 }),
      ),
    );
    expect(summaries.map((s) => s.status)).toEqual(new Array(40).fill('finished'));
    expect(summaries.every((s) => s.decodedTokens === 16)).toBe(true);
    await checkAndClose(rt, summaries);
  }, 120_000);

  it('one thread, heavy pressure: the oldest progresses, newer ones are preempted, all finish', async () => {
    // 12 prompts of 400-1,000 tokens decoding 160 more (EAGLE) into 600 blocks:
    // requests admitted while others decode outgrow the pool as those grow.
    const prompts = Array.from({ length: 12 }, (_, i) => 400 + ((i * 211) % 600));
    const { ended, leftInUse } = await runInline(
      { ...SMALL_HYBRID, gpuBlocks: 600 },
      prompts,
      { stepTokenBudget: 256, maxRunning: 12, eagleDraftTokens: 3 },
      160,
    );
    expect(ended).toHaveLength(prompts.length);
    expect(ended.every((s) => s.status === 'finished')).toBe(true);
    expect(ended.some((s) => s.preemptions > 0)).toBe(true);
    expect(leftInUse).toBe(0);
  });

  it('a request that can never fit is refused with a reason; the others still finish', async () => {
    // 300 blocks: a 1,600-token prompt needs 400 full-attention blocks.
    const { ended } = await runInline({ ...SMALL_HYBRID, gpuBlocks: 300 }, [400, 1600, 400], {
      stepTokenBudget: 128,
    });
    expect(ended).toHaveLength(3);
    const big = ended.find((s) => s.requestId === 2)!;
    expect(big.status).toBe('aborted');
    expect(big.opened).toBe(false);
    expect(big.reason).toMatch(/^gpu-pool: /);
    expect(ended.filter((s) => s.requestId !== 2).every((s) => s.status === 'finished')).toBe(true);
  });

  it('a prompt that fits but whose decode outgrows a tiny pool ends with the gpu-pool reason', async () => {
    // 64 blocks: 200 prompt tokens need 50 full-attention blocks plus the window's;
    // decoding 200 more would need 100: past 63 it cannot fit even alone.
    const { ended } = await runInline(
      { ...SMALL_HYBRID, gpuBlocks: 64 },
      [200],
      {
        stepTokenBudget: 64,
      },
      200,
    );
    expect(ended).toHaveLength(1);
    expect(ended[0]!.status).toBe('aborted');
    expect(ended[0]!.opened).toBe(true);
    expect(ended[0]!.reason).toMatch(/^gpu-pool: needs \d+ GPU blocks/);
  });

  it('submit refuses a prompt that can never fit the pool with RequestCapacityError', async () => {
    const rt = await OffloadRuntime.start({ config: { ...SMALL_HYBRID, gpuBlocks: 300 } });
    try {
      await expect(rt.submit({ promptLength: 1600 })).rejects.toBeInstanceOf(RequestCapacityError);
      expect(rt.stats().requests).toBe(0);
    } finally {
      await rt.close();
    }
  });
});
