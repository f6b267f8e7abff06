// `kvoff simulate --trace` end to end, built, on the fixture slices: the JSON
// carries `trace: { requests, promptTokens, hitTokens, tokenHitRatio }` in both
// modes, and the two modes report the same figures on a slice replayed one
// request at a time, here under vLLM's ARC at a capacity where it evicts and
// refuses stores (the store threshold's case is test/trace/replay.test.ts); a
// bad trace is one line with exit 2. Then the option rules on the pure parser.
import { describe, expect, it } from 'vitest';
import { parseTraceOptions } from '../../src/commands/simulate-trace.js';
import { parseSimulateOptions } from '../../src/commands/simulate-options.js';
import type { SimulateRawOptions } from '../../src/commands/simulate-options.js';
import { runCli } from '../helpers/cli.js';

const CONVERSATION = 'test/fixtures/mooncake/conversation-slice.jsonl';
const SYNTHETIC = 'test/fixtures/mooncake/synthetic-slice.jsonl';

interface TraceJson {
  mode: string;
  trace: { requests: number; promptTokens: number; hitTokens: number; tokenHitRatio: number };
  evictions?: number;
  chunksDroppedForCapacity: number;
  holes?: number;
  ok: boolean;
}

function parse(stdout: string): TraceJson {
  const lines = stdout.trim().split('\n');
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0]!) as TraceJson;
}

describe.concurrent('kvoff simulate --trace', () => {
  it('both modes print the trace figures, equal for a slice replayed one by one', async () => {
    const common = [
      ...['--trace', SYNTHETIC, '--trace-limit', '50'],
      ...['--capacity-tokens', '200000', '--cache-policy', 'arc'],
    ];
    const [cache, threads] = await Promise.all([
      runCli(['simulate', ...common, '--trace-mode', 'cache', '--json']),
      // Arrivals at a thousand times the trace's pace: the 50 requests span 10 s of it.
      runCli(['simulate', ...common, '--trace-window', '1', '--speed', '1000', '--json']),
    ]);
    expect(cache.stderr).toBe('');
    expect(cache.code).toBe(0);
    expect(threads.code).toBe(0);
    const c = parse(cache.stdout);
    const t = parse(threads.stdout);
    expect(c.mode).toBe('cache');
    expect(t.mode).toBe('threads');
    expect(Object.keys(c.trace).sort()).toEqual([
      'hitTokens',
      'promptTokens',
      'requests',
      'tokenHitRatio',
    ]);
    expect(c.trace.requests).toBe(50);
    expect(c.trace.hitTokens).toBeGreaterThan(0);
    expect(c.trace.tokenHitRatio).toBeCloseTo(c.trace.hitTokens / c.trace.promptTokens, 12);
    // ARC evicts here, and refuses some stores (T1 under its target, T2 busy or empty).
    expect(c.evictions).toBeGreaterThan(0);
    expect(c.chunksDroppedForCapacity).toBeGreaterThan(0);
    expect(t.trace).toEqual(c.trace);
    expect(t.chunksDroppedForCapacity).toBe(c.chunksDroppedForCapacity);
    expect(t.holes).toBe(0);
    expect(t.ok).toBe(true);
  });

  it('a bad trace line is named: exit 2', async () => {
    const run = await runCli(['simulate', '--trace', 'package.json', '--trace-mode', 'cache']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/invalid trace: package\.json line 1: not a JSON object/);
  });
});

// Option rules, without a process each: the plan is pure.
describe('parseTraceOptions / parseSimulateOptions', () => {
  const cli =
    (...names: string[]) =>
    (name: string) =>
      names.includes(name);
  const trace = { trace: CONVERSATION };

  it('--trace sets a full-attention model with 512-token chunks and small blocks unless given', () => {
    const plan = parseTraceOptions({ ...trace, groups: 'hybrid', blocksPerChunk: '4' }, cli());
    expect(plan).toMatchObject({
      mode: 'threads',
      blocksPerChunk: 32,
      blockBytes: 8,
      capacityTokens: 0,
    });
    expect(plan.groups).toEqual([{ kind: 'full', tokensPerBlock: 16 }]);
    const given = parseTraceOptions({ ...trace, blocksPerChunk: '8' }, cli('blocksPerChunk'));
    expect(given.blocksPerChunk).toBe(8);
  });

  it.each([
    [
      { groups: 'hybrid', traceMode: 'cache' },
      ['groups'],
      '--groups: the cache mode models one full-attention group',
    ],
    [{ speed: '10', traceMode: 'cache' }, ['speed'], '--speed: is not used by --trace-mode cache'],
    [{ requests: '4' }, ['requests'], '--requests: is not used by a trace replay'],
    [{ cachePolicy: 'mru' }, [], 'unknown cache policy "mru"'],
    [{ traceMode: 'disk' }, [], '--trace-mode: must be one of threads, cache'],
    [{ storeThreshold: '0' }, [], '--store-threshold: must be an integer in [1,'],
    [{ speed: '0' }, [], '--speed: must be above 0'],
  ])('refuses %j with a typed error naming the option', (raw, given, message) => {
    expect(() => parseTraceOptions({ ...trace, ...raw }, cli(...given))).toThrow(
      expect.objectContaining({
        code: expect.stringMatching(/^KVOFF_/),
        message: expect.stringContaining(message),
      }),
    );
  });

  it('trace options need --trace', () => {
    expect(() =>
      parseSimulateOptions({ capacityTokens: '1000' } as SimulateRawOptions, cli('capacityTokens')),
    ).toThrow('--capacity-tokens: needs --trace FILE');
  });
});
