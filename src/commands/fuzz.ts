// `kvoff fuzz`: the deterministic race fuzzer. Runs seeded schedules of the
// roles over the shared state until the first invariant violation (or the
// budget ends), shrinks it and prints how to replay it. `--replay TOKEN` runs
// one recorded schedule again, step for step.
//
// Exit codes: 0 no violation, 1 a violation was found, 2 bad usage; stopped by
// SIGINT or SIGTERM without a violation: 130 or 143 (128 + the signal), after
// printing the seeds done and the summary so far.
import { SingleBar } from 'cli-progress';
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { intOption, namedOption, policyOption } from './options.js';
import { loadHashing } from '../hashing.js';
import { describeFailure, fuzz } from '../fuzz/run.js';
import { runSchedule } from '../fuzz/schedule.js';
import type { FailureReport, FuzzReport } from '../fuzz/run.js';
import { parseStrategy } from '../fuzz/strategy.js';
import type { StrategyName } from '../fuzz/strategy.js';
import type { FuzzTarget } from '../fuzz/token.js';
import type { RuntimeSwitch } from '../fuzz/switches.js';
import type { StorePolicy } from '../ready.js';
import {
  decodeReplayToken,
  encodeReplayToken,
  parseFuzzTarget,
  parseInvariant,
  parseRuntimeSwitch,
  parseSeed,
} from '../fuzz/token.js';
import { formatScenario } from '../fuzz/scenario.js';
import { BROKEN_CLASSES, brokenClass, brokenFuzzOptions } from '../fuzz/broken-classes.js';
import type { BrokenClass } from '../fuzz/broken-classes.js';
import {
  RUNTIME_ONLY_SWITCHES,
  RUNTIME_SWITCHES,
  faultSwitch,
  switchFlag,
} from '../fuzz/switches.js';
import { formatTrace } from '../fuzz/trace.js';
import type { TraceLine } from '../fuzz/trace.js';

/** Budget when neither --seconds nor --schedules is given. */
const FUZZ_DEFAULT_SECONDS = 10;
const SECONDS_MAX = 7 * 24 * 3600;
const SCHEDULES_MAX = 1e12;
const STOP_SIGNALS = ['SIGINT', 'SIGTERM'] as const;

interface FuzzFlags {
  policy?: string;
  strategy?: string;
  seconds?: string;
  schedules?: string;
  seed?: string;
  pins: boolean;
  revalidate: boolean;
  settle: boolean;
  json?: boolean;
  replay?: string;
  trace?: boolean;
  watch?: string;
  keepGoing?: boolean;
  target?: string;
  switch?: string;
  broken?: string;
}

export function registerFuzz(program: Command): void {
  program
    .command('fuzz')
    .description(
      'race fuzzer: seeded interleavings of the roles (random or PCT) with faults, checked against the invariants; shrinks and replays failures',
    )
    .option(
      '--target <target>',
      "roles (default): the core roles in the simulator world; runtime: the runtime's own loop classes, rings and doorbells on a virtual clock",
    )
    .option(
      '--switch <switches>',
      `test-only switches that re-create known bugs (comma-separated): ${RUNTIME_SWITCHES.join(', ')} (${RUNTIME_ONLY_SWITCHES.join(', ')} need --target runtime)`,
    )
    .option(
      '--broken <class>',
      `re-create a failure class of docs/failure-classes.md or a rule bug with its test-only switch: ${BROKEN_CLASSES.map((r) => r.id).join(', ')} (classes in F1 or f01 form); it sets the policy, variant, target and watched invariants`,
    )
    .option('--policy <policy>', 'store policy: ready-prefix (default), legacy-assert, legacy-zip')
    .option('--strategy <strategy>', 'scheduling strategy: random (default) or pct')
    .option('--seconds <n>', `run for n seconds (default ${FUZZ_DEFAULT_SECONDS})`)
    .option('--schedules <n>', 'run n schedules')
    .option('--seed <s>', 'first seed; schedule i runs with seed s+i (default: random)')
    .option(switchFlag('no-pins').flag, unsafeVariant('no-pins'))
    .option(switchFlag('no-revalidate').flag, unsafeVariant('no-revalidate'))
    .option(switchFlag('no-settle').flag, unsafeVariant('no-settle'))
    .option('--json', 'print exactly one JSON object on stdout')
    .option('--replay <token>', 'run one recorded schedule again (the token a failure prints)')
    .option('--watch <invariants>', 'report only these invariants (comma-separated), e.g. hole')
    .option(
      '--keep-going',
      'do not stop at the first violation: count them all (the first is shown)',
    )
    .option('--trace', 'also print the full (unshrunk) trace of a failure')
    .addHelpText(
      'after',
      '\nExit codes: 0 no violation; 1 a violation was found; 2 bad options;\n' +
        '130/143 stopped by SIGINT/SIGTERM before the budget (the seeds done and the summary so far are printed).',
    )
    .action(async (flags: FuzzFlags) => {
      if (flags.replay !== undefined) return replay(flags);
      return campaign(flags);
    });
}

/** A fuzzer flag's help: the switch's own words (src/fuzz/switches.ts). */
function unsafeVariant(name: 'no-pins' | 'no-revalidate' | 'no-settle'): string {
  return `the unsafe variant: ${faultSwitch(name).variant}`;
}

function positive(flag: string, text: string, max: number): number {
  // Plain decimals only, as every numeric option: Number() also took '1e3', '0x10' and ''.
  const n = /^\s*(\d+(\.\d+)?|\.\d+)\s*$/.test(text) ? Number(text) : NaN;
  if (!Number.isFinite(n) || n <= 0 || n > max) {
    throw new InvalidArgumentError(flag, `must be a number in (0, ${max}]`);
  }
  return n;
}

async function campaign(given: FuzzFlags): Promise<void> {
  const broken = given.broken !== undefined ? brokenClass(given.broken) : undefined;
  const flags = broken !== undefined ? brokenFlags(given, broken) : given;
  const policy = policyOption(flags.policy);
  // Random is the default: in the benchmark it finds every target in as few or fewer
  // schedules than PCT (see bench/results/fuzz-power.json).
  const strategy = namedOption('--strategy', flags.strategy ?? 'random', parseStrategy);
  if (flags.seconds !== undefined && flags.schedules !== undefined) {
    throw new InvalidArgumentError('--seconds/--schedules', 'give one budget, not both');
  }
  // A count of schedules is a whole number: 2.5 is refused, not rounded.
  const schedules = intOption('--schedules', flags.schedules, 1, SCHEDULES_MAX);
  const seconds =
    flags.seconds !== undefined
      ? positive('--seconds', flags.seconds, SECONDS_MAX)
      : schedules === undefined
        ? FUZZ_DEFAULT_SECONDS
        : undefined;
  const seed =
    flags.seed !== undefined ? parseSeed(flags.seed) : Math.floor(Math.random() * 0x100000000);
  const watch = flags.watch?.split(',').map((x) => parseInvariant(x.trim()));
  const target = parseFuzzTarget(flags.target ?? 'roles');
  const switches = flags.switch?.split(',').map((x) => parseRuntimeSwitch(x.trim()));
  const runtimeOnly = switches?.find((x) => RUNTIME_ONLY_SWITCHES.includes(x));
  if (runtimeOnly !== undefined && target !== 'runtime') {
    throw new InvalidArgumentError('--switch', `${runtimeOnly} needs --target runtime`);
  }
  const bar = progressBar(schedules, seconds);
  // SIGINT/SIGTERM end the campaign after the schedule running now; the summary so far is printed.
  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    stoppedBy ??= signal;
    stop.abort();
  };
  for (const s of STOP_SIGNALS) process.on(s, onSignal);
  if (!flags.json) {
    process.stderr.write(
      'kvoff fuzz: running; SIGINT (Ctrl-C) or SIGTERM stops it and prints the summary so far\n',
    );
  }
  let report: FuzzReport;
  try {
    report = await fuzz({
      policy,
      strategy,
      pins: flags.pins,
      ...(flags.revalidate ? {} : { revalidate: false }),
      ...(flags.settle ? {} : { settle: false }),
      seed,
      ...(watch !== undefined ? { watch } : {}),
      ...(flags.keepGoing ? { keepGoing: true } : {}),
      ...(target === 'runtime' ? { target } : {}),
      ...(switches !== undefined ? { switches } : {}),
      ...(schedules !== undefined ? { schedules } : {}),
      ...(seconds !== undefined ? { seconds } : {}),
      onProgress: (done, ms) => bar?.update(schedules !== undefined ? done : ms / 1000, done),
      signal: stop.signal,
    });
  } finally {
    for (const s of STOP_SIGNALS) process.off(s, onSignal);
    bar?.stop();
  }
  if (report.violations > 0) process.exitCode = 1;
  else if (report.interrupted && stoppedBy !== undefined) {
    process.exitCode = 128 + (stoppedBy === 'SIGINT' ? 2 : 15);
  }
  if (flags.json) {
    process.stdout.write(
      `${JSON.stringify({ ...(broken ? { broken: broken.id } : {}), ...jsonOf(report), ...(stoppedBy ? { interruptedBy: stoppedBy } : {}) })}\n`,
    );
    return;
  }
  const run = { broken, target, switches, policy, strategy, flags, seed, stoppedBy };
  process.stdout.write(`${summaryText(report, run).join('\n')}\n`);
}

/** The campaign's summary for a reader: what ran, the figures, the first failure. */
function summaryText(
  report: FuzzReport,
  run: {
    broken: BrokenClass | undefined;
    target: FuzzTarget;
    switches: RuntimeSwitch[] | undefined;
    policy: StorePolicy;
    strategy: StrategyName;
    flags: FuzzFlags;
    seed: number;
    stoppedBy: NodeJS.Signals | undefined;
  },
): string[] {
  const { broken, target, switches, policy, strategy, flags, seed, stoppedBy } = run;
  const out: string[] = [];
  if (broken) {
    out.push(
      `kvoff fuzz --broken ${broken.id}: ${broken.title}; broken variant: ${broken.variant}`,
    );
  }
  out.push(
    `kvoff fuzz${target === 'runtime' ? ' --target runtime' : ''}${switches ? ` (switches ${switches.join(',')})` : ''}: policy ${policy}, strategy ${strategy}, pins ${flags.pins ? 'on' : 'OFF (unsafe variant)'}${flags.revalidate ? '' : ', re-validation OFF (unsafe variant)'}${flags.settle ? '' : ', settle protocol OFF (unsafe variant)'}, seeds ${seed}..${(seed + report.schedules - 1) >>> 0}`,
  );
  out.push(
    rows([
      ['schedules', String(report.schedules)],
      ['steps', String(report.steps)],
      ['schedules/s', report.schedulesPerSecond.toFixed(0)],
      [
        'violations',
        `${report.violations}${
          report.violations > 0
            ? ` (${Object.entries(report.violationsByInvariant)
                .map(([k, v]) => `${k} ${v}`)
                .join(', ')})`
            : ''
        }`,
      ],
    ]),
  );
  if (report.interrupted) {
    out.push(
      `interrupted by ${stoppedBy ?? 'a signal'} after ${report.schedules} schedules (seeds ${seed}..${(seed + report.schedules - 1) >>> 0} done)`,
    );
  }
  if (report.first) out.push(failureText(report.first, flags.trace ?? false));
  else out.push(`no invariant violated${report.interrupted ? ' so far' : ''}`);
  return out;
}

/**
 * `--broken <class>`: the flags of the class's row (src/fuzz/broken-classes.ts).
 * The row fixes the policy, the variant, the target, the switches and the
 * watched invariants; giving one of those as well is refused, so a run says
 * exactly what it tested.
 */
function brokenFlags(flags: FuzzFlags, row: BrokenClass): FuzzFlags {
  for (const f of ['policy', 'target', 'switch', 'watch'] as const) {
    if (flags[f] !== undefined) {
      throw new InvalidArgumentError(`--${f}`, `--broken ${row.id} sets it; drop it`);
    }
  }
  for (const f of ['pins', 'revalidate', 'settle'] as const) {
    if (!flags[f])
      throw new InvalidArgumentError(`--no-${f}`, `--broken ${row.id} sets it; drop it`);
  }
  const o = brokenFuzzOptions(row);
  return {
    ...flags,
    policy: o.policy,
    pins: o.pins,
    revalidate: o.revalidate !== false,
    settle: o.settle !== false,
    ...(o.target !== undefined ? { target: o.target } : {}),
    ...(o.switches !== undefined ? { switch: o.switches.join(',') } : {}),
    ...(o.watch !== undefined ? { watch: o.watch.join(',') } : {}),
  };
}

async function replay(flags: FuzzFlags): Promise<void> {
  for (const f of [
    'policy',
    'strategy',
    'seed',
    'seconds',
    'schedules',
    'watch',
    'keepGoing',
    'target',
    'switch',
    'broken',
  ] as const) {
    if (flags[f] !== undefined) {
      throw new InvalidArgumentError(`--${f}`, 'the replay token already fixes it; drop it');
    }
  }
  if (!flags.pins) throw new InvalidArgumentError('--no-pins', 'the replay token already fixes it');
  if (!flags.revalidate) {
    throw new InvalidArgumentError('--no-revalidate', 'the replay token already fixes it');
  }
  if (!flags.settle) {
    throw new InvalidArgumentError('--no-settle', 'the replay token already fixes it');
  }
  const spec = decodeReplayToken(flags.replay!);
  const hashing = await loadHashing();
  const result = runSchedule(hashing, spec, true);
  const v = result.violation;
  if (v !== undefined) process.exitCode = 1;
  // A whole schedule that fails is shrunk as well; a shrunk one is shown as is.
  const failure: FailureReport | undefined =
    v !== undefined && spec.decisions === undefined ? describeFailure(hashing, spec) : undefined;
  if (flags.json) {
    process.stdout.write(
      `${JSON.stringify({
        replay: encodeReplayToken(spec),
        target: spec.target ?? 'roles',
        policy: spec.policy,
        strategy: spec.strategy,
        pins: spec.pins,
        seed: spec.seed,
        schedules: 1,
        violations: v ? 1 : 0,
        traceLength: result.steps,
        traceHash: result.traceHash,
        ...(v ? { invariant: v.invariant, message: v.message, detectedAtStep: v.decision } : {}),
        ...(failure
          ? {
              shrunkLength: failure.shrunkLength,
              shrunkHash: failure.shrunkHash,
              shrunkMessage: failure.shrunkMessage,
              shrunkToken: failure.shrunkToken,
              shrunkTrace: failure.shrunkTrace.map(lineText),
            }
          : {}),
        trace: result.lines.map(lineText),
      })}\n`,
    );
    return;
  }
  const out: string[] = [];
  out.push(`replay ${encodeReplayToken(spec)}`);
  out.push(
    rows([
      ['scenario', `${result.scenario.geometry}, ${result.scenario.events.length} events`],
      ['trace', `${result.steps} steps, hash ${result.traceHash}`],
      ['result', v ? `VIOLATION ${v.invariant}: ${v.message}` : 'no invariant violated'],
    ]),
  );
  out.push('', 'trace:', formatTrace(result.lines));
  if (failure) {
    out.push(
      '',
      `shrunk: ${failure.shrunkLength} steps (from ${failure.traceLength}), hash ${failure.shrunkHash}`,
      `  ${failure.shrunkMessage}`,
      `  replay: kvoff fuzz --replay ${failure.shrunkToken}`,
      formatTrace(failure.shrunkTrace),
    );
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

function jsonOf(report: FuzzReport): Record<string, unknown> {
  const f = report.first;
  return {
    target: report.target ?? 'roles',
    ...(report.switches ? { switches: report.switches } : {}),
    policy: report.policy,
    strategy: report.strategy,
    pins: report.pins,
    ...(report.settle === false ? { settle: false } : {}),
    ...(report.watch ? { watch: report.watch } : {}),
    baseSeed: report.baseSeed,
    schedules: report.schedules,
    violations: report.violations,
    violationsByInvariant: report.violationsByInvariant,
    steps: report.steps,
    elapsedMs: Math.round(report.elapsedMs),
    schedulesPerSecond: Math.round(report.schedulesPerSecond),
    ...(f
      ? {
          seed: f.seed,
          invariant: f.invariant,
          message: f.message,
          traceLength: f.traceLength,
          traceHash: f.traceHash,
          replayToken: f.replayToken,
          shrunkLength: f.shrunkLength,
          shrunkHash: f.shrunkHash,
          shrunkMessage: f.shrunkMessage,
          shrunkToken: f.shrunkToken,
          shrunkTrace: f.shrunkTrace.map(lineText),
          shrunkScenario: f.shrunkScenario,
        }
      : {}),
  };
}

function failureText(f: FailureReport, full: boolean): string {
  const out = [
    '',
    'VIOLATION',
    rows([
      ['seed', String(f.seed)],
      ['invariant', f.invariant],
      ['message', f.message],
      ['trace', `${f.traceLength} steps, hash ${f.traceHash}`],
      ['replay', `kvoff fuzz --replay ${f.replayToken}`],
      ['shrunk', `${f.shrunkLength} steps, hash ${f.shrunkHash}`],
      // The shrunk trace below names its own request ids: its message says what failed there.
      ['shrunk message', f.shrunkMessage],
      ['replay shrunk', `kvoff fuzz --replay ${f.shrunkToken}`],
    ]),
  ];
  if (full) out.push('', `trace (${f.traceLength} steps):`, formatTrace(f.trace));
  out.push(
    '',
    `shrunk trace (${f.shrunkLength} steps; "> " marks steps inside a store-planning pass):`,
    formatTrace(f.shrunkTrace),
    '',
    'shrunk scenario (for a regression test: runSchedule with the shrunk replay token, or these events):',
    formatScenario(f.shrunkScenario),
  );
  return out.join('\n');
}

function lineText(l: TraceLine): string {
  return `${l.decision} ${l.nested ? '> ' : ''}${l.actor} ${l.text}`;
}

function rows(items: ReadonlyArray<readonly [string, string]>): string {
  const width = Math.max(...items.map(([k]) => k.length));
  return items.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`).join('\n');
}

interface Bar {
  update(value: number, schedules: number): void;
  stop(): void;
}

/** A bar on stderr only when it is a terminal and NO_COLOR is unset: no ANSI in pipes or logs. */
function progressBar(schedules: number | undefined, seconds: number | undefined): Bar | undefined {
  if (process.stderr.isTTY !== true || process.env.NO_COLOR) return undefined;
  const total = schedules ?? seconds ?? 1;
  const bar = new SingleBar({
    stream: process.stderr,
    format: `fuzz [{bar}] {percentage}% | {schedules} schedules`,
    barCompleteChar: '#',
    barIncompleteChar: '-',
    hideCursor: true,
    clearOnComplete: true,
  });
  bar.start(total, 0, { schedules: 0 });
  return {
    update: (value, done) => bar.update(Math.min(value, total), { schedules: done }),
    stop: () => bar.stop(),
  };
}
