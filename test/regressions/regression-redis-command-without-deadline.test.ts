// Issue 25, failure 3: no deadline once a command is written. node-redis
// stops a command's timeout when the command reaches the socket, and kvoff
// added none: with `CLIENT PAUSE 5000` on one master the engine stalled 5 s
// with 0 errors; with a master frozen by SIGSTOP the breaker never opened,
// kvoff kept sending to the frozen node after its replica was promoted, and
// `kvoff simulate` took 28 s instead of 6-11 s.
//
// Here, against real clusters: the same run with one master paused for 12 s
// counts timeouts and is slower than without by less than half the pause
// (kvoff's own timer races every command; a lookup waits at most the lookup
// budget; close waits for at most the first timeout of a stuck node). Without
// deadlines the run stalls for the whole pause. The paused run's wall does not
// depend on the pause's length (5.2-5.3 s with a 5 s and a 20 s pause, the
// calm run 2.4-3.3 s, side by side at load 2): a bound of 3 s over 5 s of
// pause was met by 3.011 s in a CI run, so the pause is long enough here for
// the stall and the run's own cost to stay apart on a loaded machine. The run without the pause
// goes side by side with it, at the same time on a cluster of its own: run
// one after the other on a loaded machine, the two walls differed by more
// than the pause cost (the test failed once in a loaded suite). With a
// master stopped for good, `kvoff simulate` still ends within 30 s, exit 0,
// with its JSON (the timed-out node's connection is replaced, so the slot
// map is re-read and the promoted replica used).
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { freeze, nodePid, otherMaster, redisCli, useClusters } from '../helpers/redis-cluster.js';
import type { TestCluster } from '../helpers/redis-cluster.js';

/** The cluster the faults hit, and a calm one the same run goes against side by side. */
const clusters = useClusters([{}, {}]);
const theCluster = clusters[0]!;
const calmCluster = clusters[1]!;
const SECRET = 'tier-secret-for-tests-0123456789';
/** Long enough that a stalled run (the pause) and a run that only pays its deadlines stay apart under load. */
const PAUSE_MS = 12_000;

/** A run of a few seconds that keeps the Redis tier busy (stores, then lookups of shared prefixes). */
const WORKLOAD = [
  '--requests',
  '6',
  '--prompt-tokens',
  '12288',
  '--gpu-tokens',
  '131072',
  '--decode-tokens',
  '64',
  '--seed',
  '5',
  '--json',
];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  wallMs: number;
}

/**
 * `kvoff simulate --redis` in its own process; `during` runs once the
 * process is started, or with `whenStoring` once the cluster holds its first
 * entries (the tier is in use).
 */
function simulate(
  cluster: TestCluster,
  during?: () => Promise<void>,
  whenStoring = false,
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(
      process.execPath,
      ['dist/src/cli.js', 'simulate', ...WORKLOAD, '--redis', cluster.url],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, NO_COLOR: '1', KVOFF_TIER_SECRET: SECRET },
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    // A backstop far above what is asserted: a hang fails the assertions, not the runner.
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    let exited = false;
    const acting = (async () => {
      if (during === undefined) return;
      while (whenStoring && !exited && Number(await redisCli(cluster.ports[0]!, 'dbsize')) === 0) {
        await new Promise((r) => setTimeout(r, 20));
      }
      if (!exited) await during();
    })();
    child.on('error', reject);
    child.on('close', (code) => {
      exited = true;
      clearTimeout(timer);
      const wallMs = performance.now() - t0;
      acting.then(
        () => resolve({ code, stdout, stderr, wallMs }),
        (err: unknown) => reject(err as Error),
      );
    });
  });
}

async function flushAll(cluster: TestCluster): Promise<void> {
  for (const port of cluster.ports) {
    if ((await redisCli(port, 'role')).startsWith('master')) await redisCli(port, 'flushall');
  }
}

type Report = { ok: boolean; wallSeconds: number; tiers: { redis: Record<string, number> } };

describe('every Redis command has a deadline', () => {
  it('CLIENT PAUSE 12000 on one master: timeouts and dropped stores are counted and the run is slower than without by less than half the pause', async () => {
    const cluster = theCluster();
    const paused = await otherMaster(cluster);
    await flushAll(cluster);
    await flushAll(calmCluster());
    // Paused once the tier is in use: paused at spawn, a start-up slowed by a
    // loaded machine could outlast the pause before any command was sent.
    const [calm, hit] = await Promise.all([
      simulate(calmCluster()),
      simulate(
        cluster,
        async () => {
          await redisCli(paused, 'client', 'pause', String(PAUSE_MS));
        },
        true,
      ),
    ]);
    // The node answers again once its pause is over (CLIENT UNPAUSE would wait
    // for it too): the next test needs every master.
    await redisCli(paused, 'ping');
    for (const r of [calm, hit]) expect(r.code, r.stderr).toBe(0);
    const a = JSON.parse(calm.stdout) as Report;
    const b = JSON.parse(hit.stdout) as Report;
    expect(a.ok && b.ok).toBe(true);
    // What the pause did is counted: commands timed out (the bug counted
    // none), and stores to the paused node were dropped (none can succeed
    // within a pause longer than the run). Not compared with the calm run's
    // counts: on a loaded 2-core machine its starved servers time out too
    // (318 timeouts at load 25-35; 786 against the paused run's 632 at load
    // 13, where the paused node's open circuit refuses commands it would
    // otherwise time out), so the counts say nothing of the pause there.
    expect(b.tiers.redis.timeouts).toBeGreaterThan(0);
    expect(b.tiers.redis.droppedChunks).toBeGreaterThan(0);
    // The runtime's own wall time (start to closed), not the process's start-up.
    expect(b.wallSeconds - a.wallSeconds).toBeLessThan(PAUSE_MS / 1000 / 2);
  }, 120_000);

  it('a master stopped with SIGSTOP: kvoff simulate ends within 30 s, exit 0, with its JSON', async () => {
    const cluster = theCluster();
    const port = await otherMaster(cluster);
    const pid = nodePid(cluster, port);
    await flushAll(cluster);
    try {
      const r = await simulate(cluster, () => freeze(pid), true);
      expect(r.code, r.stderr).toBe(0);
      expect(r.wallMs).toBeLessThan(30_000);
      const report = JSON.parse(r.stdout) as Report;
      expect(report.ok).toBe(true);
      expect(report.tiers.redis.timeouts).toBeGreaterThan(0);
    } finally {
      // It rejoins as a replica of the promoted one; the cluster stays usable.
      process.kill(pid, 'SIGCONT');
    }
  }, 120_000);
});
