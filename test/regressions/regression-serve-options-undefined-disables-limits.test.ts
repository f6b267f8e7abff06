// Regression: KvoffServer spread the caller's options over its defaults, so
// an option passed as undefined (an optional setting forwarded as is) or NaN
// replaced the default with a value no size compares greater than:
// `bodyBytesMax: undefined` read a 3 MiB body to the end instead of answering
// 413, and `inFlightMax: undefined` removed the bound on requests in flight.
// A negative timeout threw node's RangeError. Each option now takes its
// default when absent or undefined and is checked otherwise
// (InvalidArgumentError naming it).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { KvoffServer } from '../../src/serve/server.js';
import type { ServeOptions } from '../../src/serve/server.js';
import { TINY_FULL } from '../helpers/configs.js';

const CONFIG = TINY_FULL;

let rt: OffloadRuntime;
beforeAll(async () => {
  rt = await OffloadRuntime.start({ config: CONFIG });
});
afterAll(async () => {
  await rt.close();
});

describe('regression: serve options given as undefined turned the limits off', () => {
  it('bodyBytesMax and inFlightMax undefined keep their defaults: a 3 MiB body is answered 413', async () => {
    const own = await OffloadRuntime.start({ config: CONFIG });
    const server = new KvoffServer(own, {
      // What a JavaScript caller forwarding optional settings passes.
      bodyBytesMax: undefined,
      inFlightMax: undefined,
    } as unknown as ServeOptions);
    const { port } = await server.listen(0, '127.0.0.1');
    try {
      const post = (body: string) =>
        fetch(`http://127.0.0.1:${port}/v1/requests`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        }).then((r) => r.status);
      const big = JSON.stringify({
        promptLength: 16,
        maxDecodeTokens: 1,
        pad: 'x'.repeat(3 << 20),
      });
      expect(await post(big)).toBe(413);
      expect(await post('{"promptLength":16,"maxDecodeTokens":1}')).toBe(200);
    } finally {
      await server.drain(); // closes the listener and its runtime
    }
  });

  it('a bad value is refused with InvalidArgumentError naming the option', () => {
    const bad: [keyof ServeOptions, unknown][] = [
      ['bodyBytesMax', Number.NaN],
      ['bodyBytesMax', 0],
      ['bodyBytesMax', '1024'],
      ['bodyDepthMax', 1],
      ['inFlightMax', -1],
      ['inFlightMax', 2.5],
      ['drainTimeoutMs', 'x'],
      ['drainTimeoutMs', -5],
      ['headersTimeoutMs', -1],
      ['requestTimeoutMs', 10n],
    ];
    for (const [name, value] of bad) {
      expect(() => new KvoffServer(rt, { [name]: value } as ServeOptions), name).toThrow(
        new RegExp(`^invalid argument: ${name}:`),
      );
      expect(() => new KvoffServer(rt, { [name]: value } as ServeOptions), name).toThrow(
        InvalidArgumentError,
      );
    }
    expect(() => new KvoffServer(rt, { headersTimeoutMs: 500, requestTimeoutMs: 400 })).toThrow(
      InvalidArgumentError,
    );
    expect(() => new KvoffServer(rt, null as never)).toThrow(InvalidArgumentError);
  });
});
