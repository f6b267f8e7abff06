// The kvoff command as a new user meets it (issue 13, item 7): --version, one
// line `kvoff: …` with a hint and exit 2 for an unknown or missing option,
// --host blamed for a bad host, --schedules refusing fractions, and a fuzz
// campaign stopped by a signal printing what it did so far.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ROOT, runCli } from '../helpers/cli.js';

const VERSION = (JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { version: string })
  .version;

describe.concurrent('kvoff usage errors', () => {
  it('--version prints the package version', async () => {
    const run = await runCli(['--version']);
    expect(run.code).toBe(0);
    expect(run.stdout.trim()).toBe(VERSION);
  });

  it.each([
    [['simulate', '--bogus'], "kvoff: unknown option '--bogus' (see kvoff simulate --help)"],
    [
      ['simulate', '--sedd', '3'],
      "kvoff: unknown option '--sedd' (Did you mean --seed?) (see kvoff simulate --help)",
    ],
    [['serve', '--port'], "kvoff: option '--port <n>' argument missing (see kvoff serve --help)"],
    [['frobnicate'], "kvoff: unknown command 'frobnicate' (see kvoff --help)"],
    [
      ['serve', '--host', '999.1.1.1'],
      'kvoff: invalid argument: --host: "999.1.1.1" is not an IPv4 address',
    ],
    [
      ['serve', '--host', 'bad host!'],
      'kvoff: invalid argument: --host: "bad host!" is not an IP address or host name',
    ],
    [
      ['fuzz', '--schedules', '2.5'],
      'kvoff: invalid argument: --schedules: "2.5" is not an integer',
    ],
    [
      ['simulate', '--abort-rate', '-0.1'],
      'kvoff: invalid argument: --abort-rate: must be a number in [0, 1], got -0.1',
    ],
    [
      ['serve', '--transfer-threads', '65'],
      'kvoff: invalid argument: --transfer-threads: must be an integer in [1, 64], got 65',
    ],
    // Issue 31, item 4: a digit separator is not an integer; --policy names itself.
    [
      ['simulate', '--requests', ',100'],
      'kvoff: invalid argument: --requests: ",100" is not an integer',
    ],
    [
      ['serve', '--policy', 'foo'],
      'kvoff: invalid argument: --policy: unknown store policy "foo"; known: ready-prefix, legacy-assert, legacy-zip',
    ],
    [
      ['fuzz', '--strategy', 'foo'],
      'kvoff: invalid argument: --strategy: unknown strategy "foo"; known: random, pct',
    ],
    [
      ['serve', '--kv-events-topic', 'kv'],
      'kvoff: invalid argument: --kv-events-topic: needs --kv-events ENDPOINT',
    ],
    [
      ['simulate', '--kv-events', 'http://127.0.0.1:5557'],
      'kvoff: invalid argument: --kv-events: must be a ZeroMQ endpoint: tcp://HOST:PORT (PORT * picks one), ipc://PATH or inproc://NAME',
    ],
    [
      ['serve', '--kv-events', 'tcp://*:5557', '--kv-events-wire', 'json'],
      'kvoff: invalid argument: --kv-events-wire: "json" is not array or map',
    ],
  ])('%j: one line on stderr, nothing on stdout, exit 2', async (args, line) => {
    const run = await runCli(args);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toBe(`${line}\n`);
  });
});

describe('kvoff fuzz stopped by a signal', () => {
  it.each([
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const)(
    'regression: %s prints the seeds done and the summary so far, exit %i',
    async (signal, exitCode) => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'src/cli.ts', 'fuzz', '--seconds', '120', '--seed', '11'],
        { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } },
      );
      let stdout = '';
      child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      // The campaign says when it runs (its signal handlers are set by then).
      await new Promise<void>((resolve) => {
        let stderr = '';
        child.stderr.setEncoding('utf8').on('data', (s: string) => {
          stderr += s;
          if (stderr.includes('kvoff fuzz: running')) resolve();
        });
      });
      // A few hundred schedules.
      await new Promise((r) => setTimeout(r, 1000));
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      const code = await exited;
      clearTimeout(timer);
      expect(code).toBe(exitCode);
      const done = Number(/^\s+schedules\s+(\d+)$/m.exec(stdout)?.[1]);
      expect(done).toBeGreaterThan(0);
      expect(stdout).toContain(
        `interrupted by ${signal} after ${done} schedules (seeds 11..${11 + done - 1} done)`,
      );
      expect(stdout).toContain('no invariant violated so far');
    },
    40_000,
  );
});
