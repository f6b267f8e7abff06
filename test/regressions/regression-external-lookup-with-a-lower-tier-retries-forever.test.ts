// An external host over a disk tier was answered 'retry' on every lookup of a
// prompt the tiers held only part of: each call took a new lookup tag, the
// store keeps the lower levels' resolution by tag, so every call started a
// new resolution and the answer of the previous one (its chunks promoted into
// host memory) was never used for the question it was asked for. With 200
// calls the host never got its hit.
//
// Here: the prompt's first 10 chunks are on a real disk directory (written by
// an earlier runtime), the host asks for 15; the lookup path keeps the tag of
// a prompt answered "ask again later" for the next lookup of the same prompt,
// so the request, not the call, owns the resolution: the hit comes within a
// few calls, and it is the 10 chunks the disk held.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';

const dir = mkdtempSync(join(tmpdir(), 'kvoff-external-retry-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CONFIG = {
  ...DEFAULT_RUNTIME_CONFIG,
  groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
  blocksPerChunk: 4,
  namespace: { model: 'external-retry' },
};
/** 640 tokens: 10 chunks of 64, all on disk after the first runtime. */
const STORED = Array.from({ length: 640 }, (_, i) => (i * 31 + 7) % 40_000);
const CALLS_MAX = 200;

describe('an external host over a disk tier', () => {
  it('gets its hit after a few lookups of the same prompt, not "retry" on every call', async () => {
    const writer = await OffloadRuntime.start({ config: CONFIG, tiers: { disk: { dir } } });
    await writer.submit({ promptTokens: STORED, maxDecodeTokens: 2 });
    await writer.close();
    expect(writer.stats().tiers.disk.storedChunks).toBeGreaterThanOrEqual(10);

    const rt = await OffloadRuntime.start({
      config: CONFIG,
      external: true,
      tiers: { disk: { dir } },
    });
    // 5 more chunks than the disk holds: the host prefix never reaches what is asked.
    const prompt = [...STORED, ...Array.from({ length: 320 }, (_, i) => 40_001 + i)];
    const reasons: string[] = [];
    let answer = await rt.external.lookup(prompt);
    while (answer.deferred && reasons.length < CALLS_MAX) {
      reasons.push(answer.reason);
      await new Promise((r) => setTimeout(r, 2));
      answer = await rt.external.lookup(prompt);
    }
    expect(answer.deferred).toBe(false);
    expect(reasons.length).toBeLessThan(20);
    if (answer.deferred) return;
    expect(answer.hitTokens).toBe(640);
    expect(rt.stats().tiers.disk.hitChunks).toBe(10);
    rt.external.cancel(answer);
    await rt.close();
    expect(rt.leakReport()).toMatchObject({ tierEntriesReading: 0, loadLocks: 0 });
  }, 120_000);
});
