// Shared by the failure-class tests F7-F12: a disk level in a throwaway
// directory, a Redis level on this file's cluster, chunk payloads that differ
// per key, a wait for background writes, and a fuzz campaign run twice over
// the same seeds (safe, then with a test-only switch).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { fuzz } from '../../src/fuzz/run.js';
import type { FuzzReport } from '../../src/fuzz/run.js';
import type { RuntimeSwitch } from '../../src/fuzz/switches.js';
import { DiskTier } from '../../src/tier/disk-tier.js';
import type { DiskTierOptions } from '../../src/tier/disk-tier.js';
import type { LowerTier, LowerTierSwitches } from '../../src/tier/lower.js';
import { RedisTier } from '../../src/tier/redis-tier.js';
import type { RedisTierOptions } from '../../src/tier/redis-tier.js';
import { VALUE_HEADER_BYTES, encodeValue } from '../../src/tier/value.js';

const PAYLOAD_BYTES = 4096;
export const VALUE_BYTES = VALUE_HEADER_BYTES + PAYLOAD_BYTES;

export function payloadOf(key: bigint, bytes = PAYLOAD_BYTES): Buffer {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i += 1) b[i] = Number((key * 131n + BigInt(i)) & 0xffn);
  return b;
}

export function valueOf(fingerprint: bigint, key: bigint, bytes = PAYLOAD_BYTES): Buffer {
  return encodeValue(fingerprint, key, payloadOf(key, bytes));
}

const dirs: string[] = [];

/** A directory removed by removeDirs (call it in afterAll). */
export function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'kvoff-fclass-'));
  dirs.push(d);
  return d;
}

export function removeDirs(): void {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

export function openDisk(
  dir: string,
  fingerprint: bigint,
  extra: Partial<DiskTierOptions> = {},
  switches: LowerTierSwitches = {},
): Promise<DiskTier> {
  return DiskTier.open(
    {
      dir,
      bytesMax: 1 << 26,
      payloadBytes: PAYLOAD_BYTES,
      scope: fingerprint,
      freeBytesMin: 0,
      ...extra,
    },
    switches,
  );
}

export function openRedis(
  url: string,
  fingerprint: bigint,
  switches: LowerTierSwitches = {},
  extra: Partial<RedisTierOptions> = {},
): Promise<RedisTier> {
  // Unauthenticated values (encodeValue): these classes are about what the CRC and
  // the protocol rules catch; tags are test/regression-forged-tier-entry-served.test.ts's.
  return RedisTier.open(
    {
      urls: [url],
      payloadBytes: PAYLOAD_BYTES,
      scope: fingerprint,
      timeoutMs: 5_000,
      insecure: true,
      ...extra,
    },
    switches,
  );
}

/** Waits (bounded) until the level has no store in flight. */
export async function settle(tier: LowerTier): Promise<void> {
  for (let i = 0; i < 5000 && tier.storesInFlight > 0; i += 1) {
    await new Promise((r) => setTimeout(r, 2));
  }
  expect(tier.storesInFlight).toBe(0);
}

/**
 * The runtime fuzzer over seeds seed.. until the switch's first violation
 * (bounded by `schedules`), then the safe runtime over exactly those seeds.
 */
export async function fuzzSafeAndBroken(
  sw: RuntimeSwitch,
  seed: number,
  schedules: number,
): Promise<{ broken: FuzzReport; safe: FuzzReport }> {
  const base = {
    policy: 'ready-prefix' as const,
    strategy: 'random' as const,
    pins: true,
    seed,
    target: 'runtime' as const,
    shrink: false,
  };
  const broken = await fuzz({ ...base, schedules, switches: [sw] });
  const safe = await fuzz({ ...base, schedules: broken.schedules });
  return { broken, safe };
}
