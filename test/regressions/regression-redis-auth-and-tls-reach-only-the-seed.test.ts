// Issue 25, failure 2: credentials in `redis://user:pass@host` and the
// rediss:// scheme reached only the seed connection (node-redis builds a
// discovered node's client from the cluster's `defaults`, which carried
// neither). Against a cluster with requirepass, an ACL user or TLS only,
// every chunk was dropped, the circuit stayed open, and `kvoff simulate`
// exited 0 saying nothing; a malformed URL was echoed with its password.
//
// Here, on real clusters from scripts/redis-cluster.sh (one with requirepass
// and an ACL user limited to kvoff's keys, one TLS-only with client
// certificates made by openssl): stores land on every master and load back,
// credentials come from the URL or the environment, refused credentials and a
// TLS mismatch are a one-line error with exit code 2, and no password ever
// appears in a message, stdout or the JSON.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TierUnavailableError } from '../../src/errors.js';
import { RedisTier } from '../../src/tier/redis-tier.js';
import type { RedisTierOptions } from '../../src/tier/redis-tier.js';
import { parseTierOptions } from '../../src/commands/tier-options.js';
import { runCli } from '../helpers/cli.js';
import { redisCli, useClusters } from '../helpers/redis-cluster.js';
import type { TestCluster } from '../helpers/redis-cluster.js';

const ADMIN_PASSWORD = 'adm1n-Pa55-not-in-any-output';
const ACL = { name: 'kvoff-engine', password: 'eng1ne-Pa55-not-in-any-output' };
const SECRET = 'tier-secret-for-tests-0123456789';
const PAYLOAD = 1024;

// Three masters each (no replica): what is tested is that every node takes the access.
const clusters = useClusters([
  { requirepass: ADMIN_PASSWORD, aclUser: ACL, replicas: 0 },
  { tls: true, replicas: 0 },
]);
const secured = clusters[0]!;
const tlsOnly = clusters[1]!;

function payloadOf(key: bigint): Buffer {
  const b = Buffer.alloc(PAYLOAD);
  for (let i = 0; i < PAYLOAD; i += 1) b[i] = Number((key * 37n + BigInt(i)) & 0xffn);
  return b;
}

let fp = 0x2500n;
function open(extra: Partial<RedisTierOptions> & Pick<RedisTierOptions, 'urls'>) {
  fp += 1n;
  return RedisTier.open({ payloadBytes: PAYLOAD, scope: fp, secret: SECRET, ...extra });
}

/** Stores keys spread over every slot range, waits, loads each back: true when every byte came back. */
async function storesAndHitsEverywhere(tier: RedisTier): Promise<boolean> {
  const keys = Array.from(
    { length: 48 },
    (_, i) => (BigInt(i + 1) * 0x9e3779b97f4a7c15n) & 0xffff_ffff_ffff_ffffn,
  );
  for (const k of keys) tier.store(k, tier.seal(k, payloadOf(k)));
  const deadline = performance.now() + 30_000;
  while (tier.storesInFlight > 0 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 5));
  }
  const states = await tier.states(keys);
  const back = await Promise.all(keys.map((k) => tier.load(k)));
  return (
    states.every((s) => s === 'hit') &&
    back.every((b, i) => b !== undefined && b.equals(payloadOf(keys[i]!)))
  );
}

/** Masters holding at least one key (as the admin, over the cluster's own transport). */
async function mastersWithKeys(cluster: TestCluster, prefix: string): Promise<number> {
  let n = 0;
  for (const port of cluster.ports) {
    const role = await redisCli(port, '--no-auth-warning', '-a', ADMIN_PASSWORD, 'role');
    if (!role.startsWith('master')) continue;
    const keys = await redisCli(
      port,
      '--no-auth-warning',
      '-a',
      ADMIN_PASSWORD,
      'keys',
      `${prefix}*`,
    );
    if (keys.trim() !== '') n += 1;
  }
  return n;
}

const TINY = [
  '--requests',
  '2',
  '--prompt-tokens',
  '4096',
  '--gpu-tokens',
  '65536',
  '--decode-tokens',
  '8',
  '--tier-chunks',
  '1024',
  '--block-bytes',
  '256',
  '--groups',
  'full',
  '--json',
];

describe('a secured cluster: credentials reach every node', () => {
  it('requirepass (the URL) and an ACL user (the environment): stores land on every master and load back', async () => {
    const port = secured().ports[0]!;
    const withPass = await open({ urls: [`redis://:${ADMIN_PASSWORD}@127.0.0.1:${port}`] });
    try {
      expect(await storesAndHitsEverywhere(withPass)).toBe(true);
      expect(withPass.counters).toMatchObject({ errors: 0, droppedChunks: 0, circuitOpen: 0 });
      expect(await mastersWithKeys(secured(), withPass.keyOf(0n).slice(0, -16))).toBe(3);
    } finally {
      await withPass.close(5_000);
    }
    const asUser = await open({
      urls: [`redis://127.0.0.1:${port}`],
      username: ACL.name,
      password: ACL.password,
    });
    try {
      expect(await storesAndHitsEverywhere(asUser)).toBe(true);
      expect(asUser.counters).toMatchObject({ errors: 0, droppedChunks: 0, circuitOpen: 0 });
    } finally {
      await asUser.close(5_000);
    }
  });

  it('kvoff simulate with KVOFF_REDIS_USERNAME/PASSWORD stores on the cluster; no secret in any output', async () => {
    const env = {
      KVOFF_REDIS_USERNAME: ACL.name,
      KVOFF_REDIS_PASSWORD: ACL.password,
      KVOFF_TIER_SECRET: SECRET,
    };
    const url = `redis://127.0.0.1:${secured().ports[0]}`;
    const r = await runCli(['simulate', ...TINY, '--seed', '31', '--redis', url], { env });
    expect(r.code, r.stderr).toBe(0);
    for (const secret of [ACL.password, ADMIN_PASSWORD, SECRET]) {
      expect(r.stdout + r.stderr).not.toContain(secret);
    }
    const stats = JSON.parse(r.stdout) as { tiers: { redis: Record<string, unknown> } };
    expect(stats.tiers.redis).toMatchObject({ droppedChunks: 0, errors: 0, authenticated: true });
    expect(stats.tiers.redis.storedChunks).toBeGreaterThan(0);
  });

  it('refused credentials: open() rejects (TierUnavailableError), the CLI exits 2 with one line; the password is never echoed', async () => {
    const port = secured().ports[0]!;
    const wrong = 'wr0ng-Pa55-never-echoed';
    const err = await open({ urls: [`redis://${ACL.name}:${wrong}@127.0.0.1:${port}`] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TierUnavailableError);
    expect((err as Error).message).toMatch(/WRONGPASS/);
    expect((err as Error).message).not.toContain(wrong);
    const r = await runCli(['simulate', ...TINY, '--redis', `redis://127.0.0.1:${port}`], {
      env: {
        KVOFF_REDIS_USERNAME: ACL.name,
        KVOFF_REDIS_PASSWORD: wrong,
        KVOFF_TIER_SECRET: SECRET,
      },
    });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/redis tier cannot be used: WRONGPASS/);
    expect(r.stderr).not.toContain(wrong);
  });

  it('a malformed URL with a password is refused without echoing the password', async () => {
    const pass = 'ma1formed-Pa55-never-echoed';
    for (const url of [
      `redis://u:${pass}@127.0.0.1:99999`,
      `redis//u:${pass}@127.0.0.1:7000`,
      `redis://u:${pass}@`,
      `http://u:${pass}@127.0.0.1:7000`,
    ]) {
      const err = await open({ urls: [url] }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect((err as Error | undefined)?.message, url).toMatch(
        /invalid argument: tiers\.redis\.urls/,
      );
      expect((err as Error).message).not.toContain(pass);
      // The command's own check of --redis (what the one run below goes through).
      let cliErr: unknown;
      try {
        parseTierOptions({ redis: url }, { KVOFF_TIER_SECRET: SECRET });
      } catch (e) {
        cliErr = e;
      }
      expect((cliErr as Error | undefined)?.message, url).toMatch(/invalid argument: --redis/);
      expect((cliErr as Error).message).not.toContain(pass);
    }
    const r = await runCli(['simulate', '--redis', `redis://u:${pass}@127.0.0.1:99999`], {
      env: { KVOFF_TIER_SECRET: SECRET },
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--redis/);
    expect(r.stdout + r.stderr).not.toContain(pass);
  });
});

describe('a TLS-only cluster with client certificates', () => {
  it('rediss:// with a CA, a client certificate and key: stores land on every master and load back', async () => {
    const c = tlsOnly();
    const files = c.tlsFiles!;
    const tier = await open({
      urls: [c.url],
      tls: {
        ca: readFileSync(files.ca, 'utf8'),
        cert: readFileSync(files.cert, 'utf8'),
        key: readFileSync(files.key, 'utf8'),
      },
    });
    try {
      expect(await storesAndHitsEverywhere(tier)).toBe(true);
      expect(tier.counters).toMatchObject({ errors: 0, droppedChunks: 0, circuitOpen: 0 });
    } finally {
      await tier.close(5_000);
    }
  });

  it('kvoff simulate --redis-ca/--redis-cert/--redis-key stores; without the CA, exit 2 with one line', async () => {
    const c = tlsOnly();
    const files = c.tlsFiles!;
    const env = { KVOFF_TIER_SECRET: SECRET };
    const tlsArgs = ['--redis-ca', files.ca, '--redis-cert', files.cert, '--redis-key', files.key];
    const ok = await runCli(['simulate', ...TINY, '--redis', c.url, ...tlsArgs], { env });
    expect(ok.code, ok.stderr).toBe(0);
    const stats = JSON.parse(ok.stdout) as { tiers: { redis: Record<string, number> } };
    expect(stats.tiers.redis).toMatchObject({ droppedChunks: 0, errors: 0 });
    expect(stats.tiers.redis.storedChunks).toBeGreaterThan(0);
    // The nodes' certificates are signed by the test CA, which the system does not trust.
    const r = await runCli(
      ['simulate', ...TINY, '--redis', c.url, '--redis-cert', files.cert, '--redis-key', files.key],
      { env },
    );
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/redis tier cannot be used: .*certificate/);
  });
});
