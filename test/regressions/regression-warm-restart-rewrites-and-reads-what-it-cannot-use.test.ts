// Issue 25, failure 7: waste. A second run re-stored every chunk the lower
// tiers already held (1,072 SETs for 578 hits), and with the default hybrid
// model (full attention with EAGLE, and a sliding window) a warm restart read
// every prompt's chunks from disk or Redis and loaded none of them: the
// promotion left out the EAGLE tail chunk the lookup reads, so the lookup's
// hit shrank by one chunk and its window moved onto chunks never fetched.
//
// Under load the warm run from Redis still read more than it loaded (286 chunks
// for 122 loaded): a resolution went on reading after its lookup had been
// answered (cut short by the lookup budget) or after its request had been
// aborted while it waited to ask again, and two resolutions of one key each
// read it. Now a resolution reads nothing once its lookup is answered or its
// request ends, a key being read is read once, and a failed read stops the
// reads past it.
//
// Here, the same small hybrid workload twice against a real cluster and a real
// directory: the warm run loads from the lower tier, reads (counted by the
// masters themselves for Redis) no more chunks than its loads can use, and
// sends no SET for a chunk the cluster is known to hold.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GROUP_PRESETS, SIMULATE_DEFAULTS } from '../../src/commands/simulate-options.js';
import { runCli } from '../helpers/cli.js';
import { redisCli, useCluster, watchCommands } from '../helpers/redis-cluster.js';

const theCluster = useCluster();
const SECRET = 'tier-secret-for-tests-0123456789';
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The default groups (hybrid), prompts that fit the pool (no preemption), the same seed twice. */
const REQUESTS = 4;
const WORKLOAD = [
  '--requests',
  String(REQUESTS),
  '--prompt-tokens',
  '8192',
  '--gpu-tokens',
  '131072',
  '--decode-tokens',
  '16',
  '--seed',
  '3',
  '--json',
];

interface Report {
  ok: boolean;
  tierHits: number;
  tiers: Record<'disk' | 'redis', Record<string, number>>;
}

async function simulate(tierArgs: string[]): Promise<Report> {
  const r = await runCli(['simulate', ...WORKLOAD, ...tierArgs], {
    env: { KVOFF_TIER_SECRET: SECRET },
  });
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Report;
}

/** SETs the masters executed since the last call (their command statistics, reset after). */
async function setsSinceLast(ports: readonly number[]): Promise<number> {
  let sets = 0;
  for (const port of ports) {
    if (!(await redisCli(port, 'role')).startsWith('master')) continue;
    const line = (await redisCli(port, 'info', 'commandstats'))
      .split('\n')
      .find((l) => l.startsWith('cmdstat_set:'));
    sets += Number(/calls=(\d+)/.exec(line ?? '')?.[1] ?? 0);
    await redisCli(port, 'config', 'resetstat');
  }
  return sets;
}

/** The command and key of a MONITOR line naming a chunk entry (not the scope's epoch record). */
function entryCommand(line: string): { command: string; key: string } | undefined {
  const m = /\] "(\w+)" "(kvoff:[^"]*)"/.exec(line);
  if (m === null || m[2]!.endsWith(':epoch')) return undefined;
  return { command: m[1]!.toLowerCase(), key: m[2]! };
}

/** GETs of chunk entries among the commands MONITOR reported. */
function entryReads(lines: readonly string[]): number {
  return lines.filter((l) => entryCommand(l)?.command === 'get').length;
}

/** The entries the masters hold now. */
async function entriesHeld(ports: readonly number[]): Promise<Set<string>> {
  const held = new Set<string>();
  for (const port of ports) {
    if (!(await redisCli(port, 'role')).startsWith('master')) continue;
    for (const k of (await redisCli(port, '--scan', '--pattern', 'kvoff:*')).split('\n')) {
      if (k.length > 0 && !k.endsWith(':epoch')) held.add(k);
    }
  }
  return held;
}

/**
 * SETs of an entry the cluster held, sent after this run had asked about
 * that entry (EXISTS or GET) and so knew it was held. Each key lives on one
 * node, and each node's commands are in the order it ran them.
 */
function setsOfKnownEntries(lines: readonly string[], held: ReadonlySet<string>): string[] {
  const asked = new Set<string>();
  const wasted: string[] = [];
  for (const line of lines) {
    const c = entryCommand(line);
    if (c === undefined || !held.has(c.key)) continue;
    if (c.command === 'exists' || c.command === 'get') asked.add(c.key);
    else if (c.command === 'set' && asked.has(c.key)) wasted.push(c.key);
  }
  return wasted;
}

/**
 * What the warm run's loads can use, in chunks read from below: a request
 * that loads a hit of h chunks reads its h full-attention chunks, the EAGLE
 * tail chunk the decision reads and drops, and the window group's chunks
 * inside its window (at most a window), so at most tierHits plus one window
 * and one chunk per request. A request that loads nothing may have had reads
 * in flight when its lookup was answered; fewer than a window and a chunk.
 */
const [FULL, WINDOW] = GROUP_PRESETS.hybrid!;
const WINDOW_CHUNKS = Math.ceil(
  WINDOW!.windowTokens! / (WINDOW!.tokensPerBlock * SIMULATE_DEFAULTS.blocksPerChunk),
);
function usableReads(warm: Report): number {
  return warm.tierHits + REQUESTS * (WINDOW_CHUNKS + (FULL!.eagle === true ? 1 : 0));
}

function expectReadsUsed(cold: Report, warm: Report, level: 'disk' | 'redis', reads: number): void {
  expect(cold.ok && warm.ok).toBe(true);
  expect(reads).toBeGreaterThan(0);
  expect(warm.tierHits).toBeGreaterThan(cold.tierHits);
  expect(reads).toBeLessThanOrEqual(usableReads(warm));
  // The level's own count of chunks read is the masters' (every GET found its entry).
  expect(warm.tiers[level]!.hitChunks).toBeLessThanOrEqual(reads);
}

describe('a warm restart of the default hybrid model', () => {
  it('from Redis: loads what it reads, and sends no SET for a chunk the cluster is known to hold', async () => {
    const cluster = theCluster();
    const url = ['--redis', cluster.url];
    await setsSinceLast(cluster.ports);
    const cold = await simulate(url);
    const coldSets = await setsSinceLast(cluster.ports);
    const held = await entriesHeld(cluster.ports);
    const watch = await watchCommands(cluster.ports);
    const warm = await simulate(url);
    const commands = await watch.stop();
    const warmSets = await setsSinceLast(cluster.ports);
    expect(coldSets).toBe(cold.tiers.redis!.storedChunks);
    expect(held.size).toBe(coldSets);
    expectReadsUsed(cold, warm, 'redis', entryReads(commands));
    // No SET for an entry this run knew the cluster held. (It may store what
    // no lookup asked about, such as the decode tail: it cannot know those are held.)
    expect(setsOfKnownEntries(commands, held)).toEqual([]);
    expect(warmSets).toBeLessThan(coldSets);
  });

  it('from disk: loads what it reads', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvoff-warm-'));
    dirs.push(dir);
    const cold = await simulate(['--disk', dir]);
    const warm = await simulate(['--disk', dir]);
    expectReadsUsed(cold, warm, 'disk', warm.tiers.disk!.hitChunks!);
  });
});
