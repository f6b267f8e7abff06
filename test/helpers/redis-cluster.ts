// Test helper: a throwaway Redis Cluster from scripts/redis-cluster.sh on a
// random loopback port range, so concurrent runs never collide. It takes
// itself down after KVOFF_REDIS_TTL_S even if the test process dies. It can be
// secured as a shared tier should be: a requirepass, an ACL user, TLS only.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, beforeEach } from 'vitest';

const run = promisify(execFile);
const SCRIPT = new URL('../../scripts/redis-cluster.sh', import.meta.url).pathname;

export interface TestCluster {
  readonly url: string;
  readonly ports: readonly number[];
  /** The nodes' files (KVOFF_REDIS_DIR). */
  readonly dir: string;
  /** With `tls`: the CA, client certificate and key files (PEM) the script made. */
  readonly tlsFiles?: { readonly ca: string; readonly cert: string; readonly key: string };
  script(...args: string[]): Promise<string>;
  down(): Promise<void>;
}

/** How the cluster is secured (scripts/redis-cluster.sh's KVOFF_REDIS_* settings). */
export interface ClusterSecurity {
  /** The default user's password (requirepass; replicas use it too). */
  requirepass?: string;
  /** An ACL user limited to kvoff's keys and commands. */
  aclUser?: { name: string; password: string };
  /** TLS only, client certificates required. */
  tls?: boolean;
  /** 0: three masters and no replica (half the processes, for tests of access alone). */
  replicas?: 0 | 1;
}

/** Attempts at a fresh port range when a node cannot bind (a port taken by someone else). */
const START_ATTEMPTS_MAX = 3;

async function startCluster(security: ClusterSecurity = {}): Promise<TestCluster> {
  let lastError: unknown;
  for (let attempt = 0; attempt < START_ATTEMPTS_MAX; attempt += 1) {
    try {
      return await startClusterOnce(security);
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError;
}

async function startClusterOnce(security: ClusterSecurity): Promise<TestCluster> {
  // Six client ports at base..base+5 and their cluster bus ports at +10000.
  // Bases in 11000-15990 put the bus ports in 21000-25995: the two ranges are
  // disjoint (one cluster's bus never lands on another's client port) and both
  // stay below Linux's ephemeral range (32768+), where an outgoing connection
  // may hold a port at any moment.
  const base = 11_000 + 10 * Math.floor(Math.random() * 500);
  const dir = mkdtempSync(join(tmpdir(), 'kvoff-redis-'));
  const env = {
    ...process.env,
    KVOFF_REDIS_PORT: String(base),
    KVOFF_REDIS_DIR: dir,
    KVOFF_REDIS_TTL_S: '900',
    ...(security.requirepass !== undefined
      ? { KVOFF_REDIS_REQUIREPASS: security.requirepass }
      : {}),
    ...(security.aclUser !== undefined
      ? { KVOFF_REDIS_ACL_USER: `${security.aclUser.name}:${security.aclUser.password}` }
      : {}),
    ...(security.tls === true ? { KVOFF_REDIS_TLS: '1' } : {}),
    KVOFF_REDIS_REPLICAS: String(security.replicas ?? 1),
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
  const tlsDir = join(dir, 'tls');
  return {
    url,
    ports: Array.from({ length: 3 * ((security.replicas ?? 1) + 1) }, (_, i) => base + i),
    dir,
    ...(security.tls === true
      ? {
          tlsFiles: {
            ca: join(tlsDir, 'ca.crt'),
            cert: join(tlsDir, 'client.crt'),
            key: join(tlsDir, 'client.key'),
          },
        }
      : {}),
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
 * Every command the nodes on `ports` execute from now until `stop()`, as the
 * nodes themselves report them (MONITOR): `stop()` ends the watchers and
 * resolves to one line per command (`<time> [<db> <client>] "CMD" "arg"...`).
 * Resolves once every watcher is attached.
 */
export async function watchCommands(
  ports: readonly number[],
): Promise<{ stop(): Promise<string[]> }> {
  const watchers = ports.map((port) => {
    const child = spawn('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'monitor'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let text = '';
    const attached = new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (d: string) => {
        text += d;
        if (text.startsWith('OK')) resolve();
      });
      child.once('error', reject);
      child.once('exit', () => reject(new Error(`MONITOR on ${port} ended before it attached`)));
    });
    const ended = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return { child, attached, ended, lines: () => text.split('\n').slice(1) };
  });
  await Promise.all(watchers.map((w) => w.attached));
  return {
    async stop() {
      for (const w of watchers) w.child.kill();
      await Promise.all(watchers.map((w) => w.ended));
      return watchers.flatMap((w) => w.lines()).filter((l) => l.length > 0);
    },
  };
}

/**
 * A master's port that is not the seed's and serves slots (a process the
 * tests may stop or pause). Right after the cluster forms, a node about to
 * become a replica may still read as a master without slots: not that one.
 */
export async function otherMaster(cluster: TestCluster): Promise<number> {
  const nodes = await redisCli(cluster.ports[0]!, 'cluster', 'nodes');
  for (const line of nodes.split('\n')) {
    const f = line.trim().split(' ');
    const flags = f[2]?.split(',') ?? [];
    if (!flags.includes('master') || flags.some((x) => x.includes('fail')) || f.length < 9)
      continue;
    const port = Number(f[1]!.split('@')[0]!.split(':')[1]);
    if (port !== cluster.ports[0]) return port;
  }
  throw new Error('no master other than the seed');
}

/**
 * Stops the process with SIGSTOP and waits (at most 5 s) until the kernel
 * shows it stopped: the signal takes effect asynchronously.
 */
export async function freeze(pid: number): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  for (let i = 0; i < 500; i += 1) {
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0];
    if (state === 'T' || state === 't') return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`process ${pid} did not stop`);
}

/** The pid of the node on `port` (from its pid file). */
export function nodePid(cluster: TestCluster, port: number): number {
  return Number(readFileSync(join(cluster.dir, String(port), 'redis.pid'), 'utf8').trim());
}

/**
 * One cluster for the calling file: started before its tests, taken down after
 * them. A cluster that cannot start (no redis-server and no way to install it)
 * fails every test with the reason: a failed beforeAll alone would report the
 * tests as skipped, and a missing Redis must never read as a skip.
 */
export function useCluster(security: ClusterSecurity = {}): () => TestCluster {
  const [one] = useClusters([security]);
  return one!;
}

/** Several clusters for the calling file, started at once (see useCluster). */
export function useClusters(securities: readonly ClusterSecurity[]): (() => TestCluster)[] {
  const clusters: (TestCluster | undefined)[] = [];
  let startError: unknown;
  beforeAll(async () => {
    const started = await Promise.allSettled(securities.map((s) => startCluster(s)));
    started.forEach((r, i) => {
      if (r.status === 'fulfilled') clusters[i] = r.value;
      else startError ??= r.reason;
    });
  }, 180_000);
  beforeEach(() => {
    if (startError !== undefined || clusters.length < securities.length) {
      throw startError ?? new Error('the test cluster did not start');
    }
  });
  afterAll(async () => {
    await Promise.all(clusters.map((c) => c?.down()));
  }, 60_000);
  return securities.map((_, i) => () => clusters[i]!);
}
