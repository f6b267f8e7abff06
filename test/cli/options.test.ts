// Option parsing of `kvoff simulate` and the terminal conventions, without
// starting a runtime.
import { describe, expect, it, vi } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { InvalidArgumentError, KvoffError } from '../../src/errors.js';
import { intOption } from '../../src/commands/options.js';
import { parseGroups, parseSimulateOptions } from '../../src/commands/simulate-options.js';
import { colorAllowed, painter, PLAIN_PROGRESS_MS, progress } from '../../src/commands/term.js';

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof KvoffError) return `${err.code}: ${err.message}`;
    throw err;
  }
  return 'no error';
}

describe('intOption', () => {
  it('accepts plain integers and keeps undefined', () => {
    expect(intOption('--n', '611840', 0, 1e9)).toBe(611840);
    expect(intOption('--n', ' 42 ', 0, 1e9)).toBe(42);
    expect(intOption('--n', undefined, 0, 10)).toBeUndefined();
  });
  // Regression (issue 31, item 4): `--requests ,100` and `_100` ran 100 requests.
  it.each([
    ['abc'],
    ['1.5'],
    ['1e5'],
    ['0x10'],
    [''],
    ['12ms'],
    [',100'],
    ['_100'],
    ['611_840'],
    ['611,840'],
    ['1,0'],
  ])('refuses %j', (raw) => {
    expect(() => intOption('--n', raw, 0, 1e9)).toThrow(InvalidArgumentError);
  });
  it('names the option and the range when out of range', () => {
    expect(codeOf(() => intOption('--requests', '0', 1, 4096))).toBe(
      'KVOFF_INVALID_ARGUMENT: invalid argument: --requests: must be an integer in [1, 4096], got 0',
    );
  });
});

describe('parseSimulateOptions', () => {
  it('defaults to the seeds overflow shape: 16 x ~50k tokens against 611,840 tokens, hybrid', () => {
    const plan = parseSimulateOptions({});
    expect(plan.policy).toBe('ready-prefix');
    expect(plan.workload).toMatchObject({ requests: 16, promptTokens: 50_000 });
    expect(plan.gpuTokens).toBe(611_840);
    const config = resolveConfig(plan.config);
    expect(config.gpuBlocks * 16).toBe(611_840);
    expect(config.groups.map((g) => g.kind)).toEqual(['full', 'sliding-window']);
    // Every request fits its block table, prompt variation and decode included.
    expect(config.maxTokensPerRequest).toBeGreaterThan(50_000 * 1.04 + 512);
    // Total demand is over the pool: preemption must happen.
    expect(16 * 50_000).toBeGreaterThan(611_840);
    expect(plan.traceRequests).toBe(0);
    expect(plan.json).toBe(false);
  });

  it('maps the workload and lag options', () => {
    const plan = parseSimulateOptions({
      requests: '4',
      promptTokens: '8192',
      gpuTokens: '24576',
      groups: 'full:16:eagle,mamba:16',
      lagHashesPerWake: '8',
      lagPublishDelayMs: '3',
      lagJitterMs: '2',
      seed: '42',
      transferThreads: '2',
      policy: 'legacy-zip',
      abortRate: '0.01',
      report: 'out.html',
      json: true,
    });
    expect(plan.workload).toMatchObject({ requests: 4, promptTokens: 8192, seed: 42 });
    expect(plan.config.gpuBlocks).toBe(1536);
    expect(plan.config.groups).toEqual([
      { kind: 'full', tokensPerBlock: 16, eagle: true },
      { kind: 'mamba', tokensPerBlock: 16 },
    ]);
    expect(plan.lag).toEqual({
      seed: 42,
      hasherHashesPerWake: 8,
      allocatorPublishDelayMs: 3,
      jitterMs: 2,
    });
    expect(plan.abortRate).toBe(0.01);
    expect(parseSimulateOptions({ abortRate: '0' }).abortRate).toBe(0);
    // The simulation's own default, not the embedding API's 0: see SIMULATE_DEFAULTS.
    expect(parseSimulateOptions({}).abortRate).toBe(0.002);
    expect(parseSimulateOptions({}).offload).toBe(true);
    expect(parseSimulateOptions({ offload: false }).offload).toBe(false);
    expect(plan).toMatchObject({
      transferThreads: 2,
      policy: 'legacy-zip',
      report: 'out.html',
      traceRequests: 3,
      json: true,
    });
  });

  it.each([
    [{ requests: '0' }, /--requests: must be an integer in \[1, 4096\]/],
    [{ requests: 'many' }, /--requests: "many" is not an integer/],
    [{ promptTokens: '8' }, /--prompt-tokens/],
    [{ gpuTokens: '-5' }, /--gpu-tokens/],
    [{ seed: '1.5' }, /--seed/],
    [{ transferThreads: '0' }, /--transfer-threads/],
    [{ lagPublishDelayMs: '5000' }, /--lag-publish-delay-ms: must be an integer in \[0, 1000\]/],
    [{ groups: 'dense:16' }, /--groups: unknown group kind "dense"/],
    [{ groups: 'sliding-window:16' }, /needs its window/],
    [{ groups: 'full:16,' }, /--groups/],
    [{ report: ' ' }, /--report: needs a file name/],
    [{ decodeTokens: '0' }, /--decode-tokens/],
    [{ abortRate: '2' }, /--abort-rate: must be a number in \[0, 1\], got 2/],
    [{ abortRate: 'often' }, /--abort-rate: "often" is not a number/],
    // Regression (issue 13): a negative rate is out of range, not "not a number".
    [{ abortRate: '-0.1' }, /--abort-rate: must be a number in \[0, 1\], got -0.1/],
    [{ transferThreads: '65' }, /--transfer-threads: must be an integer in \[1, 64\], got 65/],
    [{ blockBytes: '12' }, /--block-bytes: must be a multiple of 8, got 12/],
  ])('refuses %j with one line naming the option', (raw, message) => {
    const text = codeOf(() => parseSimulateOptions(raw));
    expect(text).toMatch(/^KVOFF_INVALID_ARGUMENT: /);
    expect(text).toMatch(message);
    expect(text).not.toContain('\n');
  });

  // Regression (issue 31, item 4): `--policy foo` did not name the option, unlike every other usage error.
  it('refuses an unknown policy naming --policy and the known ones', () => {
    expect(codeOf(() => parseSimulateOptions({ policy: 'yolo' }))).toBe(
      'KVOFF_INVALID_ARGUMENT: invalid argument: --policy: unknown store policy "yolo"; known: ready-prefix, legacy-assert, legacy-zip',
    );
  });

  // Regression (issue 31, item 2): `--tier-chunks 32` with 2,048-token prompts
  // stored nothing (every chunk dropped for capacity) and the run said ok.
  it('refuses a tier that cannot hold what a hit on one prompt needs', () => {
    expect(codeOf(() => parseSimulateOptions({ promptTokens: '2048', tierChunks: '32' }))).toBe(
      "KVOFF_INVALID_ARGUMENT: invalid argument: --tier-chunks: a tier of 32 chunks can never hold one request's prompt: " +
        'a hit on ~2048 tokens needs at least 46 chunks (30 full + 16 sliding-window); raise --tier-chunks or lower --prompt-tokens',
    );
    expect(parseSimulateOptions({ promptTokens: '2048', tierChunks: '46' }).config.tierChunks).toBe(
      46,
    );
    // One full-attention group: its 30 chunks of the shortest prompt drawn.
    expect(
      codeOf(() =>
        parseSimulateOptions({ groups: 'full', promptTokens: '2048', tierChunks: '29' }),
      ),
    ).toMatch(/needs at least 30 chunks \(30 full\)/);
  });

  it('refuses a config the runtime could not lay out, naming the field', () => {
    const raw = { groups: 'full:1', gpuTokens: '16777216', tierChunks: '4194304' };
    expect(codeOf(() => parseSimulateOptions(raw))).toMatch(
      /KVOFF_INVALID_CONFIG: invalid config: capacities: shared memory would be/,
    );
  });
});

describe('parseGroups', () => {
  it('knows the presets and copies them', () => {
    const a = parseGroups('hybrid');
    a[0]!.tokensPerBlock = 1;
    expect(parseGroups('hybrid')[0]!.tokensPerBlock).toBe(16);
    expect(parseGroups('full')).toEqual([{ kind: 'full', tokensPerBlock: 16 }]);
  });
  it('parses a window', () => {
    expect(parseGroups('sliding-window:32:4096')).toEqual([
      { kind: 'sliding-window', tokensPerBlock: 32, windowTokens: 4096 },
    ]);
  });
});

describe('terminal conventions', () => {
  it('colours only a TTY without NO_COLOR', () => {
    const tty = { isTTY: true, write: () => true };
    expect(colorAllowed(tty, {})).toBe(true);
    expect(colorAllowed(tty, { NO_COLOR: '1' })).toBe(false);
    expect(colorAllowed({ isTTY: false, write: () => true }, {})).toBe(false);
    expect(painter(false).red('x')).toBe('x');
    expect(painter(true).red('x')).toBe('\u001b[31mx\u001b[39m');
  });

  it('writes plain lines (no ANSI, no carriage return) when not a TTY', () => {
    let out = '';
    const fake = {
      isTTY: false,
      write(s: string) {
        out += s;
        return true;
      },
    } as unknown as typeof process.stderr;
    const now = vi.spyOn(Date, 'now').mockReturnValue(1_000_000);
    const p = progress(fake, 10, 'simulate');
    p.update(1, 'requests');
    expect(out).toBe('');
    now.mockReturnValue(1_000_000 + PLAIN_PROGRESS_MS);
    p.update(3, 'requests');
    p.update(3, 'requests');
    p.stop();
    now.mockRestore();
    expect(out).toBe('simulate: 3/10 requests\n');
    expect(progress(fake, 10, 'x', { quiet: true }).update(1, '')).toBeUndefined();
  });
});
