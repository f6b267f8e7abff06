// Regression (issue 31, item 2): verify() answered at once, so a copy still in
// flight when it was called was left out of the check, and `kvoff simulate`
// printed "1 stored chunks were evicted before the check" with no eviction
// (about 2 runs in 3 of `--requests 2 --prompt-tokens 2048`). verify() now
// waits (bounded) for the copies dispatched before it and counts what is
// still in flight. Slow copies (transferDelayMs) make the window wide: a
// request's summary arrives while its last copies are still running.
import { describe, expect, it } from 'vitest';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { TINY_FULL } from '../helpers/configs.js';

describe('regression: verify() checks the copies in flight when it is called', () => {
  it('every stored chunk is verified, none reported in flight, with 300 ms copies', async () => {
    const rt = await OffloadRuntime.start({ config: TINY_FULL, transferDelayMs: 300 });
    try {
      const summary = await rt.submit({ promptLength: 64, maxDecodeTokens: 4 });
      expect(summary.chunksStored).toBeGreaterThan(0);
      const report = await rt.verify();
      const { chunksStored, tiers } = rt.stats();
      expect(tiers.host.evictions).toBe(0);
      expect(report.entriesInFlight).toBe(0);
      expect(report.entriesChecked).toBe(chunksStored);
      expect(report.ok).toBe(true);
    } finally {
      await rt.close();
    }
  });
});
