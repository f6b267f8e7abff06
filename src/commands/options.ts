// Parsing of numeric and named command-line values. Commander hands us
// strings; each value is checked here with the option's name and the rule it
// breaks, and a bad one throws InvalidArgumentError (exit 2, one line). A
// value is echoed back bounded (quoted()): a 900 KB argument is not printed.
import { InvalidArgumentError, KvoffError, clipped, quoted } from '../errors.js';
import { parseStorePolicy } from '../ready.js';
import type { StorePolicy } from '../ready.js';

/** --transfer-threads on every command: the runtime's own limit (more threads than cores only queue). */
export const TRANSFER_THREADS_MAX = 64;

/**
 * An integer option in [min, max]; `undefined` stays undefined (the default
 * applies). Plain decimal digits only, with an optional sign: no `1e5`, no
 * hex, no units and no digit separators (`,100` and `_100` once ran 100
 * requests).
 */
export function intOption(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
): number | undefined {
  if (raw === undefined) return undefined;
  const text = raw.trim();
  if (!/^[-+]?\d+$/.test(text)) {
    throw new InvalidArgumentError(name, `${quoted(raw)} is not an integer`);
  }
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(
      name,
      `must be an integer in [${min}, ${max}], got ${clipped(text)}`,
    );
  }
  return value;
}

/** Like intOption, with a default. */
export function intOptionOr(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
  fallback: number,
): number {
  return intOption(name, raw, min, max) ?? fallback;
}

/** A decimal option in [min, max] (e.g. a probability); `undefined` stays undefined. */
export function numberOption(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
): number | undefined {
  if (raw === undefined) return undefined;
  const text = raw.trim();
  // Signs are part of the number: -0.1 is out of range, not "not a number".
  if (!/^[-+]?(\d+(\.\d+)?|\.\d+)$/.test(text)) {
    throw new InvalidArgumentError(name, `${quoted(raw)} is not a number`);
  }
  const value = Number(text);
  if (value < min || value > max) {
    throw new InvalidArgumentError(
      name,
      `must be a number in [${min}, ${max}], got ${clipped(text)}`,
    );
  }
  return value;
}

/**
 * A named value (a policy, a strategy, an invariant): `parse` throws a
 * KvoffError listing the known names; the option's name is put in front, as
 * every other usage error has it.
 */
export function namedOption<T>(name: string, raw: string, parse: (text: string) => T): T {
  try {
    return parse(raw);
  } catch (err) {
    if (err instanceof KvoffError && err.code !== 'KVOFF_INVALID_ARGUMENT') {
      throw new InvalidArgumentError(name, err.message);
    }
    throw err;
  }
}

/** --policy on every command. */
export function policyOption(raw: string | undefined): StorePolicy {
  return namedOption('--policy', raw ?? 'ready-prefix', parseStorePolicy);
}
