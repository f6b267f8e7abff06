// Parsing of numeric and named command-line values. Commander hands us
// strings; each value is checked here with the option's name and the rule it
// breaks, and a bad one throws InvalidArgumentError (exit 2, one line).
import { InvalidArgumentError } from '../errors.js';

/** --transfer-threads on every command: the runtime's own limit (more threads than cores only queue). */
export const TRANSFER_THREADS_MAX = 64;

/** An integer option in [min, max]; `undefined` stays undefined (the default applies). */
export function intOption(
  name: string,
  raw: string | undefined,
  min: number,
  max: number,
): number | undefined {
  if (raw === undefined) return undefined;
  // Accept 611840 and 611_840 / 611,840; nothing else (no 1e5, no hex, no units).
  const text = raw.trim().replace(/[_,](?=\d{3}(\D|$))/g, '');
  if (!/^-?\d+$/.test(text)) throw new InvalidArgumentError(name, `"${raw}" is not an integer`);
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(name, `must be an integer in [${min}, ${max}], got ${raw}`);
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
    throw new InvalidArgumentError(name, `"${raw}" is not a number`);
  }
  const value = Number(text);
  if (value < min || value > max) {
    throw new InvalidArgumentError(name, `must be a number in [${min}, ${max}], got ${raw}`);
  }
  return value;
}
