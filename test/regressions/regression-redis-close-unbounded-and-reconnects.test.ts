// Issue 25, failure 4: close() was unbounded with a frozen master, and the
// closed client reconnected. OffloadRuntime.close() rejected after 60 s and
// `kvoff simulate` exited 1 after 67 s with no JSON; the Redis tier alone,
// after close() returned, opened new sockets when the node woke and kept the
// process alive; stores in flight at close were counted neither stored nor
// dropped (node-redis's close() empties the node list, so the destroy() after
// it had nothing left to destroy).
//
// Here, against a real cluster with one master stopped by SIGSTOP: close()
// returns within its bound (its drain time plus one command timeout), every
// store offered is accounted for (stored, dropped or skipped; the ones in
// flight to the frozen node dropped), no handle is left open even after the
// node wakes, and the process ends by itself. (`kvoff simulate` with a frozen
// master printing its JSON and exiting 0 is in
// regression-redis-command-without-deadline.test.ts.)
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { freeze, nodePid, otherMaster, useCluster } from '../helpers/redis-cluster.js';

const theCluster = useCluster();
const SECRET = 'tier-secret-for-tests-0123456789';
const TIMEOUT_MS = 1_000;
const CLOSE_MS = 3_000;

describe('closing the Redis tier with a frozen master', () => {
  it('close() is bounded, counts the stores in flight as dropped, leaves nothing open; the process ends by itself', async () => {
    const cluster = theCluster();
    const pid = nodePid(cluster, await otherMaster(cluster));
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'test/fixtures/redis-close-child.ts',
        cluster.url,
        SECRET,
        String(TIMEOUT_MS),
        String(CLOSE_MS),
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const lines: string[] = [];
    let stderr = '';
    let buffered = '';
    const waiters: (() => void)[] = [];
    child.stdout.setEncoding('utf8').on('data', (s: string) => {
      buffered += s;
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      lines.push(...parts);
      for (const w of waiters.splice(0)) w();
    });
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
    let exitedAtMs = Infinity;
    void exited.then(() => (exitedAtMs = performance.now()));
    const line = async (n: number) => {
      while (lines.length < n && exitedAtMs === Infinity) {
        await new Promise<void>((r) => waiters.push(r));
      }
      return lines[n - 1];
    };
    // A backstop far above what is asserted: a hang fails the assertions, not the runner.
    const backstop = setTimeout(() => child.kill('SIGKILL'), 90_000);
    let frozen = false;
    try {
      expect(await line(1), stderr).toBe('ready');
      await freeze(pid);
      frozen = true;
      child.kill('SIGUSR2');
      const closed = JSON.parse((await line(2)) ?? 'null') as {
        closeMs: number;
        offered: number;
        stored: number;
        dropped: number;
        skipped: number;
        inFlight: number;
      } | null;
      const closedAtMs = performance.now();
      // The node wakes while the closed process is still there: nothing may reconnect to it.
      process.kill(pid, 'SIGCONT');
      frozen = false;
      expect(closed, stderr).not.toBeNull();
      expect(closed!.closeMs).toBeLessThan(CLOSE_MS + TIMEOUT_MS);
      expect(closed!.inFlight).toBe(0);
      expect(closed!.stored + closed!.dropped + closed!.skipped).toBe(closed!.offered);
      expect(closed!.dropped).toBeGreaterThan(0);
      const after = JSON.parse((await line(3)) ?? 'null') as { open: string[] } | null;
      expect(after?.open ?? ['no report']).toEqual([]);
      expect(await exited).toBe(0);
      // It ended by itself right after its last report (2 s after close), not at the backstop.
      expect(exitedAtMs - closedAtMs).toBeLessThan(15_000);
    } finally {
      clearTimeout(backstop);
      if (frozen) process.kill(pid, 'SIGCONT');
      child.kill('SIGKILL');
    }
  }, 120_000);
});
