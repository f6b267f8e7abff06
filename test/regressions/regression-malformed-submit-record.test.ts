// Regression (issue 10, item 9): a truncated submit-ring record such as
// [1, 987654, 50] left a ghost request holding 47 blocks and a slot after
// close(). The engine now checks every record (length, field ranges, a
// duplicate id); a malformed one is refused, counted in recordsRefused, and
// starts nothing, so leakReport() after close() is all zero.
import { describe, expect, it } from 'vitest';
import { RuntimeViews } from '../../src/runtime/buffers.js';
import { OP_SUBMIT, UNSET } from '../../src/runtime/protocol.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { NO_LEAKS } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('regression: malformed submit-ring record', () => {
  it('truncated and out-of-range records are refused and counted; nothing leaks after close()', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID });
    const views = new RuntimeViews(rt.config, rt.buffers);
    const ring = views.ring('submit');
    const max = rt.config.maxTokensPerRequest;
    const bad: number[][] = [
      [OP_SUBMIT, 987654, 50], // the truncated record
      [OP_SUBMIT, 987655, 50, UNSET, 0, UNSET, UNSET], // no token count
      [OP_SUBMIT, 987656, 0, UNSET, 0, UNSET, UNSET, 0], // empty prompt
      [OP_SUBMIT, 987657, max, UNSET, 0, UNSET, UNSET, 0], // no room to decode
      [OP_SUBMIT, 987658, 3, UNSET, 0, UNSET, UNSET, 3, 1, 2], // fewer tokens than counted
      [OP_SUBMIT, 987659, 2, UNSET, 0, 0, UNSET, 0], // zero decode tokens
      [OP_SUBMIT, -4, 20, UNSET, 0, UNSET, UNSET, 0], // negative id
      [99, 987660, 20, UNSET, 0, UNSET, UNSET, 0], // not a submission
    ];
    for (const r of bad) expect(ring.push(r)).toBe(true);
    views.doorbell('scheduler').ring();
    // A good request after them still runs.
    const summary = await rt.submit({ promptLength: 64, maxDecodeTokens: 2 });
    expect(summary.status).toBe('finished');
    const deadline = Date.now() + 10_000;
    while (rt.stats().recordsRefused < bad.length && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(rt.stats().recordsRefused).toBe(bad.length);
    expect(rt.stats().requests).toBe(1);
    await rt.close();
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });
});
