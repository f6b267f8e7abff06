// `kvoff fuzz --broken <class>`: every row of the broken-class table
// (src/fuzz/broken-classes.ts) makes the fuzzer find its class's violation,
// with a shrunk token that replays it, while kvoff as shipped finds none with
// the same seeds; the class names parse in the F1 and f01 forms; and the CLI
// refuses unknown classes, classes no switch re-creates, and flags the row sets.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { loadHashing } from '../../src/hashing.js';
import {
  BROKEN_CLASSES,
  FAILURE_CLASSES,
  brokenClass,
  brokenFuzzOptions,
  parseFailureClass,
  protectedFuzzOptions,
} from '../../src/fuzz/broken-classes.js';
import { fuzz } from '../../src/fuzz/run.js';
import { runSchedule } from '../../src/fuzz/schedule.js';
import { decodeReplayToken } from '../../src/fuzz/token.js';
import { runCli } from '../helpers/cli.js';

/** `kvoff ...args` in a child process, killed after 60 s. */
const kvoff = (...args: string[]) => runCli(args, { timeoutMs: 60_000 });

describe('failure class names', () => {
  it.each([
    ['F1', 'f01'],
    ['f1', 'f01'],
    ['F01', 'f01'],
    ['f06', 'f06'],
    ['F12', 'f12'],
    [' f10 ', 'f10'],
  ])('%s is %s', (text, id) => {
    expect(parseFailureClass(text)).toBe(id);
  });

  it.each(['F13', 'f0', 'f00', 'f001', 'F', 'x', '', 'f1a'])('"%s" is refused', (text) => {
    expect(() => parseFailureClass(text)).toThrow(InvalidArgumentError);
  });

  it('a class no switch re-creates is refused with the list of those that are', () => {
    const missing = FAILURE_CLASSES.filter((id) => !BROKEN_CLASSES.some((r) => r.id === id));
    expect(missing.length).toBeGreaterThan(0);
    for (const id of missing) expect(() => brokenClass(id)).toThrow(/no fuzzer switch re-creates/);
  });

  it('one row per class, in class order', () => {
    const ids = BROKEN_CLASSES.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    for (const r of BROKEN_CLASSES) expect(r.watch.length).toBeGreaterThan(0);
  });
});

describe('every broken-class row', () => {
  for (const row of BROKEN_CLASSES) {
    it(`${row.id} (${row.variant}): found, shrunk, replayed; nothing found as shipped`, async () => {
      const budget = row.target === 'runtime' ? 1500 : 2000;
      const broken = await fuzz({
        ...brokenFuzzOptions(row),
        strategy: 'random',
        seed: 1,
        schedules: budget,
      });
      expect(broken.violations).toBe(1);
      const first = broken.first!;
      expect(row.watch).toContain(first.invariant);
      expect(first.shrunkLength).toBeLessThanOrEqual(first.traceLength);
      const again = runSchedule(await loadHashing(), decodeReplayToken(first.shrunkToken));
      expect(again.violation?.invariant).toBe(first.invariant);
      expect(again.traceHash).toBe(first.shrunkHash);

      const shipped = await fuzz({
        ...protectedFuzzOptions(row),
        strategy: 'random',
        seed: 1,
        schedules: row.target === 'runtime' ? 50 : 200,
      });
      expect(shipped.violations).toBe(0);
    });
  }
});

describe('kvoff fuzz --broken', () => {
  it('F6: exit 1, the class in the JSON, and a shrunk token that replays the violation', async () => {
    const r = await kvoff('fuzz', '--broken', 'F6', '--schedules', '500', '--seed', '1', '--json');
    expect(r.code).toBe(1);
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(out).toMatchObject({ broken: 'f06', pins: false, violations: 1 });
    expect(out.invariant).toBe('mispairing');
    const replay = await kvoff('fuzz', '--replay', out.shrunkToken as string, '--json');
    expect(replay.code).toBe(1);
    const again = JSON.parse(replay.stdout) as Record<string, unknown>;
    expect(again.invariant).toBe('mispairing');
    expect(again.traceHash).toBe(out.shrunkHash);
  });

  it.each([
    [['--broken', 'f13'], /unknown failure class "f13"/],
    [['--broken', 'f05'], /no fuzzer switch re-creates f05/],
    [['--broken', 'f01', '--policy', 'legacy-zip'], /--policy: --broken f01 sets it/],
    [['--broken', 'f06', '--no-pins'], /--no-pins: --broken f06 sets it/],
  ])('bad usage exits 2: %s', async (args, message) => {
    const r = await kvoff('fuzz', ...args, '--schedules', '5');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });
});
