// The fuzzer's fault switches: each re-creates a known bug in the runtime's
// store loop or the planner, so a test can show the fuzzer finds it.
/**
 * Test-only switches that re-create known bugs (the safe code has none on).
 * The ones in RUNTIME_ONLY_SWITCHES live in the runtime's store loop; the
 * others are the planner's, so the roles world (src/fuzz/world.ts) takes them
 * as well.
 */
export const RUNTIME_SWITCHES = [
  'load-while-writing',
  'eagle-cursor-unexcluded',
  'store-last-sampled-token',
  'evict-in-use',
  'leak-on-load-failure',
  'ack-on-alloc-failure',
  'drop-deferred',
  'rule-reachability',
  'rule-lookup-long',
  'rule-last-token',
  'publish-stale-jobs',
] as const;
export type RuntimeSwitch = (typeof RUNTIME_SWITCHES)[number];

/** Switches only the runtime's store loop has: the roles world refuses them rather than ignore them. */
export const RUNTIME_ONLY_SWITCHES: readonly RuntimeSwitch[] = [
  'load-while-writing',
  'evict-in-use',
  'leak-on-load-failure',
  'rule-lookup-long',
  'rule-last-token',
];
