// The cascade inside the runtime: host entries are written through to the
// disk tier; a second runtime on the same directory (a restart) promotes them
// on lookup and the engine's loaded bytes check against their keys; the
// default stays host-only. Plus the CLI's tier flags.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseTierOptions } from '../../src/commands/tier-options.js';
import {
  InvalidArgumentError,
  KeyHashNotShareableError,
  NamespaceRequiredError,
  TierUnavailableError,
} from '../../src/errors.js';
import { DEFAULT_RUNTIME_CONFIG, defaultWorkload } from '../../src/runtime/defaults.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { TiersOptions } from '../../src/tier/cascade.js';
import { TIER_COUNTER_FIELDS } from '../../src/tier/lower.js';

const dir = mkdtempSync(join(tmpdir(), 'kvoff-cascade-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function runOnce(tiers?: TiersOptions | undefined) {
  const runtime = await OffloadRuntime.start({
    // Full attention only: what a windowed group stored depends on thread timing, hits here must not.
    config: {
      ...DEFAULT_RUNTIME_CONFIG,
      groups: [{ kind: 'full', tokensPerBlock: 16 }],
      namespace: { model: 'tier-runtime' },
    },
    ...(tiers ? { tiers } : {}),
    simulator: { seed: 9 },
  });
  await Promise.all(
    defaultWorkload({ requests: 3, promptTokens: 5000, seed: 4 }).map((r) => runtime.submit(r)),
  );
  const verify = await runtime.verify();
  await runtime.close();
  return { stats: runtime.stats(), verify, leaks: runtime.leakReport() };
}

describe('tier cascade in the runtime', () => {
  it('a restarted runtime on the same disk directory gets disk hits, promoted and checked byte for byte', async () => {
    const first = await runOnce({ disk: { dir } });
    expect(first.stats.tiers.disk.storedChunks).toBeGreaterThan(0);
    expect(first.stats.tiers.disk.errors).toBe(0);
    const second = await runOnce({ disk: { dir } });
    expect(second.stats.tiers.disk.hitChunks).toBeGreaterThan(0);
    // Lookups that waited for the disk level's answer are retries (nothing was known yet), not deferrals.
    expect(second.stats.lookupsRetried).toBeGreaterThan(0);
    expect(second.stats.tierHits).toBeGreaterThan(first.stats.tierHits);
    expect(second.stats.mismatches).toBe(0);
    expect(second.verify).toMatchObject({ ok: true, mismatches: 0 });
    expect(second.leaks).toMatchObject({
      pinsOutstanding: 0,
      tierEntriesWriting: 0,
      tierEntriesReading: 0,
      jobsInFlight: 0,
    });
  }, 120_000);

  it('a disk directory that cannot be written: start() refuses it; with tiers.optional the runtime runs on host, every disk store dropped and counted', async () => {
    // A file where the directory's parent should be: mkdir, open and rename all fail, even for root.
    const blocker = join(dir, 'not-a-directory');
    writeFileSync(blocker, 'in the way');
    await expect(runOnce({ disk: { dir: join(blocker, 'cache') } })).rejects.toBeInstanceOf(
      TierUnavailableError,
    );
    const r = await runOnce({ disk: { dir: join(blocker, 'cache') }, optional: true });
    expect(r.stats.completed).toBeGreaterThan(0);
    expect(r.stats.tiers.host.storedChunks).toBeGreaterThan(0);
    const disk = r.stats.tiers.disk;
    expect(disk.storedChunks).toBe(0);
    expect(disk.droppedChunks).toBeGreaterThan(0);
    expect(disk.state).toBe('degraded');
    expect(r.stats.mismatches).toBe(0);
    expect(r.verify).toMatchObject({ ok: true, mismatches: 0 });
    expect(r.leaks).toMatchObject({ pinsOutstanding: 0, tierEntriesWriting: 0, jobsInFlight: 0 });
  }, 120_000);

  it('the default is host only: the lower levels count nothing', async () => {
    const { stats } = await runOnce();
    expect(stats.tiers.host.storedChunks).toBeGreaterThan(0);
    for (const level of ['disk', 'redis'] as const) {
      expect(TIER_COUNTER_FIELDS.every((f) => stats.tiers[level][f] === 0)).toBe(true);
      expect(stats.tiers[level]).toMatchObject({ state: 'off', authenticated: false });
    }
    // With no level below host there is nobody to wait for: no retries.
    expect(stats.lookupsRetried).toBe(0);
  }, 120_000);

  it("an external host's lookup waiting for the disk level is told 'retry', apart from a pending entry", async () => {
    const rt = await OffloadRuntime.start({
      config: {
        ...DEFAULT_RUNTIME_CONFIG,
        groups: [{ kind: 'full', tokensPerBlock: 16 }],
        namespace: { model: 'tier-runtime-external' },
      },
      tiers: { disk: { dir: join(dir, 'external') } },
      external: true,
    });
    try {
      const prompt = Array.from({ length: 256 }, (_, i) => (i * 7 + 3) % 1000);
      // The host has nothing: the disk level is asked, and until it answers nothing is known.
      expect(await rt.external.lookup(prompt)).toEqual({ deferred: true, reason: 'retry' });
      // A lookup forced past its wait takes what is readable now: nothing.
      expect(await rt.external.lookup(prompt, { force: true })).toMatchObject({
        deferred: false,
        hitTokens: 0,
      });
      expect(rt.stats()).toMatchObject({ lookupsDeferred: 0 });
      expect(rt.stats().lookupsRetried).toBeGreaterThan(0);
    } finally {
      await rt.close();
    }
  }, 120_000);

  it('--disk, --disk-bytes and --redis parse into tiers; bad values are refused with the flag named', () => {
    expect(parseTierOptions({})).toBeUndefined();
    expect(
      parseTierOptions({ disk: 'd', diskBytes: '1000000', redis: 'redis://a:1,redis://b:2' }),
    ).toEqual({
      disk: { dir: 'd', bytesMax: 1_000_000 },
      redis: { urls: ['redis://a:1', 'redis://b:2'] },
    });
    expect(() => parseTierOptions({ diskBytes: '5' })).toThrow(/--disk-bytes/);
    // Plain digits only (issue 31): a digit separator is refused, not read.
    expect(() => parseTierOptions({ disk: 'd', diskBytes: '1_000_000' })).toThrow(/--disk-bytes/);
    expect(() => parseTierOptions({ disk: 'd', diskBytes: '0' })).toThrow(InvalidArgumentError);
    expect(() => parseTierOptions({ redis: 'http://x' })).toThrow(/--redis/);
    expect(() => parseTierOptions({ redis: ' , ' })).toThrow(/--redis/);
  });

  it('secrets and credentials come from the environment or files, never argv; TLS files need rediss://', () => {
    const files = mkdtempSync(join(tmpdir(), 'kvoff-tier-opts-'));
    try {
      const secretFile = join(files, 'secret');
      writeFileSync(secretFile, 'from-a-file-0123456789abcdef\n');
      const pem = join(files, 'ca.pem');
      writeFileSync(pem, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
      const env = {
        KVOFF_TIER_SECRET: 'from-the-environment-0123456789',
        KVOFF_REDIS_USERNAME: 'engine',
        KVOFF_REDIS_PASSWORD: 'pw-from-env',
      };
      expect(parseTierOptions({ redis: 'redis://u:pw@h:1', tierOptional: true }, env)).toEqual({
        redis: { urls: ['redis://u:pw@h:1'], username: 'engine', password: 'pw-from-env' },
        secret: 'from-the-environment-0123456789',
        optional: true,
      });
      expect(parseTierOptions({ disk: 'd', tierSecretFile: secretFile }, {})).toEqual({
        disk: { dir: 'd' },
        secret: 'from-a-file-0123456789abcdef',
      });
      expect(
        parseTierOptions({ redis: 'rediss://h:1', redisCa: pem }, {})?.redis?.tls?.ca,
      ).toContain('BEGIN CERTIFICATE');
      expect(parseTierOptions({ redis: 'redis://h:1', insecureTier: true }, {})?.redis).toEqual({
        urls: ['redis://h:1'],
        insecure: true,
      });
      const refused: [Parameters<typeof parseTierOptions>[0], Record<string, string>, RegExp][] = [
        [{ disk: 'd', tierSecretFile: secretFile }, env, /--tier-secret-file: .*set too/],
        [{ redis: 'redis://h:1', insecureTier: true }, env, /--insecure-tier: contradicts/],
        [{ redis: 'redis://h:1', redisCa: pem }, {}, /need rediss:\/\//],
        [
          { redis: 'rediss://h:1', redisCert: pem },
          {},
          /--redis-cert: and --redis-key go together/,
        ],
        [{ redis: 'rediss://h:1', redisCa: secretFile }, {}, /--redis-ca: .* is not PEM/],
        [{ redisCa: pem }, {}, /--redis-ca: needs --redis/],
        [{ tierOptional: true }, {}, /--tier-optional: needs --disk or --redis/],
        [{ redis: 'redis://h:1,rediss://h:2' }, {}, /mixes redis:\/\/ and rediss:\/\//],
      ];
      for (const [raw, e, message] of refused) {
        expect(() => parseTierOptions(raw, e)).toThrow(message);
      }
    } finally {
      rmSync(files, { recursive: true, force: true });
    }
  });

  it('OffloadRuntime.start refuses bad tier options before starting anything', async () => {
    await expect(OffloadRuntime.start({ tiers: { disk: { dir: '' } } })).rejects.toThrow(
      InvalidArgumentError,
    );
    await expect(OffloadRuntime.start({ tiers: { redis: { urls: [] } } })).rejects.toThrow(
      /tiers\.redis\.urls/,
    );
    await expect(
      OffloadRuntime.start({
        tiers: { redis: { urls: ['redis://127.0.0.1:1'], storesQueuedBytesMax: -1 } },
      }),
    ).rejects.toThrow(/tiers\.redis\.storesQueuedBytesMax/);
    await expect(
      OffloadRuntime.start({
        tiers: { redis: { urls: ['redis://127.0.0.1:1'], storesInFlightMax: 0 } },
      }),
    ).rejects.toThrow(/tiers\.redis\.storesInFlightMax/);
    // Redis without a secret, unless told it may run unauthenticated; a secret too short.
    await expect(
      OffloadRuntime.start({ tiers: { redis: { urls: ['redis://127.0.0.1:1'] } } }),
    ).rejects.toThrow(/tiers\.redis: values must be authenticated/);
    await expect(
      OffloadRuntime.start({ tiers: { disk: { dir: 'd' }, secret: 'short' } }),
    ).rejects.toThrow(/tiers\.secret: must be at least 16 bytes/);
  });

  it('a disk or Redis tier without namespace.model, or with xxHash keys, is refused before anything starts', async () => {
    const config = {
      ...DEFAULT_RUNTIME_CONFIG,
      groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
    };
    for (const tiers of [
      { disk: { dir } },
      { redis: { urls: ['redis://127.0.0.1:1'], insecure: true } },
    ]) {
      const tier = Object.keys(tiers)[0];
      const err = await OffloadRuntime.start({ config, tiers }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NamespaceRequiredError);
      expect(err).toMatchObject({ code: 'KVOFF_NAMESPACE_REQUIRED', tier });
      const xxh = await OffloadRuntime.start({
        config: { ...config, namespace: { model: 'm' }, keyHash: 'xxh64' },
        tiers,
      }).catch((e: unknown) => e);
      expect(xxh).toBeInstanceOf(KeyHashNotShareableError);
      expect(xxh).toMatchObject({ code: 'KVOFF_KEY_HASH_NOT_SHAREABLE', tier });
    }
    // xxHash keys on the host tier alone: one trusted process, allowed.
    const rt = await OffloadRuntime.start({ config: { ...config, keyHash: 'xxh64' } });
    const s = await rt.submit({ promptLength: 2000, prefixId: 1, maxDecodeTokens: 4 });
    expect(s.holes).toBe(0);
    expect((await rt.verify()).ok).toBe(true);
    await rt.close();
  }, 120_000);
});
