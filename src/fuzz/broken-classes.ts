// The failure classes of docs/failure-classes.md that a test-only switch can
// re-create in the fuzzer: `kvoff fuzz --broken <class>`, the per-class rows
// of `npm run bench:fuzz`, and the fuzz campaigns of test/failure-classes/.
// Each row turns one protection off (a legacy policy, a no-pin, no-settle or
// no-re-validation variant, or a switch) and names the invariants that show
// the class. The rows come from the list of fault switches
// (src/fuzz/switches.ts). A class without a row is one no fuzzer switch
// reaches; its test file says how it is shown instead. After the classes, the
// rule variants: bugs in the rule itself (not races), which only an oracle
// that does not share the rule's code can find (docs/fuzzing.md).
import { InvalidArgumentError, quoted } from '../errors.js';
import type { StorePolicy } from '../ready.js';
import type { InvariantName } from './oracle.js';
import type { FuzzOptions } from './run.js';
import { FAULT_SWITCHES } from './switches.js';
import type { FaultSwitch, RuntimeSwitch } from './switches.js';
import type { FuzzTarget } from './token.js';

/** The twelve classes, F1..F12, as their canonical ids. */
export const FAILURE_CLASSES = [
  'f01',
  'f02',
  'f03',
  'f04',
  'f05',
  'f06',
  'f07',
  'f08',
  'f09',
  'f10',
  'f11',
  'f12',
] as const;
export type FailureClassId = (typeof FAILURE_CLASSES)[number];

/** The title of each class, as docs/failure-classes.md names it. */
const TITLES: Readonly<Record<FailureClassId, string>> = {
  f01: 'the store cursor passes a chunk whose key is missing',
  f02: 'the EAGLE trailing-chunk exclusion applied to the keys but not to the cursor',
  f03: 'key/block length assertion at the token boundary',
  f04: "storing a finished request's last sampled token, whose KV was never computed",
  f05: 'a preempted request re-admitted while its stores are in flight',
  f06: 'a source block freed and reallocated before its copy finished',
  f07: 'eviction of entries in use',
  f08: 'a reference taken and never dropped',
  f09: 'allocation failure treated as success',
  f10: 'deferred work acknowledged at deferral and dropped',
  f11: 'a failed load still reported as a full hit',
  f12: 'an entry visible to lookups before its copy finished',
};

/** The switches that plant a bug in the rule itself (issue 32): `--broken rule-reachability`. */
type RuleSwitch = Extract<(typeof FAULT_SWITCHES)[number], { readonly rule: string }>;
type RuleVariantId = RuleSwitch['name'];
const RULE_SWITCHES: readonly RuleSwitch[] = FAULT_SWITCHES.filter(
  (s): s is RuleSwitch => 'rule' in s,
);
const RULE_VARIANTS: readonly RuleVariantId[] = RULE_SWITCHES.map((s) => s.name);
/** The switches with a --broken row of their own (`--broken publish-on-first-ack`). */
type RowSwitch = Extract<(typeof FAULT_SWITCHES)[number], { readonly brokenRow: string }>;
const ROW_SWITCHES: readonly RowSwitch[] = FAULT_SWITCHES.filter(
  (s): s is RowSwitch => 'brokenRow' in s,
);

/** How the fuzzer re-creates one class: the unsafe configuration and what must catch it. */
export interface BrokenClass {
  readonly id: FailureClassId | RuleVariantId | RowSwitch['name'];
  /** The class, as docs/failure-classes.md names it. */
  readonly title: string;
  /** What the variant turns off, in words (for --help, reports and the benchmark). */
  readonly variant: string;
  /** roles (default) or runtime. */
  readonly target?: FuzzTarget;
  /** Store policy (default ready-prefix). */
  readonly policy?: StorePolicy;
  /** False: no pins, and a pool that reuses pinned blocks. */
  readonly pins?: boolean;
  /** False: the planner skips its snapshot re-validation. */
  readonly revalidate?: boolean;
  /** False: the end-of-request protocol is off. */
  readonly settle?: boolean;
  readonly switches?: readonly RuntimeSwitch[];
  /** The invariants that show this class (the campaign watches only these). */
  readonly watch: readonly InvariantName[];
}

/**
 * One row per class a fuzzer switch re-creates: the first switch of the list
 * (src/fuzz/switches.ts) that names the class and that the fuzzer can turn on.
 */
export const BROKEN_CLASSES: readonly BrokenClass[] = [
  ...FAILURE_CLASSES.flatMap((id) => {
    const s = (FAULT_SWITCHES as readonly FaultSwitch[]).find(
      (x) => x.failureClass === id && x.fuzz !== undefined,
    );
    return s === undefined ? [] : rowOf(id, TITLES[id], s);
  }),
  // Rows in id order: the variants with a row of their own and the rule variants, by name.
  ...[
    ...ROW_SWITCHES.map((s) => ({ s: s as FaultSwitch, title: s.brokenRow })),
    ...RULE_SWITCHES.map((s) => ({ s: s as FaultSwitch, title: s.rule })),
  ]
    .sort((a, b) => (a.s.name < b.s.name ? -1 : 1))
    .flatMap(({ s, title }) => rowOf(s.name as BrokenClass['id'], title, s)),
];

/** The row of a class (or rule variant) `id` the switch `s` re-creates; none when the fuzzer cannot turn it on. */
function rowOf(id: BrokenClass['id'], title: string, s: FaultSwitch): BrokenClass[] {
  if (s.fuzz === undefined || s.watch === undefined) return [];
  const f = s.fuzz;
  const row: BrokenClass = {
    id,
    title,
    variant:
      f.kind === 'policy'
        ? `policy ${f.policy} (${s.variant})`
        : f.kind === 'flag'
          ? `${f.flag} (${s.variant})`
          : `switch ${s.name} (${s.variant})`,
    ...(s.runtimeOnly || s.shownOn === 'runtime' ? { target: 'runtime' as const } : {}),
    ...(f.kind === 'policy' ? { policy: f.policy } : {}),
    ...(f.kind === 'flag' && f.flag === '--no-pins' ? { pins: false } : {}),
    ...(f.kind === 'flag' && f.flag === '--no-revalidate' ? { revalidate: false } : {}),
    ...(f.kind === 'flag' && f.flag === '--no-settle' ? { settle: false } : {}),
    ...(f.kind === 'switch' ? { switches: [s.name as RuntimeSwitch] } : {}),
    watch: s.watch,
  };
  return [row];
}

/** `F1`, `f1`, `F01`, `f01` -> 'f01'; InvalidArgumentError (flag `what`) for anything else. */
export function parseFailureClass(text: string, what = '--broken'): FailureClassId {
  const m = /^[fF](\d{1,2})$/.exec(typeof text === 'string' ? text.trim() : '');
  const id = m ? `f${m[1]!.padStart(2, '0')}` : undefined;
  if (id === undefined || !(FAILURE_CLASSES as readonly string[]).includes(id)) {
    throw new InvalidArgumentError(
      what,
      `unknown failure class ${quoted(String(text))}; known: F1..F12 (f01..f12), see docs/failure-classes.md, the rule variants ${RULE_VARIANTS.join(', ')} and ${ROW_SWITCHES.map((s) => s.name).join(', ')}`,
    );
  }
  return id as FailureClassId;
}

/**
 * The row that re-creates a class or a rule variant (by its name).
 * InvalidArgumentError for an unknown class, and for a known one no fuzzer
 * switch re-creates (its test shows it instead).
 */
export function brokenClass(text: string, what = '--broken'): BrokenClass {
  const name = typeof text === 'string' ? text.trim() : '';
  const named = BROKEN_CLASSES.find(
    (r) => r.id === name && !(FAILURE_CLASSES as readonly string[]).includes(name),
  );
  if (named !== undefined) return named;
  const id = parseFailureClass(text, what);
  const row = BROKEN_CLASSES.find((r) => r.id === id);
  if (row === undefined) {
    throw new InvalidArgumentError(
      what,
      `no fuzzer switch re-creates ${id}; its test in test/failure-classes/ shows it. Fuzzable: ${BROKEN_CLASSES.map((r) => r.id).join(', ')}`,
    );
  }
  return row;
}

/** The fuzz options of a row (everything but strategy, seed and budget). */
export function brokenFuzzOptions(
  row: BrokenClass,
): Pick<
  FuzzOptions,
  'policy' | 'pins' | 'revalidate' | 'settle' | 'target' | 'switches' | 'watch'
> {
  return {
    policy: row.policy ?? 'ready-prefix',
    pins: row.pins ?? true,
    ...(row.revalidate === false ? { revalidate: false } : {}),
    ...(row.settle === false ? { settle: false } : {}),
    ...(row.target === 'runtime' ? { target: 'runtime' as const } : {}),
    ...(row.switches !== undefined && row.switches.length > 0 ? { switches: row.switches } : {}),
    watch: row.watch,
  };
}

/** The same campaign with every protection on: kvoff as shipped, watching the same invariants. */
export function protectedFuzzOptions(
  row: BrokenClass,
): Pick<FuzzOptions, 'policy' | 'pins' | 'target' | 'watch'> {
  return {
    policy: 'ready-prefix',
    pins: true,
    ...(row.target === 'runtime' ? { target: 'runtime' as const } : {}),
    watch: row.watch,
  };
}
