// The failure classes of docs/failure-classes.md that a test-only switch can
// re-create in the fuzzer: `kvoff fuzz --broken <class>`, the per-class rows
// of `npm run bench:fuzz`, and the fuzz campaigns of test/failure-classes/.
// Each row turns one protection off (a legacy policy, a no-pin, no-settle or
// no-re-validation variant, or a switch) and names the invariants that show
// the class. A class without a row is one no fuzzer switch reaches; its test
// file says how it is shown instead. After the classes, the rule variants:
// bugs in the rule itself (not races), which only an oracle that does not
// share the rule's code can find (docs/fuzzing.md). Rows in id order.
import { InvalidArgumentError, quoted } from '../errors.js';
import type { StorePolicy } from '../ready.js';
import type { InvariantName } from './oracle.js';
import type { FuzzOptions } from './run.js';
import type { RuntimeSwitch } from './switches.js';
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

/** Bugs planted in the rule itself (issue 32), fuzzable by name: `--broken rule-reachability`. */
const RULE_VARIANTS = ['rule-last-token', 'rule-lookup-long', 'rule-reachability'] as const;
type RuleVariantId = (typeof RULE_VARIANTS)[number];

/** How the fuzzer re-creates one class: the unsafe configuration and what must catch it. */
export interface BrokenClass {
  readonly id: FailureClassId | RuleVariantId;
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

export const BROKEN_CLASSES: readonly BrokenClass[] = [
  {
    id: 'f01',
    title: 'the store cursor passes a chunk whose key is missing',
    variant: 'policy legacy-zip (the cursor moves to the token boundary)',
    policy: 'legacy-zip',
    watch: ['hole', 'cursor-within-ready'],
  },
  {
    id: 'f02',
    title: 'the EAGLE trailing-chunk exclusion applied to the keys but not to the cursor',
    variant: 'switch eagle-cursor-unexcluded',
    switches: ['eagle-cursor-unexcluded'],
    watch: ['hole', 'cursor-within-ready'],
  },
  {
    id: 'f03',
    title: 'key/block length assertion at the token boundary',
    variant: 'policy legacy-assert (unequal slices throw: the engine crash)',
    policy: 'legacy-assert',
    watch: ['crash'],
  },
  {
    id: 'f04',
    title: "storing a finished request's last sampled token, whose KV was never computed",
    variant: 'switch store-last-sampled-token (runtime target: its bytes were never written)',
    target: 'runtime',
    switches: ['store-last-sampled-token'],
    watch: ['mispairing'],
  },
  {
    id: 'f06',
    title: 'a source block freed and reallocated before its copy finished',
    variant: 'no pins (--no-pins: the pool hands out blocks still being copied)',
    pins: false,
    watch: ['mispairing'],
  },
  {
    id: 'f07',
    title: 'eviction of entries in use',
    variant:
      'switch evict-in-use (runtime target: the host tier evicts entries being written or read)',
    target: 'runtime',
    switches: ['evict-in-use'],
    watch: ['mispairing'],
  },
  {
    id: 'f08',
    title: 'a reference taken and never dropped',
    variant:
      'switch leak-on-load-failure (runtime target: a failed load keeps its tier read references)',
    target: 'runtime',
    switches: ['leak-on-load-failure'],
    watch: ['leak'],
  },
  {
    id: 'f09',
    title: 'allocation failure treated as success',
    variant:
      'switch ack-on-alloc-failure (an offer the tier refused counts as stored; the cursor moves on)',
    switches: ['ack-on-alloc-failure'],
    watch: ['hole'],
  },
  {
    id: 'f10',
    title: 'deferred work acknowledged at deferral and dropped',
    variant:
      'switch drop-deferred (the cursor moves over chunks deferred for lagging keys or blocks)',
    switches: ['drop-deferred'],
    watch: ['hole'],
  },
  {
    id: 'f12',
    title: 'an entry visible to lookups before its copy finished',
    variant: 'switch load-while-writing (runtime target: entries being written count as hits)',
    target: 'runtime',
    switches: ['load-while-writing'],
    watch: ['mispairing'],
  },
  {
    id: 'rule-last-token',
    title: 'the last prompt token loaded although a windowed group needs it computed',
    variant:
      'switch rule-last-token (runtime target: with a windowed group the lookup may hit every prompt token)',
    target: 'runtime',
    switches: ['rule-last-token'],
    watch: ['load-decision'],
  },
  {
    id: 'rule-lookup-long',
    title: 'a lookup hit one chunk too long',
    variant:
      'switch rule-lookup-long (runtime target: an EAGLE group keeps the last chunk of its widened query)',
    target: 'runtime',
    switches: ['rule-lookup-long'],
    watch: ['load-decision'],
  },
  {
    id: 'rule-reachability',
    title: 'a reachable sliding-window chunk judged unreachable, so never stored',
    variant:
      'switch rule-reachability (the first reachable chunk of each alignment segment counts as unreachable)',
    switches: ['rule-reachability'],
    watch: ['hole'],
  },
];

/** `F1`, `f1`, `F01`, `f01` -> 'f01'; InvalidArgumentError (flag `what`) for anything else. */
export function parseFailureClass(text: string, what = '--broken'): FailureClassId {
  const m = /^[fF](\d{1,2})$/.exec(typeof text === 'string' ? text.trim() : '');
  const id = m ? `f${m[1]!.padStart(2, '0')}` : undefined;
  if (id === undefined || !(FAILURE_CLASSES as readonly string[]).includes(id)) {
    throw new InvalidArgumentError(
      what,
      `unknown failure class ${quoted(String(text))}; known: F1..F12 (f01..f12), see docs/failure-classes.md, and the rule variants ${RULE_VARIANTS.join(', ')}`,
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
  const rule = BROKEN_CLASSES.find((r) => r.id === name && name.startsWith('rule-'));
  if (rule !== undefined) return rule;
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
