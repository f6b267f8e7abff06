// Test helper: a throwaway Redis Cluster from scripts/redis-cluster.sh on a
// random loopback port range, so concurrent runs never collide. It takes
// itself down after KVOFF_REDIS_TTL_S even if the test process dies.
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, beforeEach } from 'vitest';

const run = promisify(execFile);
const SCRIPT = new URL('../../scripts/redis-cluster.sh', import.meta.url).pathname;

export interface TestCluster {
  readonly url: string;
  readonly ports: readonly number[];
  script(...args: string[]): Promise<string>;
  down(): Promise<void>;
}

/** Attempts at a fresh port range when a node cannot bind (a port taken by someone else). */
const START_ATTEMPTS_MAX = 3;

async function startCluster(): Promise<TestCluster> {
  let lastError: unknown;
  for (let attempt = 0; attempt < START_ATTEMPTS_MAX; attempt += 1) {
    try {
      return await startClusterOnce();
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError;
}

async function startClusterOnce(): Promise<TestCluster> {
  // Six client ports at base..base+5 and their cluster bus ports at +10000.
  // Bases in 11000-15990 put the bus ports in 21000-25995: the two ranges are
  // disjoint (one cluster's bus never lands on another's client port) and both
  // stay below Linux's ephemeral range (32768+), where an outgoing connection
  // may hold a port at any moment.
  const base = 11_000 + 10 * Math.floor(Math.random() * 500);
  const env = {
    ...process.env,
    KVOFF_REDIS_PORT: String(base),
    KVOFF_REDIS_DIR: mkdtempSync(join(tmpdir(), 'kvoff-redis-')),
    KVOFF_REDIS_TTL_S: '900',
  };
  const script = async (...args: string[]) =>
    (await run('bash', [SCRIPT, ...args], { env, timeout: 120_000 })).stdout.trim();
  let out: string;
  try {
    out = await script('up');
  } catch (err) {
    // Stop whatever nodes did start before trying another range.
    await script('down').catch(() => {});
    throw err;
  }
  const url = out.split('\n').at(-1)!;
  return {
    url,
    ports: Array.from({ length: 6 }, (_, i) => base + i),
    script,
    down: async () => {
      await script('down');
    },
  };
}

export async function redisCli(port: number, ...args: string[]): Promise<string> {
  return (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args])).stdout.trim();
}

/**
 * One cluster for the calling file: started before its tests, taken down after
 * them. A cluster that cannot start (no redis-server and no way to install it)
 * fails every test with the reason: a failed beforeAll alone would report the
 * tests as skipped, and a missing Redis must never read as a skip.
 */
export function useCluster(): () => TestCluster {
  let cluster: TestCluster | undefined;
  let startError: unknown;
  beforeAll(async () => {
    try {
      cluster = await startCluster();
    } catch (err) {
      startError = err;
    }
  }, 180_000);
  beforeEach(() => {
    if (cluster === undefined) throw startError ?? new Error('the test cluster did not start');
  });
  afterAll(async () => {
    await cluster?.down();
  }, 60_000);
  return () => cluster!;
}
