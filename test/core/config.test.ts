// Config validation: every invalid or inconsistent config gets a ConfigError
// that names the field and the rule it breaks; valid configs derive the chunk
// geometry exactly.
import { describe, expect, it } from 'vitest';
import { CONFIG_DEFAULTS, CONFIG_LIMITS, resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import { ConfigError, KvoffError } from '../../src/errors.js';

const BASE: ConfigInput = {
  groups: [{ kind: 'full', tokensPerBlock: 16 }],
  tokensPerHash: 16,
  maxRequests: 4,
  maxBlocksPerRequest: 8,
  gpuBlocks: 64,
  tierChunks: 16,
  bytesPerBlock: 64,
};

/** Resolves `input`, expects a ConfigError, and returns it for field/rule checks. */
function rejection(input: unknown): ConfigError {
  try {
    resolveConfig(input as ConfigInput);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    expect(e).toBeInstanceOf(KvoffError);
    const err = e as ConfigError;
    expect(err.code).toBe('KVOFF_INVALID_CONFIG');
    // The message carries both, so a log line alone says what to fix.
    expect(err.message).toContain(err.field);
    expect(err.message).toContain(err.rule);
    return err;
  }
  throw new Error('expected a ConfigError, the config was accepted');
}

function expectRejected(input: unknown, field: string, rule: RegExp): void {
  const err = rejection(input);
  expect(err.field).toBe(field);
  expect(err.rule).toMatch(rule);
}

describe('rejected configs name the field and the rule', () => {
  it('not an object', () => {
    expectRejected(null, 'config', /object/);
    expectRejected(42, 'config', /object/);
  });

  it('tokensPerBlock not a multiple of tokensPerHash', () => {
    const err = rejection({
      ...BASE,
      groups: [
        { kind: 'full', tokensPerBlock: 16 },
        { kind: 'full', tokensPerBlock: 24 },
      ],
      tokensPerHash: 16,
    });
    expect(err.field).toBe('groups[1].tokensPerBlock');
    expect(err.rule).toMatch(/multiple of tokensPerHash/);
    expect(err.rule).toContain('24');
    expect(err.rule).toContain('16');
  });

  it('sliding-window without a window', () => {
    expectRejected(
      { ...BASE, groups: [{ kind: 'sliding-window', tokensPerBlock: 16 }] },
      'groups[0].windowTokens',
      /integer/,
    );
  });

  it('sliding-window with a zero, negative or fractional window', () => {
    for (const windowTokens of [0, -16]) {
      expectRejected(
        { ...BASE, groups: [{ kind: 'sliding-window', tokensPerBlock: 16, windowTokens }] },
        'groups[0].windowTokens',
        /at least 1/,
      );
    }
    expectRejected(
      { ...BASE, groups: [{ kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 7.5 }] },
      'groups[0].windowTokens',
      /integer/,
    );
  });

  it('a window on a full-attention group', () => {
    expectRejected(
      {
        ...BASE,
        groups: [
          { kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 64 },
          { kind: 'full', tokensPerBlock: 16, windowTokens: 64 },
        ],
      },
      'groups[1].windowTokens',
      /only sliding-window/,
    );
  });

  it('a window on a mamba group', () => {
    expectRejected(
      { ...BASE, groups: [{ kind: 'mamba', tokensPerBlock: 16, windowTokens: 64 }] },
      'groups[0].windowTokens',
      /only sliding-window/,
    );
  });

  it('an unknown group kind', () => {
    expectRejected(
      { ...BASE, groups: [{ kind: 'linear', tokensPerBlock: 16 }] },
      'groups[0].kind',
      /full, sliding-window, mamba/,
    );
  });

  it('a group that is not an object', () => {
    expectRejected({ ...BASE, groups: [null] }, 'groups[0]', /object/);
  });

  it('non-integers', () => {
    expectRejected({ ...BASE, tokensPerHash: 1.5 }, 'tokensPerHash', /integer/);
    expectRejected({ ...BASE, tokensPerHash: '16' }, 'tokensPerHash', /integer/);
    expectRejected({ ...BASE, tokensPerHash: undefined }, 'tokensPerHash', /integer/);
    expectRejected({ ...BASE, blocksPerChunk: 2.5 }, 'blocksPerChunk', /integer/);
    expectRejected({ ...BASE, maxRequests: NaN }, 'maxRequests', /integer/);
    expectRejected({ ...BASE, maxBlocksPerRequest: 8.1 }, 'maxBlocksPerRequest', /integer/);
    expectRejected({ ...BASE, gpuBlocks: Infinity }, 'gpuBlocks', /integer/);
    expectRejected({ ...BASE, tierChunks: 3.25 }, 'tierChunks', /integer/);
    expectRejected({ ...BASE, bytesPerBlock: 64.5 }, 'bytesPerBlock', /integer/);
    expectRejected(
      { ...BASE, groups: [{ kind: 'full', tokensPerBlock: 16.5 }] },
      'groups[0].tokensPerBlock',
      /integer/,
    );
  });

  it('zero and negative values', () => {
    for (const v of [0, -1]) {
      expectRejected({ ...BASE, tokensPerHash: v }, 'tokensPerHash', /at least 1/);
      expectRejected({ ...BASE, blocksPerChunk: v }, 'blocksPerChunk', /at least 1/);
      expectRejected({ ...BASE, maxRequests: v }, 'maxRequests', /at least 1/);
      expectRejected({ ...BASE, maxBlocksPerRequest: v }, 'maxBlocksPerRequest', /at least 1/);
      expectRejected({ ...BASE, gpuBlocks: v }, 'gpuBlocks', /at least 1/);
      expectRejected({ ...BASE, tierChunks: v }, 'tierChunks', /at least 1/);
      expectRejected({ ...BASE, bytesPerBlock: v }, 'bytesPerBlock', /at least 1/);
      expectRejected(
        { ...BASE, groups: [{ kind: 'full', tokensPerBlock: v }] },
        'groups[0].tokensPerBlock',
        /at least 1/,
      );
    }
  });

  it('a single GPU block (block 0 is the null block)', () => {
    expectRejected({ ...BASE, gpuBlocks: 1 }, 'gpuBlocks', /at least 2/);
  });

  it('values over their limits', () => {
    const over = (n: number) => n + 1;
    expectRejected(
      { ...BASE, maxRequests: over(CONFIG_LIMITS.maxRequestsMax) },
      'maxRequests',
      /at most/,
    );
    expectRejected(
      { ...BASE, blocksPerChunk: over(CONFIG_LIMITS.blocksPerChunkMax) },
      'blocksPerChunk',
      /at most/,
    );
    expectRejected(
      { ...BASE, maxBlocksPerRequest: over(CONFIG_LIMITS.maxBlocksPerRequestMax) },
      'maxBlocksPerRequest',
      /at most/,
    );
    expectRejected(
      { ...BASE, gpuBlocks: over(CONFIG_LIMITS.gpuBlocksMax) },
      'gpuBlocks',
      /at most/,
    );
    expectRejected(
      { ...BASE, tierChunks: over(CONFIG_LIMITS.tierChunksMax) },
      'tierChunks',
      /at most/,
    );
    expectRejected(
      { ...BASE, bytesPerBlock: over(CONFIG_LIMITS.bytesPerBlockMax) },
      'bytesPerBlock',
      /at most/,
    );
    expectRejected(
      {
        ...BASE,
        groups: [{ kind: 'full', tokensPerBlock: over(CONFIG_LIMITS.tokensPerBlockMax) }],
      },
      'groups[0].tokensPerBlock',
      /at most/,
    );
  });

  it('tokensPerHash and the window over their limits', () => {
    expectRejected({ ...BASE, tokensPerHash: 2 ** 16 + 1 }, 'tokensPerHash', /at most 65536/);
    expectRejected(
      {
        ...BASE,
        groups: [{ kind: 'sliding-window', tokensPerBlock: 16, windowTokens: 2 ** 30 + 1 }],
      },
      'groups[0].windowTokens',
      /at most/,
    );
  });

  it('empty or missing groups', () => {
    expectRejected({ ...BASE, groups: [] }, 'groups', /non-empty/);
    expectRejected({ ...BASE, groups: undefined }, 'groups', /non-empty/);
    expectRejected({ ...BASE, groups: 'full' }, 'groups', /non-empty/);
  });

  it('too many groups', () => {
    const groups = Array.from({ length: CONFIG_LIMITS.groupsMax + 1 }, () => ({
      kind: 'full' as const,
      tokensPerBlock: 16,
    }));
    expectRejected({ ...BASE, groups }, 'groups', new RegExp(`at most ${CONFIG_LIMITS.groupsMax}`));
    // Exactly the limit is fine.
    expect(resolveConfig({ ...BASE, groups: groups.slice(1) }).groups).toHaveLength(
      CONFIG_LIMITS.groupsMax,
    );
  });

  it('maxBlocksPerRequest below blocksPerChunk', () => {
    expectRejected(
      { ...BASE, blocksPerChunk: 4, maxBlocksPerRequest: 3 },
      'maxBlocksPerRequest',
      /at least blocksPerChunk \(4\)/,
    );
    expect(resolveConfig({ ...BASE, blocksPerChunk: 4, maxBlocksPerRequest: 4 })).toBeTruthy();
  });

  it('bytesPerBlock not a multiple of 8', () => {
    expectRejected({ ...BASE, bytesPerBlock: 12 }, 'bytesPerBlock', /multiple of 8/);
    expect(resolveConfig({ ...BASE, bytesPerBlock: 8 }).bytesPerBlock).toBe(8);
  });

  it('a config whose shared memory would exceed the limit', () => {
    // Each field is within its own limit; together the arenas do not fit.
    const err = rejection({
      ...BASE,
      gpuBlocks: CONFIG_LIMITS.gpuBlocksMax,
      bytesPerBlock: 1024,
    });
    expect(err.field).toBe('capacities');
    expect(err.rule).toMatch(/shared memory .* over the 8 GiB limit/);
    // Request state alone can exceed it too.
    const state = rejection({
      ...BASE,
      maxRequests: CONFIG_LIMITS.maxRequestsMax,
      maxBlocksPerRequest: 1 << 14,
    });
    expect(state.field).toBe('capacities');
  });

  it('non-boolean flags', () => {
    expectRejected({ ...BASE, offloadPromptOnly: 'yes' }, 'offloadPromptOnly', /boolean/);
    expectRejected({ ...BASE, offloadPromptOnly: 1 }, 'offloadPromptOnly', /boolean/);
    expectRejected({ ...BASE, padHotWords: 0 }, 'padHotWords', /boolean/);
    expectRejected({ ...BASE, padHotWords: 'false' }, 'padHotWords', /boolean/);
    expectRejected(
      { ...BASE, groups: [{ kind: 'full', tokensPerBlock: 16, eagle: 'true' }] },
      'groups[0].eagle',
      /boolean/,
    );
  });
});

describe('derived values', () => {
  it('chunk geometry per group', () => {
    const c = resolveConfig({
      groups: [
        { kind: 'full', tokensPerBlock: 16 },
        { kind: 'sliding-window', tokensPerBlock: 32, windowTokens: 100, eagle: true },
        { kind: 'mamba', tokensPerBlock: 64 },
      ],
      blocksPerChunk: 2,
      tokensPerHash: 8,
    });
    expect(c.groups.map((g) => g.index)).toEqual([0, 1, 2]);
    expect(c.groups.map((g) => g.tokensPerChunk)).toEqual([32, 64, 128]);
    expect(c.groups.map((g) => g.hashesPerChunk)).toEqual([4, 8, 16]);
    // sliding window: ceil(100 / 64) = 2 chunks; mamba: 1; full: none.
    expect(c.groups.map((g) => g.windowChunks)).toEqual([null, 2, 1]);
    expect(c.groups.map((g) => g.eagle)).toEqual([false, true, false]);
    expect(c.groups.map((g) => g.kind)).toEqual(['full', 'sliding-window', 'mamba']);
  });

  it('windowChunks rounds up and is exact on a chunk boundary', () => {
    const window = (windowTokens: number) =>
      resolveConfig({
        ...BASE,
        groups: [{ kind: 'sliding-window', tokensPerBlock: 16, windowTokens }],
        blocksPerChunk: 2,
      }).groups[0]!.windowChunks;
    expect(window(1)).toBe(1);
    expect(window(32)).toBe(1);
    expect(window(33)).toBe(2);
    expect(window(64)).toBe(2);
    expect(window(65)).toBe(3);
  });

  it('defaults and per-request capacities', () => {
    const c = resolveConfig({
      groups: [
        { kind: 'full', tokensPerBlock: 16 },
        { kind: 'full', tokensPerBlock: 32 },
      ],
      tokensPerHash: 8,
      blocksPerChunk: 3,
      maxBlocksPerRequest: 10,
    });
    expect(c.blocksPerChunk).toBe(3);
    expect(c.offloadPromptOnly).toBe(CONFIG_DEFAULTS.offloadPromptOnly);
    expect(c.maxRequests).toBe(CONFIG_DEFAULTS.maxRequests);
    expect(c.gpuBlocks).toBe(CONFIG_DEFAULTS.gpuBlocks);
    expect(c.tierChunks).toBe(CONFIG_DEFAULTS.tierChunks);
    expect(c.bytesPerBlock).toBe(CONFIG_DEFAULTS.bytesPerBlock);
    expect(c.padHotWords).toBe(CONFIG_DEFAULTS.padHotWords);
    expect(c.maxChunksPerRequest).toBe(3); // floor(10 / 3)
    expect(c.maxTokensPerRequest).toBe(320); // 10 blocks of the largest group's 32 tokens
    expect(c.maxHashesPerRequest).toBe(40); // 320 / 8
    expect(resolveConfig({ ...BASE, offloadPromptOnly: true }).offloadPromptOnly).toBe(true);
    expect(resolveConfig({ ...BASE, padHotWords: false }).padHotWords).toBe(false);
  });

  it('the resolved config is frozen', () => {
    const c = resolveConfig(BASE);
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(c.groups)).toBe(true);
    expect(Object.isFrozen(c.groups[0])).toBe(true);
  });
});

describe('namespace, key hash and key width', () => {
  const base = { groups: [{ kind: 'full' as const, tokensPerBlock: 4 }], tokensPerHash: 4 };

  it('resolve: absent is null, fields are kept and frozen, xxh64 and a narrow key only on request', () => {
    const plain = resolveConfig(base);
    expect(plain).toMatchObject({ namespace: null, keyHash: 'sha256', keyBits: 64 });
    const c = resolveConfig({
      ...base,
      namespace: { model: 'm', revision: 'r', adapter: 'a', dtype: 'fp8', extra: 'x' },
      keyHash: 'xxh64',
      unsafeKeyBits: 16,
    });
    expect(c.namespace).toEqual({
      model: 'm',
      revision: 'r',
      adapter: 'a',
      dtype: 'fp8',
      extra: 'x',
    });
    expect(Object.isFrozen(c.namespace)).toBe(true);
    expect(c).toMatchObject({ keyHash: 'xxh64', keyBits: 16 });
  });

  it.each([
    [{ namespace: {} }, 'namespace.model'],
    [{ namespace: { model: '' } }, 'namespace.model'],
    [{ namespace: { model: 7 } }, 'namespace.model'],
    [{ namespace: { model: 'm', revision: '' } }, 'namespace.revision'],
    [{ namespace: { model: 'm', adapter: '\udc00' } }, 'namespace.adapter'],
    [{ namespace: { model: 'm', extra: 'x'.repeat(1025) } }, 'namespace.extra'],
    [{ namespace: { model: 'm', lora: 'x' } }, 'namespace.lora'],
    [{ namespace: 'm' }, 'namespace'],
    [{ keyHash: 'md5' }, 'keyHash'],
    [{ unsafeKeyBits: 8 }, 'unsafeKeyBits'],
    [{ unsafeKeyBits: 65 }, 'unsafeKeyBits'],
  ])('%j is refused naming %s', (extra, field) => {
    let err: unknown;
    try {
      resolveConfig({ ...base, ...(extra as object) });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe(field);
  });
});
