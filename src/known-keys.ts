// Option objects of the JS API refuse keys they do not know, as the HTTP API
// refuses unknown fields: `start({ transferThread: 2 })` (a typo) used to start
// with the default silently. Each door lists its keys as a record typed
// `Record<keyof Options, true>`, so adding an option without listing it fails
// the type check instead of being refused at run time.
import { InvalidArgumentError, quoted } from './errors.js';

/** The keys an options object may have. */
export type KnownKeys<T> = Readonly<Record<keyof T, true>>;

/**
 * Throws (InvalidArgumentError by default) naming the first own key of
 * `value` not in `known`, prefixed by `where` (`simulator.`, `tiers.disk.`),
 * and the keys it does take. `value` must already be a plain object.
 */
export function refuseUnknownKeys(
  value: object,
  known: Readonly<Record<string, true>>,
  where: string,
  fail: (what: string, rule: string) => Error = (what, rule) =>
    new InvalidArgumentError(what, rule),
): void {
  for (const key of Object.keys(value)) {
    if (Object.prototype.hasOwnProperty.call(known, key)) continue;
    const names = Object.keys(known);
    const near = key.length <= 64 ? names.find((k) => editDistance(k, key) <= 2) : undefined;
    throw fail(
      `${where}${quoted(key)}`,
      `is not a known option${near !== undefined ? ` (did you mean ${near}?)` : ''}; known: ${names.join(', ')}`,
    );
  }
}

/** Levenshtein distance, for the "did you mean" of a short typo. */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const row = [i];
    for (let j = 1; j <= b.length; j += 1) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + cost));
    }
    prev = row;
  }
  return prev[b.length]!;
}
