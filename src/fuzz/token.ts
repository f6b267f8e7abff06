// Replay tokens. A schedule is fully determined by (policy, strategy, pins,
// seed); a shrunk schedule adds the scenario events it kept (indexes into the
// seed's events) and its decision list (one character per decision). Tokens
// are plain ASCII without spaces, so they paste into a shell unquoted:
//
//   kvf1.legacy-zip.pct.pins.1234.trl2                  a whole schedule
//   kvf1.legacy-zip.pct.pins.1234.trl2.e0,2.d31340t2    a shrunk one
//   kvf1.legacy-zip.pct.pins.1234.trl2.watch-hole       watching one invariant
//   kvf1.ready-prefix.pct.pins.1234.r0.trl2             planner without re-validation
//   kvf1.ready-prefix.pct.pins.1234.trl2.s0             without the settle protocol
//   kvf1.ready-prefix.random.pins.1234.trt4             --target runtime
//   kvf1.ready-prefix.random.pins.1234.trt4.uload-while-writing  a runtime test switch on
//
// The runtime target's part carries the version of its schedules: when the
// roles came to be driven by one role driver (src/runtime/role-loop.ts) the
// same seed drew another interleaving, so a `.trt` token (the version before)
// is refused with a message instead of silently replaying a different schedule.
// `.trt3`: the runtime scenarios gained tensor-parallel ranks, drawn after
// every other draw, so a seed that draws one rank replays as under `.trt2`
// and a seed that draws more replays another schedule: `.trt2` is refused too.
// `.trt4`: the transfer backend of the runtime scenarios has a capacity (the
// store holds its passes while that many copy tasks are in flight), drawn the
// same way: a seed that draws none replays as under `.trt3`, one that draws a
// capacity another schedule, so `.trt3` is refused too.
//
// The roles target's part (`.trl2`) carries its version the same way. Its
// tokens had no part before (version 1); since its engine schedules by the
// engine model's policy (steps fitted to the pool, policy preemptions, one
// request's action per decision: src/fuzz/world-schedule.ts) a seed draws
// another schedule, so a roles token without the part is refused, naming the
// seed to draw again.
//
// The watched invariants were once written `.w<invariants>` (`.whole` for
// hole), which read as "whole schedule"; such tokens still decode. The parts
// of the fault switches (`nopins`, `r0`, `s0`, `u<switches>`) come from their
// list, src/fuzz/switches.ts.
import { InvalidArgumentError, quoted } from '../errors.js';
import { STORE_POLICIES } from '../ready.js';
import type { StorePolicy } from '../ready.js';
import { INVARIANTS } from './oracle.js';
import type { InvariantName } from './oracle.js';
import { ACTORS } from './scenario.js';
import { RUNTIME_SWITCHES, switchFlag } from './switches.js';
import type { RuntimeSwitch } from './switches.js';
import { STRATEGIES } from './strategy.js';
import type { StrategyName } from './strategy.js';

export interface ReplaySpec {
  readonly policy: StorePolicy;
  readonly strategy: StrategyName;
  readonly pins: boolean;
  readonly seed: number;
  /** Indexes of the seed scenario's events kept by shrinking; all when absent. */
  readonly events?: readonly number[];
  /** Decision list of a shrunk schedule (actor ids, -1 for a stalled tick); strategy when absent. */
  readonly decisions?: readonly number[];
  /** Invariants watched (the others are not checked); all when absent. */
  readonly watch?: readonly InvariantName[];
  /** False: the planner skips its snapshot re-validation (the unsafe variant). */
  readonly revalidate?: boolean;
  /** 'runtime': the runtime's own loop classes (src/fuzz/runtime-world.ts); the roles world when absent. */
  readonly target?: FuzzTarget;
  /** Runtime test-only switches turned on (target runtime only). */
  readonly switches?: readonly RuntimeSwitch[];
  /** False: the end-of-request protocol is off (the unsafe variant, planner's unsafeSkipSettle). */
  readonly settle?: boolean;
}

const FUZZ_TARGETS = ['roles', 'runtime'] as const;
export type FuzzTarget = (typeof FUZZ_TARGETS)[number];

const PREFIX = 'kvf1';
/** The runtime target's part: its schedules' version (see the head of this file). */
const RUNTIME_TARGET = 'trt4';
/** Runtime target parts of earlier versions, refused by name. */
const RUNTIME_TARGETS_OLD: readonly string[] = ['trt', 'trt2', 'trt3'];
/** The roles target's part: its schedules' version (version 1 had no part). */
const ROLES_TARGET = 'trl2';
const NO_PINS = switchFlag('no-pins').token;
const NO_REVALIDATE = switchFlag('no-revalidate').token;
const NO_SETTLE = switchFlag('no-settle').token;
/** The part listing runtime switches: `u<names>`. */
const SWITCHES_PREFIX = 'u';
/** The part naming watched invariants: `watch-hole,crash`. */
const WATCH_PREFIX = 'watch-';
/** The old spelling of that part (`whole` = w + hole), still accepted. */
const WATCH_PREFIX_OLD = 'w';
/** Longest token accepted (a shrunk schedule's decisions are bounded well below this). */
const TOKEN_CHARS_MAX = 200_000;

export function encodeReplayToken(spec: ReplaySpec): string {
  const parts = [
    PREFIX,
    spec.policy,
    spec.strategy,
    spec.pins ? 'pins' : NO_PINS,
    String(spec.seed),
  ];
  if (spec.revalidate === false) parts.push(NO_REVALIDATE);
  parts.push(spec.target === 'runtime' ? RUNTIME_TARGET : ROLES_TARGET);
  if (spec.switches !== undefined && spec.switches.length > 0) {
    parts.push(`${SWITCHES_PREFIX}${spec.switches.join(',')}`);
  }
  if (spec.settle === false) parts.push(NO_SETTLE);
  if (spec.watch !== undefined) parts.push(`${WATCH_PREFIX}${spec.watch.join(',')}`);
  if (spec.events !== undefined) parts.push(`e${spec.events.join(',')}`);
  if (spec.decisions !== undefined) {
    parts.push(`d${spec.decisions.map((d) => (d < 0 ? 't' : String(d))).join('')}`);
  }
  return parts.join('.');
}

export function decodeReplayToken(token: string): ReplaySpec {
  const bad = (rule: string) => new InvalidArgumentError('--replay', rule);
  if (typeof token !== 'string' || token.length > TOKEN_CHARS_MAX) throw bad('not a replay token');
  const parts = token.trim().split('.');
  if (parts[0] !== PREFIX || parts.length < 5 || parts.length > 12) {
    throw bad(
      `expected ${PREFIX}.<policy>.<strategy>.<pins|nopins>.<seed>[.r0][.s0].<${ROLES_TARGET}|${RUNTIME_TARGET}>[.u<switches>][.${WATCH_PREFIX}<invariants>][.e<events>][.d<decisions>]`,
    );
  }
  const [, policy, strategy, pins, seedText, ...rest] = parts as [
    string,
    string,
    string,
    string,
    string,
    ...string[],
  ];
  if (!(STORE_POLICIES as readonly string[]).includes(policy))
    throw bad(`unknown policy ${quoted(policy)}`);
  if (!(STRATEGIES as readonly string[]).includes(strategy))
    throw bad(`unknown strategy ${quoted(strategy)}`);
  if (pins !== 'pins' && pins !== NO_PINS) throw bad(`pins must be "pins" or "${NO_PINS}"`);
  const seed = parseSeed(seedText, '--replay');
  let events: number[] | undefined;
  let decisions: number[] | undefined;
  let watch: InvariantName[] | undefined;
  let revalidate: boolean | undefined;
  let target: FuzzTarget | undefined;
  let switches: RuntimeSwitch[] | undefined;
  let settle: boolean | undefined;
  let roles = false;
  for (const part of rest) {
    if (part === NO_REVALIDATE && revalidate === undefined) {
      revalidate = false;
    } else if (part === NO_SETTLE && settle === undefined) {
      settle = false;
    } else if (part === RUNTIME_TARGET && target === undefined && !roles) {
      target = 'runtime';
    } else if (part === ROLES_TARGET && target === undefined && !roles) {
      roles = true;
    } else if (RUNTIME_TARGETS_OLD.includes(part)) {
      throw bad(
        `${quoted(part)} is a runtime-target token of an earlier kvoff whose schedules no longer replay (the roles are driven, or the scenarios drawn, differently since); draw the seed again with --target runtime --seed ${seed} --schedules 1`,
      );
    } else if (part.startsWith(SWITCHES_PREFIX) && switches === undefined) {
      switches = part
        .slice(1)
        .split(',')
        .map((x) => parseRuntimeSwitch(x, '--replay'));
    } else if (part.startsWith(WATCH_PREFIX_OLD) && watch === undefined) {
      const names = part.startsWith(WATCH_PREFIX)
        ? part.slice(WATCH_PREFIX.length)
        : part.slice(WATCH_PREFIX_OLD.length);
      watch = names.split(',').map((x) => parseInvariant(x, '--replay'));
    } else if (part.startsWith('e') && events === undefined) {
      events = eventIndexes(part, bad);
    } else if (part.startsWith('d') && decisions === undefined) {
      decisions = decisionList(part, bad);
    } else throw bad(`unexpected part ${quoted(part)}`);
  }
  if (target === undefined && !roles) {
    throw bad(
      `a roles-target token of an earlier kvoff (no .${ROLES_TARGET} part) whose schedules no longer replay (the roles world now schedules by the engine's policy); draw the seed again with --policy ${policy} --strategy ${strategy} --seed ${seed} --schedules 1`,
    );
  }
  return {
    policy: policy as StorePolicy,
    strategy: strategy as StrategyName,
    pins: pins === 'pins',
    seed,
    ...(events !== undefined ? { events } : {}),
    ...(decisions !== undefined ? { decisions } : {}),
    ...(watch !== undefined ? { watch } : {}),
    ...(revalidate !== undefined ? { revalidate } : {}),
    ...(target !== undefined ? { target } : {}),
    ...(switches !== undefined ? { switches } : {}),
    ...(settle !== undefined ? { settle } : {}),
  };
}

/** A token's `e<events>` part: the indexes of the seed's events shrinking kept. */
function eventIndexes(part: string, bad: (rule: string) => InvalidArgumentError): number[] {
  if (part.length === 1) return [];
  return part
    .slice(1)
    .split(',')
    .map((x) => {
      const n = Number(x);
      if (!Number.isInteger(n) || n < 0 || n > 1000) throw bad(`bad event index ${quoted(x)}`);
      return n;
    });
}

/** A token's `d<decisions>` part: an actor digit per decision, `t` for a stalled tick (-1). */
function decisionList(part: string, bad: (rule: string) => InvalidArgumentError): number[] {
  const decisions: number[] = [];
  for (const ch of part.slice(1)) {
    if (ch === 't') decisions.push(-1);
    else {
      const n = ch.charCodeAt(0) - 48;
      if (n < 0 || n >= ACTORS.length) throw bad(`bad decision ${quoted(ch)}`);
      decisions.push(n);
    }
  }
  return decisions;
}

export function parseRuntimeSwitch(name: string, what = '--switch'): RuntimeSwitch {
  if ((RUNTIME_SWITCHES as readonly string[]).includes(name)) return name as RuntimeSwitch;
  throw new InvalidArgumentError(
    what,
    `unknown runtime switch ${quoted(name)}; known: ${RUNTIME_SWITCHES.join(', ')}`,
  );
}

export function parseFuzzTarget(name: string): FuzzTarget {
  if ((FUZZ_TARGETS as readonly string[]).includes(name)) return name as FuzzTarget;
  throw new InvalidArgumentError(
    '--target',
    `unknown target ${quoted(name)}; known: ${FUZZ_TARGETS.join(', ')}`,
  );
}

export function parseInvariant(name: string, what = '--watch'): InvariantName {
  if ((INVARIANTS as readonly string[]).includes(name)) return name as InvariantName;
  throw new InvalidArgumentError(
    what,
    `unknown invariant ${quoted(name)}; known: ${INVARIANTS.join(', ')}`,
  );
}

/** A seed is an unsigned 32-bit integer. */
export function parseSeed(text: string, what = '--seed'): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n) || n > 0xffffffff) {
    throw new InvalidArgumentError(what, 'seed must be an integer in [0, 2^32)');
  }
  return n;
}
