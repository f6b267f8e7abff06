// The text `kvoff simulate` prints claims only what its counters say (issue
// 31, item 2): "1 stored chunks were evicted before the check" came from
// chunksStored - entriesVerified with no eviction at all (a copy was still in
// flight), and "ok: every chunk below the ready prefix was stored" ended a run
// that had stored nothing (every chunk dropped for capacity).
import { describe, expect, it } from 'vitest';
import { formatResult } from '../../src/commands/simulate-result.js';
import type { SimulateResult } from '../../src/commands/simulate-result.js';
import { zeroCounters } from '../../src/tier/lower.js';

function result(over: Partial<SimulateResult> = {}): SimulateResult {
  return {
    policy: 'ready-prefix',
    workload: {
      requests: 2,
      promptTokens: 2048,
      prefixes: 4,
      maxDecodeTokens: 512,
      seed: 1,
      gpuTokens: 65_536,
      groups: 'hybrid',
      transferThreads: 1,
      backend: 'shared-memory',
      ranks: 1,
      rankLayout: 'sharded',
      abortRate: 0.002,
      offload: true,
      blockBytes: 4096,
    },
    requests: 2,
    completed: 2,
    aborted: 0,
    preemptions: 0,
    chunksStored: 160,
    chunksDeferred: 4,
    chunksSkippedUnready: 0,
    chunksDeferredThenStored: 2,
    allocationRetries: 0,
    tierHits: 0,
    chunksDroppedForCapacity: 0,
    chunksDroppedUnready: 0,
    chunksUnreachable: 0,
    snapshotRetries: 0,
    bytesCopied: 160 * 4 * 4096,
    tierCapacity: 16_384,
    gbPerSecond: 0.5,
    holes: 0,
    mismatches: 0,
    doubleStores: 0,
    entriesVerified: 160,
    entriesInFlight: 0,
    wallSeconds: 3,
    tierUsed: 160,
    tiers: {
      host: zeroCounters(),
      disk: { ...zeroCounters(), authenticated: false, state: 'off' },
      redis: { ...zeroCounters(), authenticated: false, state: 'off' },
    },
    chunksTransferFailed: 0,
    loadFailures: 0,
    loadFailureTokensRecomputed: 0,
    requestsFailedByLoad: 0,
    memory: {
      rssBytes: 0,
      main: { heapUsedBytes: 0, externalBytes: 0 },
    } as SimulateResult['memory'],
    ok: true,
    ...over,
  };
}

function line(text: string, label: string): string {
  return text.split('\n').find((l) => l.trimStart().startsWith(label)) ?? '';
}

describe('kvoff simulate text', () => {
  it('a clean run: every stored chunk verified, the plain ok line', () => {
    const text = formatResult(result(), false);
    expect(line(text, 'tier entries verified')).toMatch(
      /160 \(every resident entry, byte for byte\)$/,
    );
    expect(text).toContain(
      'ok: every chunk below the ready prefix was stored; every stored byte matches its key',
    );
  });

  it('regression: an entry not verified without an eviction is not called evicted', () => {
    const text = formatResult(result({ entriesVerified: 159, entriesInFlight: 1 }), false);
    const verified = line(text, 'tier entries verified');
    expect(verified).not.toMatch(/evicted/);
    expect(verified).toContain('1 still being copied when checked, not verified');
    expect(text).toContain('every checked byte matches its key');
  });

  it('evictions come from the tier counter, with singular and plural right', () => {
    const host = (evictions: number) => ({ ...zeroCounters(), evictions });
    const one = formatResult(
      result({ entriesVerified: 159, tiers: { ...result().tiers, host: host(1) } }),
      false,
    );
    expect(line(one, 'tier entries verified')).toContain(
      '1 entry evicted before the check (the tier holds 16384 chunks)',
    );
    const two = formatResult(
      result({ entriesVerified: 158, tiers: { ...result().tiers, host: host(2) } }),
      false,
    );
    expect(line(two, 'tier entries verified')).toContain('2 entries evicted before the check');
  });

  it('regression: a run that dropped chunks for capacity says so in its ok line', () => {
    const text = formatResult(
      result({
        chunksStored: 0,
        entriesVerified: 0,
        tierUsed: 0,
        chunksDroppedForCapacity: 82,
        tierCapacity: 50,
      }),
      false,
    );
    expect(text).not.toContain('every chunk below the ready prefix was stored;');
    expect(text).toContain('not stored: 82 chunks dropped for capacity (the tier holds 50)');
    expect(text).not.toContain('every stored byte matches its key');
    expect(text).toContain('nothing was stored, so no byte was checked');
  });
});
