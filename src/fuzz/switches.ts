// Every test-only fault switch, listed once: its name, what it turns off, the
// options that carry it (and on what), how the fuzzer turns it on (a --switch
// name, a flag of its own with its replay token part, or a store policy), the
// failure class of docs/failure-classes.md it re-creates and the invariants
// that show it. Everything else reads this list: the fuzz targets' options,
// `kvoff fuzz --switch` and its help, the replay token's parts, the rows of
// `kvoff fuzz --broken <class>` (broken-classes.ts) and the check that
// docs/failure-classes.md names each switch on its class's row.
//
// Each switch re-creates a known bug so a test can show what catches it; the
// code as shipped has every one off. Append entries at the end.
import type { ConfigInput } from '../config.js';
import type { LocalOffloadOptions } from '../local.js';
import type { LookupUnsafe } from '../lookup.js';
import type { PlannerOptions } from '../planner.js';
import type { StorePolicy } from '../ready.js';
import type { StoreLoopOptions } from '../runtime/store-options.js';
import type { HostTierOptions } from '../tier/host-tier.js';
import type { LowerTierSwitches } from '../tier/lower.js';
import type { InvariantName } from './oracle.js';

/** Where a switch's option is set, and its name there. */
type SwitchOption =
  | { readonly on: 'PlannerOptions'; readonly option: keyof PlannerOptions & `unsafe${string}` }
  | { readonly on: 'StoreLoopOptions'; readonly option: keyof StoreLoopOptions & `unsafe${string}` }
  | { readonly on: 'HostTierOptions'; readonly option: keyof HostTierOptions }
  | { readonly on: 'LowerTierSwitches'; readonly option: keyof LowerTierSwitches }
  | {
      readonly on: 'LocalOffloadOptions';
      readonly option: keyof LocalOffloadOptions & `unsafe${string}`;
    }
  | { readonly on: 'GpuBlockPool'; readonly option: 'unsafeIgnorePins' }
  | { readonly on: 'RuntimeOptions'; readonly option: 'unsafeSkipPins' | 'unsafeTierSwitches' }
  | { readonly on: 'ConfigInput'; readonly option: keyof ConfigInput & `unsafe${string}` }
  | { readonly on: 'LookupUnsafe'; readonly option: keyof LookupUnsafe };

/** How the fuzzer turns a switch on. */
type FuzzedBy =
  /** `--switch <name>`; the replay token lists it in its `u<names>` part. */
  | { readonly kind: 'switch' }
  /** A flag of its own, and its own replay token part. */
  | {
      readonly kind: 'flag';
      readonly flag: '--no-pins' | '--no-revalidate' | '--no-settle';
      readonly token: 'nopins' | 'r0' | 's0';
    }
  /** A store policy (`--policy`; the token's policy part). */
  | { readonly kind: 'policy'; readonly policy: Exclude<StorePolicy, 'ready-prefix'> };

export interface FaultSwitch {
  readonly name: string;
  /** What the switch does, in words (help text, reports, the benchmark). */
  readonly variant: string;
  /** The options that carry it; a fuzzer switch's first option is the one the fuzz targets set. */
  readonly options: readonly SwitchOption[];
  /** How the fuzzer turns it on; absent: only the tests do (through the options). */
  readonly fuzz?: FuzzedBy;
  /** Only the runtime target has it (the roles world refuses it rather than ignore it). */
  readonly runtimeOnly?: boolean;
  /** The target whose oracle shows it, when both have it but only the runtime's can tell. */
  readonly shownOn?: 'runtime';
  /** The failure class it re-creates (docs/failure-classes.md), if any. */
  readonly failureClass?: string;
  /**
   * A bug planted in the rule itself (issue 32), not a race: what it gets
   * wrong. `kvoff fuzz --broken <name>` runs it; only an oracle that does not
   * share the rule's code can find it (docs/fuzzing.md).
   */
  readonly rule?: string;
  /**
   * A `kvoff fuzz --broken <name>` row of its own, for a variant its failure
   * class's row does not run (that row takes the class's first switch): what
   * the variant gets wrong.
   */
  readonly brokenRow?: string;
  /** The invariants that show it (what a campaign of it watches). */
  readonly watch?: readonly InvariantName[];
}

export const FAULT_SWITCHES = [
  {
    name: 'legacy-zip',
    variant: 'the cursor moves to the token boundary',
    options: [],
    fuzz: { kind: 'policy', policy: 'legacy-zip' },
    failureClass: 'f01',
    watch: ['hole', 'cursor-within-ready'],
  },
  {
    name: 'eagle-cursor-unexcluded',
    variant: 'the EAGLE exclusion on the chunks stored, not on the cursor',
    options: [{ on: 'PlannerOptions', option: 'unsafeEagleCursorUnexcluded' }],
    fuzz: { kind: 'switch' },
    failureClass: 'f02',
    watch: ['hole', 'cursor-within-ready'],
  },
  {
    name: 'legacy-assert',
    variant: 'unequal slices throw: the engine crash',
    options: [],
    fuzz: { kind: 'policy', policy: 'legacy-assert' },
    failureClass: 'f03',
    watch: ['crash'],
  },
  {
    name: 'store-last-sampled-token',
    variant: 'runtime target: its bytes were never written',
    options: [{ on: 'PlannerOptions', option: 'unsafeStoreLastSampledToken' }],
    fuzz: { kind: 'switch' },
    shownOn: 'runtime',
    failureClass: 'f04',
    watch: ['mispairing'],
  },
  {
    name: 'load-while-storing',
    variant: "a re-admitted request's load overlaps its stores in flight",
    options: [{ on: 'LocalOffloadOptions', option: 'unsafeLoadWhileStoring' }],
    failureClass: 'f05',
  },
  {
    name: 'no-pins',
    variant: 'no pins and a pool that reuses pinned blocks',
    options: [
      { on: 'PlannerOptions', option: 'unsafeSkipPins' },
      { on: 'GpuBlockPool', option: 'unsafeIgnorePins' },
      { on: 'RuntimeOptions', option: 'unsafeSkipPins' },
    ],
    fuzz: { kind: 'flag', flag: '--no-pins', token: 'nopins' },
    failureClass: 'f06',
    watch: ['mispairing'],
  },
  {
    name: 'no-revalidate',
    variant: 'the planner skips its snapshot re-validation (a torn read)',
    options: [{ on: 'PlannerOptions', option: 'unsafeSkipRevalidate' }],
    fuzz: { kind: 'flag', flag: '--no-revalidate', token: 'r0' },
    failureClass: 'f06',
    watch: ['mispairing'],
  },
  {
    name: 'evict-in-use',
    variant: 'runtime target: the host tier evicts entries being written or read',
    options: [
      { on: 'StoreLoopOptions', option: 'unsafeEvictInUse' },
      { on: 'HostTierOptions', option: 'unsafeEvictInUse' },
      { on: 'LowerTierSwitches', option: 'unsafeEvictInUse' },
    ],
    fuzz: { kind: 'switch' },
    runtimeOnly: true,
    failureClass: 'f07',
    watch: ['mispairing'],
  },
  {
    name: 'leak-on-load-failure',
    variant: 'runtime target: a failed load keeps its tier read references',
    options: [{ on: 'StoreLoopOptions', option: 'unsafeLeakOnLoadFailure' }],
    fuzz: { kind: 'switch' },
    runtimeOnly: true,
    failureClass: 'f08',
    watch: ['leak'],
  },
  {
    name: 'skip-unpin-on-failure',
    variant: 'a failed copy keeps its source blocks pinned',
    options: [{ on: 'PlannerOptions', option: 'unsafeSkipUnpinOnFailure' }],
    failureClass: 'f08',
  },
  {
    name: 'ack-on-alloc-failure',
    variant: 'an offer the tier refused counts as stored; the cursor moves on',
    options: [
      { on: 'PlannerOptions', option: 'unsafeAckOnAllocFailure' },
      { on: 'LowerTierSwitches', option: 'unsafeAckOnAllocFailure' },
    ],
    fuzz: { kind: 'switch' },
    failureClass: 'f09',
    watch: ['hole'],
  },
  {
    name: 'drop-deferred',
    variant: 'the cursor moves over chunks deferred for lagging keys or blocks',
    options: [{ on: 'PlannerOptions', option: 'unsafeDropDeferred' }],
    fuzz: { kind: 'switch' },
    failureClass: 'f10',
    watch: ['hole'],
  },
  {
    name: 'skip-checksum',
    variant: 'a lower level serves a value without checking its CRC-32',
    options: [{ on: 'LowerTierSwitches', option: 'unsafeSkipChecksum' }],
    failureClass: 'f11',
  },
  {
    name: 'load-while-writing',
    variant: 'runtime target: entries being written count as hits',
    options: [{ on: 'StoreLoopOptions', option: 'unsafeLoadWhileWriting' }],
    fuzz: { kind: 'switch' },
    runtimeOnly: true,
    failureClass: 'f12',
    watch: ['mispairing'],
  },
  {
    name: 'publish-before-complete',
    variant: 'an entry is readable before its copy ran',
    options: [
      { on: 'HostTierOptions', option: 'unsafePublishBeforeComplete' },
      { on: 'LowerTierSwitches', option: 'unsafePublishBeforeComplete' },
    ],
    failureClass: 'f12',
  },
  {
    name: 'no-settle',
    variant:
      'no end-of-request protocol (an ended request drains before its last block IDs and keys settle)',
    options: [{ on: 'PlannerOptions', option: 'unsafeSkipSettle' }],
    fuzz: { kind: 'flag', flag: '--no-settle', token: 's0' },
    watch: ['hole'],
  },
  {
    name: 'publish-stale-jobs',
    variant:
      'a store job in flight at a reset publishes into the emptied tier (no job-id threshold)',
    options: [{ on: 'PlannerOptions', option: 'unsafePublishStaleJobs' }],
    fuzz: { kind: 'switch' },
    watch: ['reset'],
  },
  {
    name: 'key-word-only',
    variant:
      'a lower level compares only the key word, so an entry whose word collides (keys cut to unsafeKeyBits) is served',
    options: [
      { on: 'ConfigInput', option: 'unsafeKeyBits' },
      { on: 'LowerTierSwitches', option: 'unsafeKeyWordOnly' },
      { on: 'RuntimeOptions', option: 'unsafeTierSwitches' },
    ],
  },
  {
    name: 'rule-reachability',
    variant: 'the first reachable chunk of each alignment segment counts as unreachable',
    options: [{ on: 'PlannerOptions', option: 'unsafeReachabilityOneShort' }],
    fuzz: { kind: 'switch' },
    rule: 'a reachable sliding-window chunk judged unreachable, so never stored',
    watch: ['hole'],
  },
  {
    name: 'rule-lookup-long',
    variant: 'runtime target: an EAGLE group keeps the last chunk of its widened query',
    options: [
      { on: 'StoreLoopOptions', option: 'unsafeEagleTailKept' },
      { on: 'LookupUnsafe', option: 'unsafeEagleTailKept' },
    ],
    fuzz: { kind: 'switch' },
    runtimeOnly: true,
    rule: 'a lookup hit one chunk too long',
    watch: ['load-decision'],
  },
  {
    name: 'rule-last-token',
    variant: 'runtime target: with a windowed group the lookup may hit every prompt token',
    options: [
      { on: 'StoreLoopOptions', option: 'unsafeLastTokenLoaded' },
      { on: 'LookupUnsafe', option: 'unsafeLastTokenLoaded' },
    ],
    fuzz: { kind: 'switch' },
    runtimeOnly: true,
    rule: 'the last prompt token loaded although a windowed group needs it computed',
    watch: ['load-decision'],
  },
  {
    name: 'publish-on-first-ack',
    variant:
      'runtime target with ranks: a store job publishes (and unpins) on its first rank acknowledgement, not its last',
    options: [{ on: 'PlannerOptions', option: 'unsafePublishOnFirstAck' }],
    fuzz: { kind: 'switch' },
    runtimeOnly: true,
    failureClass: 'f12',
    brokenRow: 'an entry published before every tensor-parallel rank acknowledged its copy',
    watch: ['rank-ack'],
  },
] as const satisfies readonly FaultSwitch[];

type SwitchEntry = (typeof FAULT_SWITCHES)[number];
type SwitchedBy<K> = Extract<SwitchEntry, { readonly fuzz: { readonly kind: K } }>;

/** The names `kvoff fuzz --switch` takes (the replay token's `u<names>` part). */
export type RuntimeSwitch = SwitchedBy<'switch'>['name'];

export const RUNTIME_SWITCHES: readonly RuntimeSwitch[] = FAULT_SWITCHES.filter(
  (s): s is SwitchedBy<'switch'> => 'fuzz' in s && s.fuzz.kind === 'switch',
).map((s) => s.name);

/** Switches only the runtime's store loop has: the roles world refuses them rather than ignore them. */
export const RUNTIME_ONLY_SWITCHES: readonly RuntimeSwitch[] = FAULT_SWITCHES.filter(
  (s): s is Extract<SwitchedBy<'switch'>, { runtimeOnly: true }> =>
    'runtimeOnly' in s && s.runtimeOnly,
).map((s) => s.name);

/** The entry of a switch by name. */
export function faultSwitch(name: SwitchEntry['name']): FaultSwitch {
  return FAULT_SWITCHES.find((s) => s.name === name)!;
}

/** The fuzzer flag of a switch with one (`--no-pins`, `--no-revalidate`, `--no-settle`), and its replay token part. */
export function switchFlag(name: SwitchedBy<'flag'>['name']): SwitchedBy<'flag'>['fuzz'] {
  return FAULT_SWITCHES.find((s): s is SwitchedBy<'flag'> => s.name === name)!.fuzz;
}

/** The options a fuzz target sets for `switches`, as they are named on `on` (the planner's, or the store loop's, which passes the planner's on). */
export function switchOptions(
  switches: readonly RuntimeSwitch[],
  on: 'PlannerOptions' | 'StoreLoopOptions',
): Record<string, true> {
  const out: Record<string, true> = {};
  for (const name of switches) {
    const first = faultSwitch(name).options[0]!;
    // The store loop passes the planner's switches on under the same names.
    if (first.on === on || (on === 'StoreLoopOptions' && first.on === 'PlannerOptions')) {
      out[first.option] = true;
    }
  }
  return out;
}
