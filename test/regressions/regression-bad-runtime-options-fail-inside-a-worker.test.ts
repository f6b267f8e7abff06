// Regression: OffloadRuntime.start() checked most options before starting its
// workers but not all. `lag.seed` as a BigInt or NaN started every worker and
// then failed one of them (WorkerFailedError: "allocator worker failed:
// Cannot mix BigInt and other types"); `external: 'no'` (any truthy value)
// silently started external mode, without the built-in engine; `null` options
// threw a TypeError. Each is now an InvalidArgumentError naming the option,
// thrown before any worker starts.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { RuntimeOptions } from '../../src/runtime/runtime.js';
import { TINY_FULL } from '../helpers/configs.js';
import { settlesBeforeATurn } from '../helpers/settles-first.js';

const CONFIG = TINY_FULL;

const BAD: [string, unknown][] = [
  ['options', null],
  ['options', 5],
  ['options', []],
  ['lag.seed', { config: CONFIG, lag: { seed: 1n } }],
  ['lag.seed', { config: CONFIG, lag: { seed: Number.NaN } }],
  ['lag.seed', { config: CONFIG, lag: { seed: 1.5 } }],
  ['lag.seed', { config: CONFIG, lag: { seed: 2 ** 31 } }],
  ['lag', { config: CONFIG, lag: 7 }],
  ['simulator', { config: CONFIG, simulator: 'fast' }],
  ['external', { config: CONFIG, external: 'no' }],
  ['external', { config: CONFIG, external: 1 }],
  ['unsafeSkipPins', { config: CONFIG, unsafeSkipPins: 'false' }],
];

describe('regression: bad runtime options failed inside a worker (or not at all)', () => {
  it('each is refused by start() with InvalidArgumentError naming the option', async () => {
    for (const [name, options] of BAD) {
      const start = OffloadRuntime.start(options as RuntimeOptions);
      // A runtime that started anyway is closed, whatever the assertions say.
      start.then(
        (rt) => rt.close(),
        () => undefined,
      );
      // Refused before a worker was spawned, not after one failed: spawning
      // and hearing from a worker takes turns of the event loop, and this
      // rejection comes within the call's own.
      const first = await settlesBeforeATurn(start);
      expect(first.state, name).toBe('rejected');
      const err = first.state === 'rejected' ? first.error : undefined;
      expect(err, name).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message, name).toContain(`${name}:`);
    }
  });

  it('the same options with good values start and run a request', async () => {
    const rt = await OffloadRuntime.start({
      config: CONFIG,
      lag: { seed: -7 },
      external: false,
      unsafeSkipPins: false,
      simulator: {},
    });
    try {
      expect(rt.external).toBeUndefined();
      const s = await rt.submit({ promptLength: 64, maxDecodeTokens: 2 });
      expect(s.status).toBe('finished');
    } finally {
      await rt.close();
    }
  });
});
