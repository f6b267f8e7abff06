// A clean campaign: the shipped code (no test switch, pins, re-validation and
// the settle protocol on, every invariant watched, the independent
// specification of src/fuzz/spec/ checking every plan, cursor and lookup) run
// over many schedules, the roles and the runtime target, random and PCT in
// turn. A violation here is a bug in kvoff: the campaign stops and prints its
// replay token.
//
//   npm run bench:fuzz-campaign -- --schedules 1000000 [--seconds N] [--seed S]
//
// Schedules are taken in blocks of --block per search, round robin, so a
// campaign stopped early (its --seconds, SIGINT) is still spread over the four
// searches; the JSON is rewritten after every block, so a stopped campaign
// keeps what it ran. Writes bench/results/latest/fuzz-campaign.json (ignored by
// git); KVOFF_BENCH_PUBLISH=1 also refreshes bench/results/fuzz-campaign.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { fuzz } from '../src/fuzz/run.js';
import type { StrategyName } from '../src/fuzz/strategy.js';
import type { FuzzTarget } from '../src/fuzz/token.js';
import { commitInfo, machineInfo } from './lib/machine.js';
import { LATEST_DIR, publishRequested, publishResults, shownPath } from './lib/results-dir.js';

interface Search {
  readonly target: FuzzTarget;
  readonly strategy: StrategyName;
  /** Its first seed; schedule k of this search runs seed firstSeed + k. */
  readonly firstSeed: number;
  schedules: number;
  steps: number;
  elapsedMs: number;
}

const SEARCHES: readonly Pick<Search, 'target' | 'strategy'>[] = [
  { target: 'roles', strategy: 'random' },
  { target: 'roles', strategy: 'pct' },
  { target: 'runtime', strategy: 'random' },
  { target: 'runtime', strategy: 'pct' },
];

function positiveInt(what: string) {
  return (text: string): number => {
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < 1)
      throw new InvalidArgumentError(`${what} must be a positive integer`);
    return n;
  };
}

async function main(argv: readonly string[]): Promise<void> {
  const o = new Command()
    .name('npm run bench:fuzz-campaign --')
    .description('a clean fuzz campaign of the shipped code over both targets and both strategies')
    .addOption(
      new Option('--schedules <n>', 'schedules in all')
        .argParser(positiveInt('--schedules'))
        .default(1_000_000),
    )
    .addOption(
      new Option('--seconds <n>', 'stop after n seconds').argParser(positiveInt('--seconds')),
    )
    .addOption(
      new Option('--seed <s>', 'first seed; each search takes its own range')
        .argParser(positiveInt('--seed'))
        .default(1),
    )
    .addOption(
      new Option('--block <n>', 'schedules per search before the next one runs')
        .argParser(positiveInt('--block'))
        .default(2_000),
    )
    .exitOverride()
    .parse(argv, { from: 'user' })
    .opts<{ schedules: number; seconds?: number; seed: number; block: number }>();

  // Each search draws from its own range of seeds, far apart, so no two share a schedule.
  const searches: Search[] = SEARCHES.map((s, i) => ({
    ...s,
    firstSeed: (o.seed + i * 100_000_000) >>> 0,
    schedules: 0,
    steps: 0,
    elapsedMs: 0,
  }));
  const started = Date.now();
  const deadline = o.seconds === undefined ? Infinity : started + o.seconds * 1000;
  const stop = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => stop.abort());
  const loadStart = loadavg()[0]!;
  let violation: Record<string, unknown> | undefined;
  const out = join(LATEST_DIR, 'fuzz-campaign.json');
  mkdirSync(LATEST_DIR, { recursive: true });
  const total = () => searches.reduce((n, s) => n + s.schedules, 0);
  const write = () => {
    const result = {
      benchmark: 'fuzz-campaign',
      ...commitInfo(),
      machine: machineInfo(),
      startedAt: new Date(started).toISOString(),
      elapsedS: Math.round((Date.now() - started) / 1000),
      loadAverage1mStart: loadStart,
      loadAverage1mEnd: loadavg()[0]!,
      schedulesAsked: o.schedules,
      schedules: total(),
      violations: violation === undefined ? 0 : 1,
      ...(violation === undefined ? {} : { violation }),
      searches: searches.map((s) => ({
        ...s,
        schedulesPerSecond: s.elapsedMs > 0 ? Math.round((s.schedules * 1000) / s.elapsedMs) : 0,
      })),
    };
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  };
  // Bounded: every pass of this loop runs at least one schedule, so it ends by
  // the schedule count at the latest.
  while (total() < o.schedules && Date.now() < deadline && !stop.signal.aborted && !violation) {
    for (const s of searches) {
      const left = o.schedules - total();
      if (left <= 0 || Date.now() >= deadline || stop.signal.aborted) break;
      const r = await fuzz({
        policy: 'ready-prefix',
        strategy: s.strategy,
        pins: true,
        seed: (s.firstSeed + s.schedules) >>> 0,
        schedules: Math.min(o.block, left),
        ...(o.seconds === undefined
          ? {}
          : { seconds: Math.max(1, (deadline - Date.now()) / 1000) }),
        target: s.target,
        signal: stop.signal,
      });
      s.schedules += r.schedules;
      s.steps += r.steps;
      s.elapsedMs += r.elapsedMs;
      if (r.first !== undefined) {
        violation = {
          target: s.target,
          strategy: s.strategy,
          seed: r.first.seed,
          invariant: r.first.invariant,
          message: r.first.message,
          replayToken: r.first.replayToken,
        };
        break;
      }
    }
    write();
    process.stderr.write(
      `fuzz-campaign: ${total().toLocaleString('en-US')} schedules, ${violation ? 'a violation' : 'clean'}\n`,
    );
  }
  write();
  const table = searches.map((s) => ({
    target: s.target,
    strategy: s.strategy,
    schedules: s.schedules,
    'schedules/s': s.elapsedMs > 0 ? Math.round((s.schedules * 1000) / s.elapsedMs) : 0,
  }));
  console.table(table);
  console.log(
    violation
      ? `VIOLATION ${String(violation.invariant)}: ${String(violation.message)} (replay: kvoff fuzz --replay ${String(violation.replayToken)})`
      : `clean: ${total().toLocaleString('en-US')} schedules, 0 violations`,
  );
  console.log(`results: ${shownPath(out)}`);
  if (publishRequested()) console.log(`published: ${shownPath(publishResults(out))}`);
  process.exitCode = violation ? 1 : 0;
}

await main(process.argv.slice(2));
