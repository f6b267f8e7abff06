// `kvoff fuzz` end to end: one JSON object on stdout, exit 1 when a violation
// is found, 0 when none, 2 for bad usage, and --replay reproduces the trace
// hash the failure printed.
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

/** `kvoff ...args` in a child process, killed after 60 s. */
const kvoff = (...args: string[]) => runCli(args, { timeoutMs: 60_000 });

describe('kvoff fuzz', () => {
  it('legacy-zip: exit 1, one JSON object with the first violation, and a replay that matches', async () => {
    const r = await kvoff(
      'fuzz',
      '--policy',
      'legacy-zip',
      '--schedules',
      '200',
      '--seed',
      '3',
      '--json',
    );
    expect(r.code).toBe(1);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const out = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(out).toMatchObject({ policy: 'legacy-zip', strategy: 'random', violations: 1 });
    for (const k of [
      'schedules',
      'schedulesPerSecond',
      'seed',
      'invariant',
      'traceLength',
      'shrunkLength',
      'traceHash',
      'replayToken',
    ]) {
      expect(out, k).toHaveProperty(k);
    }
    expect(out.shrunkLength as number).toBeLessThanOrEqual(out.traceLength as number);

    const replay = await kvoff('fuzz', '--replay', out.replayToken as string, '--json');
    expect(replay.code).toBe(1);
    const again = JSON.parse(replay.stdout) as Record<string, unknown>;
    expect(again.traceHash).toBe(out.traceHash);
    expect(again.invariant).toBe(out.invariant);
    expect(again.traceLength).toBe(out.traceLength);
  });

  // Regression (issue 31, item 2): the message named r2 (the full trace's
  // request) while the shrunk trace printed under it named r3.
  it('the shrunk trace comes with its own message: the request ids it names are in that trace', async () => {
    const r = await kvoff(
      'fuzz',
      '--policy',
      'legacy-zip',
      '--seed',
      '3327218060',
      '--schedules',
      '1',
      '--json',
    );
    expect(r.code).toBe(1);
    const out = JSON.parse(r.stdout) as {
      shrunkMessage: string;
      shrunkTrace: string[];
      invariant: string;
    };
    expect(out.invariant).toBe('cursor-within-ready');
    const ids = out.shrunkMessage.match(/\br\d+\b/g) ?? [];
    expect(ids.length).toBeGreaterThan(0);
    const trace = out.shrunkTrace.join('\n');
    for (const id of ids) expect(trace, id).toMatch(new RegExp(`\\b${id}\\b`));
    const text = await kvoff(
      'fuzz',
      '--policy',
      'legacy-zip',
      '--seed',
      '3327218060',
      '--schedules',
      '1',
    );
    expect(text.stdout).toContain(`shrunk message  ${out.shrunkMessage}`);
  });

  it('ready-prefix: exit 0 and no violation', async () => {
    const r = await kvoff(
      'fuzz',
      '--policy',
      'ready-prefix',
      '--strategy',
      'random',
      '--schedules',
      '300',
      '--seed',
      '8',
      '--json',
    );
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(out).toMatchObject({
      policy: 'ready-prefix',
      strategy: 'random',
      schedules: 300,
      violations: 0,
    });
    expect(out).not.toHaveProperty('invariant');
  });

  it('prints a readable failure without ANSI codes when not on a terminal', async () => {
    const r = await kvoff(
      'fuzz',
      '--policy',
      'legacy-assert',
      '--schedules',
      '50',
      '--seed',
      '1',
      '--watch',
      'crash',
    );
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/invariant\s+crash/);
    expect(r.stdout).toMatch(
      /kvoff fuzz --replay kvf1\.legacy-assert\.random\.pins\.\d+\.trl2\.watch-crash/,
    );
    expect(r.stdout).toMatch(/shrunk trace/);
    expect(r.stdout + r.stderr).not.toContain(String.fromCharCode(27));
  });

  // One process per case: each stays far below the test timeout on a loaded box.
  for (const args of [
    ['--policy', 'nope', '--schedules', '1'],
    ['--strategy', 'dfs', '--schedules', '1'],
    ['--seconds', '1', '--schedules', '1'],
    ['--schedules', '-3'],
    ['--replay', 'garbage'],
    ['--replay', 'kvf1.legacy-zip.pct.pins.1.trl2', '--seed', '2'],
    ['--bogus'],
  ]) {
    it(`bad usage exits 2: ${args.join(' ')}`, async () => {
      const r = await kvoff('fuzz', ...args);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
    });
  }
});
