// Regression: the exported fuzz() took its budget unchecked. `seconds: NaN`
// compared false with every elapsed time, so the loop ran on to
// FUZZ_SCHEDULES_MAX (10^12) schedules: a call that never returned. A
// negative budget or a fractional schedule count was taken as given, and a
// bad policy or strategy name failed only inside the first schedule. Each is
// now refused before anything runs, with a typed error naming the option.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, UnknownPolicyError } from '../../src/errors.js';
import { fuzz } from '../../src/fuzz/run.js';
import type { FuzzOptions } from '../../src/fuzz/run.js';
import { settlesBeforeATurn } from '../helpers/settles-first.js';

const GOOD: FuzzOptions = { policy: 'ready-prefix', strategy: 'random', pins: true, seed: 1 };

describe('regression: fuzz() with a NaN budget ran forever', () => {
  it('bad budgets and names are refused at once, with the option named', async () => {
    const bad: [string, unknown, new (...a: never[]) => Error][] = [
      ['seconds', { ...GOOD, seconds: Number.NaN }, InvalidArgumentError],
      ['seconds', { ...GOOD, seconds: -1 }, InvalidArgumentError],
      ['seconds', { ...GOOD, seconds: Number.POSITIVE_INFINITY }, InvalidArgumentError],
      ['seconds', { ...GOOD, seconds: '5' }, InvalidArgumentError],
      ['schedules', { ...GOOD, schedules: 2.5 }, InvalidArgumentError],
      ['schedules', { ...GOOD, schedules: -3 }, InvalidArgumentError],
      ['schedules', { ...GOOD, schedules: 10n }, InvalidArgumentError],
      ['seed', { ...GOOD, seed: Number.NaN }, InvalidArgumentError],
      ['seed', { ...GOOD, seed: -1 }, InvalidArgumentError],
      ['pins', { ...GOOD, pins: 'yes' }, InvalidArgumentError],
      ['policy', { ...GOOD, policy: 'legacy-nothing' }, UnknownPolicyError],
      ['strategy', { ...GOOD, strategy: 'chaos' }, UnknownPolicyError],
      ['options', null, InvalidArgumentError],
    ];
    for (const [name, options, type] of bad) {
      // At once: within the call's own turn of the event loop, before any schedule ran.
      const first = await settlesBeforeATurn(fuzz(options as FuzzOptions));
      expect(first.state, name).toBe('rejected');
      expect(first.state === 'rejected' ? first.error : undefined, name).toBeInstanceOf(type);
    }
  });

  it('a good budget still runs exactly that many schedules', async () => {
    const report = await fuzz({ ...GOOD, schedules: 3 });
    expect(report.schedules).toBe(3);
    expect(report.violations).toBe(0);
    const none = await fuzz({ ...GOOD, seconds: 0, schedules: 2 });
    expect(none.schedules).toBeGreaterThan(0);
  });
});
