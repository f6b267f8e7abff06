// Issue 25, failure 6: misconfiguration was silent. An unreachable seed, a
// wrong password, a TLS mismatch, an unwritable or invalid --disk directory:
// `kvoff simulate` exited 0 printing "ok" with nothing on stderr; only the
// counters showed that the tier did nothing.
//
// Here: a tier given explicitly that cannot be used at start is one line on
// stderr and exit code 2, for simulate and serve (refused credentials and a
// TLS mismatch are in regression-redis-auth-and-tls-reach-only-the-seed);
// with --tier-optional the run goes on degraded and says so; a tier that
// fails mid-run degrades the run with a rate-limited warning on stderr and
// its state (and why) in /healthz.
import { spawn } from 'node:child_process';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, describe, expect, it } from 'vitest';
import { TierWatch } from '../../src/commands/tier-watch.js';
import { zeroCounters } from '../../src/tier/lower.js';
import type { PerTierCounters } from '../../src/tier/tier-stats.js';
import { ROOT, runCli } from '../helpers/cli.js';

const SECRET = 'tier-secret-for-tests-0123456789';
const TINY = [
  '--requests',
  '2',
  '--prompt-tokens',
  '2048',
  '--gpu-tokens',
  '65536',
  '--decode-tokens',
  '8',
];
const dirs: string[] = [];
function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'kvoff-misconf-'));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A loopback port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** `kvoff serve` (built) as a child: its URL once it listens, or how it ended. */
function serve(args: readonly string[], env: Record<string, string> = {}) {
  const child = spawn(
    process.execPath,
    ['dist/src/cli.js', 'serve', '--host', '127.0.0.1', '--port', '0', '--json', ...args],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', ...env },
    },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
  const url = new Promise<string | undefined>((resolve) => {
    createInterface({ input: child.stdout }).once('line', (line) =>
      resolve((JSON.parse(line) as { url: string }).url),
    );
    void exited.then(() => resolve(undefined));
  });
  const backstop = setTimeout(() => child.kill('SIGKILL'), 90_000);
  void exited.then(() => clearTimeout(backstop));
  return { child, url, exited, stderr: () => stderr };
}

describe('a tier that cannot be used at start fails loudly', () => {
  // One child per case, side by side, each with the test bound: five children
  // in a row took past 60 s at load 50-60 on 2 cores.
  const blockerDir = (): string => {
    const blocker = join(freshDir(), 'a-file');
    writeFileSync(blocker, 'in the way');
    return join(blocker, 'cache');
  };
  const env = { KVOFF_TIER_SECRET: SECRET };

  describe.concurrent(
    'an unreachable seed, Redis without a secret, a disk directory that cannot be made: one line, exit 2',
    () => {
      const cases: [string, () => Promise<string[]>, RegExp, Record<string, string>][] = [
        [
          'simulate, unreachable seed',
          async () => ['--redis', `redis://127.0.0.1:${await closedPort()}`],
          /redis tier cannot be used: .*ECONNREFUSED/,
          env,
        ],
        [
          'simulate, Redis without a secret',
          async () => ['--redis', `redis://127.0.0.1:${await closedPort()}`],
          /tiers\.redis: values must be authenticated/,
          {},
        ],
        [
          'simulate, a disk directory under a file',
          async () => ['--disk', blockerDir()],
          /disk tier cannot be used: .*ENOTDIR/,
          env,
        ],
      ];
      for (const [name, args, message, e] of cases) {
        it(name, async () => {
          const r = await runCli(['simulate', ...TINY, ...(await args())], { env: e });
          expect(r.code, r.stderr).toBe(2);
          expect(r.stdout).toBe('');
          expect(r.stderr.trim().split('\n')).toHaveLength(1);
          expect(r.stderr).toMatch(message);
        });
      }
      const serveCases: [string, () => Promise<string[]>][] = [
        [
          'serve, unreachable seed',
          async () => ['--redis', `redis://127.0.0.1:${await closedPort()}`],
        ],
        ['serve, a disk directory under a file', async () => ['--disk', blockerDir()]],
      ];
      for (const [name, args] of serveCases) {
        it(name, async () => {
          const s = serve(await args(), env);
          expect(await s.url).toBeUndefined();
          expect(await s.exited).toBe(2);
          expect(s.stderr().trim().split('\n')).toHaveLength(1);
          expect(s.stderr()).toMatch(/tier cannot be used/);
        });
      }
    },
  );

  it('--tier-optional: the run goes on without the tier, exit 0, and stderr says why it is degraded', async () => {
    const seed = `redis://127.0.0.1:${await closedPort()}`;
    const r = await runCli(['simulate', ...TINY, '--redis', seed, '--tier-optional', '--json'], {
      env: { KVOFF_TIER_SECRET: SECRET },
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(
      /^kvoff: warning: redis tier degraded: unusable at start: .*ECONNREFUSED.*\(\d+ stores dropped/m,
    );
    const result = JSON.parse(r.stdout) as {
      ok: boolean;
      tiers: { redis: Record<string, unknown> };
    };
    expect(result.ok).toBe(true);
    expect(result.tiers.redis).toMatchObject({ state: 'degraded', storedChunks: 0 });
  });
});

describe('a tier that fails mid-run degrades the run, not in silence', () => {
  it('kvoff serve whose disk directory goes away: one warning on stderr (rate-limited), /healthz says degraded and why', async () => {
    const dir = freshDir();
    const s = serve(['--disk', dir]);
    try {
      const url = await s.url;
      expect(url, s.stderr()).toBeDefined();
      const post = (prefixId: number) =>
        fetch(`${url}/v1/requests`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ promptLength: 4096, prefixId, maxDecodeTokens: 4 }),
        });
      expect((await post(1)).status).toBe(200);
      const healthy = (await (await fetch(`${url}/healthz`)).json()) as Record<string, unknown>;
      expect(healthy).toEqual({ status: 'ok', tiers: { disk: { state: 'ok' } } });
      // The cache goes (a volume unmounted, a cleaner): every write from now on fails.
      renameSync(dir, `${dir}.gone`);
      dirs.push(`${dir}.gone`);
      let health: { status: string; tiers?: { disk?: { state: string; problem?: string } } } = {
        status: '',
      };
      // The state is shared memory, the reason a message that follows it: wait for both.
      for (let i = 2; i < 200 && health.tiers?.disk?.problem === undefined; i += 1) {
        expect((await post(i)).status).toBe(200);
        health = (await (await fetch(`${url}/healthz`)).json()) as typeof health;
      }
      expect(health).toMatchObject({
        status: 'degraded',
        tiers: {
          disk: {
            state: 'degraded',
            problem: expect.stringMatching(/a write failed: ENOENT/) as string,
          },
        },
      });
      // Many failed writes, one line (the next comes after 30 s at the earliest).
      for (let i = 0; i < 10; i += 1) await post(1000 + i);
      await new Promise((r) => setTimeout(r, 1_200));
      const warnings = s
        .stderr()
        .split('\n')
        .filter((l) => l.startsWith('kvoff: warning: disk tier degraded'));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(/a write failed: ENOENT/);
    } finally {
      s.child.kill('SIGTERM');
      await s.exited;
    }
  });

  it('the watch: a warning when a level degrades, again at most once per interval with what it cost, one line when it recovers', () => {
    const level = (state: 'ok' | 'degraded', droppedChunks: number) => ({
      ...zeroCounters(),
      droppedChunks,
      authenticated: true,
      state,
      ...(state === 'degraded' ? { problem: 'no reply within 2000 ms from 127.0.0.1:7102' } : {}),
    });
    let tiers: PerTierCounters = {
      host: zeroCounters(),
      disk: { ...zeroCounters(), authenticated: false, state: 'off' },
      redis: level('ok', 0),
    };
    let now = 0;
    const lines: string[] = [];
    const watch = new TierWatch(
      () => tiers,
      (l) => lines.push(l),
      30_000,
      () => now,
    );
    watch.check();
    tiers = { ...tiers, redis: level('degraded', 10) };
    for (now = 1; now < 29_000; now += 1_000) watch.check();
    tiers = { ...tiers, redis: level('degraded', 250) };
    for (; now < 45_000; now += 1_000) watch.check();
    tiers = { ...tiers, redis: level('ok', 250) };
    watch.check();
    watch.check();
    expect(lines).toEqual([
      'kvoff: warning: redis tier degraded: no reply within 2000 ms from 127.0.0.1:7102 (10 stores dropped, 0 errors, 0 timeouts so far); the run goes on without it: stores are dropped and lookups miss until it recovers',
      'kvoff: warning: redis tier degraded: no reply within 2000 ms from 127.0.0.1:7102 (240 stores dropped, 0 errors, 0 timeouts since the last warning); the run goes on without it: stores are dropped and lookups miss until it recovers',
      'kvoff: redis tier recovered',
    ]);
  });
});
