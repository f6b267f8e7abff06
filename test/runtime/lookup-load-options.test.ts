// A request's own load limits (vLLM's skip_reading_prefix_cache and
// max_load_tokens) through OffloadRuntime.submit and an external host's
// lookup: a request that skips reading hits nothing although its prefix is
// stored, and still stores its own chunks (vLLM's scheduler skips only the
// lookup); a cap limits the hit to the cap rounded down to whole chunks. Bad
// values are refused with a typed error and change nothing. Groups of
// different chunk sizes are refused where the runtime would load.
import { describe, expect, it } from 'vitest';
import { ConfigError, InvalidArgumentError } from '../../src/errors.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RequestSummary, RequestInput } from '../../src/runtime/runtime.js';
import { BAD_LOAD_OPTIONS, LOAD_OPTIONS_SEQUENCE } from '../helpers/load-options-cases.js';
import { checkAndClose } from '../helpers/runtime.js';

describe('per-request load limits through OffloadRuntime.submit', () => {
  it('skipReadingPrefixCache hits 0 over a stored prefix and still stores; maxLoadTokens caps the hit to whole chunks', async () => {
    const rt = await OffloadRuntime.start();
    const summaries: RequestSummary[] = [];
    for (const [req] of LOAD_OPTIONS_SEQUENCE) summaries.push(await rt.submit(req));
    expect(summaries.map((s) => s.hitChunks)).toEqual(LOAD_OPTIONS_SEQUENCE.map(([, hit]) => hit));
    expect(summaries.map((s) => s.status)).toEqual(summaries.map(() => 'finished'));
    // The skipping request stored its second half: 32 full-attention chunks at least.
    expect(summaries[1]!.chunksStored).toBeGreaterThanOrEqual(32);
    expect(rt.stats().mismatches).toBe(0);
    await checkAndClose(rt, summaries);
  });

  it('bad limits are refused with InvalidArgumentError naming the field; nothing is sent', async () => {
    const rt = await OffloadRuntime.start();
    for (const [fields, name] of BAD_LOAD_OPTIONS) {
      const submitted = rt.submit({ promptLength: 128, ...fields } as RequestInput);
      await expect(submitted).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(submitted).rejects.toThrow(name);
    }
    expect(rt.stats().requests).toBe(0);
    const ok = await rt.submit({ promptLength: 128, maxDecodeTokens: 2, maxLoadTokens: 64 });
    expect(ok.status).toBe('finished');
    expect(rt.stats().requests).toBe(1);
    await rt.close();
    expect(rt.leakReport()).toMatchObject({ slotsInUse: 0, blocksInUse: 0, pinsOutstanding: 0 });
  });
});

describe('groups of different chunk sizes and the load path', () => {
  const MIXED = {
    ...DEFAULT_RUNTIME_CONFIG,
    groups: [
      { kind: 'full' as const, tokensPerBlock: 16 },
      { kind: 'full' as const, tokensPerBlock: 32 },
    ],
  };

  it('start() refuses them with ConfigError while the engine loads from the tier, and runs them without loads', async () => {
    await expect(OffloadRuntime.start({ config: MIXED })).rejects.toBeInstanceOf(ConfigError);
    await expect(OffloadRuntime.start({ config: MIXED })).rejects.toThrow(/tokensPerChunk/);
    const rt = await OffloadRuntime.start({ config: MIXED, simulator: { loadFromTier: false } });
    const s = await rt.submit({ promptLength: 512, maxDecodeTokens: 2 });
    expect(s.status).toBe('finished');
    expect(s.chunksStored).toBeGreaterThan(0);
    expect(s.holes).toBe(0);
    await rt.close();
    // Offloading switched off loads nothing either.
    const off = await OffloadRuntime.start({ config: MIXED, offload: false });
    expect((await off.submit({ promptLength: 512, maxDecodeTokens: 2 })).status).toBe('finished');
    await off.close();
    expect(rt.leakReport()).toMatchObject({ slotsInUse: 0, blocksInUse: 0, pinsOutstanding: 0 });
  });

  it("an external host's lookup rejects with ConfigError, and with InvalidArgumentError for bad limits", async () => {
    const rt = await OffloadRuntime.start({ config: MIXED, external: true });
    await expect(rt.external.lookup([1, 2, 3])).rejects.toBeInstanceOf(ConfigError);
    await rt.close();
    const ok = await OffloadRuntime.start({ external: true });
    await expect(ok.external.lookup([1, 2, 3], { maxLoadTokens: -1 })).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await ok.close();
  });
});
