// Regression: attachExternal(config, buffers) made views over whatever it was
// given. A GPU arena of the wrong size, or an ArrayBuffer (a private copy in
// the attaching thread) instead of a SharedArrayBuffer, was accepted: the
// host's writeBlock() writes vanished (a typed array drops out-of-range
// writes) or never reached the store, which then copied bytes that were never
// written. A short doorbell buffer threw a RangeError only at the first
// wake(), and a raw config input was refused with an assertion error. Every
// buffer is now checked against the config first: a typed
// InvalidArgumentError naming the buffer, and nothing is attached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { attachExternal } from '../../src/runtime/external.js';
import type { RuntimeBuffers } from '../../src/runtime/buffers.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { ExternalRuntime } from '../../src/runtime/runtime.js';
import { TINY_FULL } from '../helpers/configs.js';

const CONFIG = TINY_FULL;

let rt: ExternalRuntime;
beforeAll(async () => {
  rt = await OffloadRuntime.start({ config: CONFIG, external: true });
});
afterAll(async () => {
  await rt.close();
});

/** The runtime's buffers with one replaced. */
function variants(b: RuntimeBuffers): [string, unknown][] {
  const sab = (n: number) => new SharedArrayBuffer(n);
  return [
    ['gpuArena', { ...b, gpuArena: sab(16) }],
    ['gpuArena', { ...b, gpuArena: new ArrayBuffer(b.gpuArena.byteLength) }],
    ['tierArena', { ...b, tierArena: sab(b.tierArena.byteLength + 8) }],
    ['doorbells', { ...b, doorbells: sab(4) }],
    ['control', { ...b, control: sab(4) }],
    ['stats', { ...b, stats: undefined }],
    ['tierStats', { ...b, tierStats: sab(8) }],
    ['state.pins', { ...b, state: { ...b.state, pins: sab(b.state.pins.byteLength * 2) } }],
    ['state.control', { ...b, state: { ...b.state, control: new ArrayBuffer(64) } }],
    ['rings.submit', { ...b, rings: { ...b.rings, submit: sab(100) } }],
    ['rings.storeAnswer', { ...b, rings: { ...b.rings, storeAnswer: undefined } }],
    ['rings', { ...b, rings: null }],
    ['state', { ...b, state: 5 }],
    ['buffers', null],
  ];
}

describe('regression: attachExternal accepted buffers of the wrong size or kind', () => {
  it('each wrong buffer is refused with InvalidArgumentError naming it', () => {
    for (const [name, buffers] of variants(rt.buffers)) {
      let caught: unknown;
      try {
        attachExternal(rt.config, buffers as RuntimeBuffers);
      } catch (err) {
        caught = err;
      }
      expect(caught, name).toBeInstanceOf(InvalidArgumentError);
      expect((caught as Error).message, name).toContain(
        name === 'buffers' ? 'buffers' : `buffers.${name}`,
      );
    }
  });

  it("a config that is not the runtime's resolved one is refused the same way", () => {
    expect(() => attachExternal(CONFIG as never, rt.buffers)).toThrow(InvalidArgumentError);
    expect(() => attachExternal(null as never, rt.buffers)).toThrow(InvalidArgumentError);
    // Same shape, other sizes: the buffers do not fit it.
    expect(() => attachExternal({ ...rt.config, gpuBlocks: 512 }, rt.buffers)).toThrow(
      /buffers\.state\.pins/,
    );
  });

  it("the runtime's own buffers attach, and a block written through them is what the arena holds", () => {
    const roles = attachExternal(rt.config, rt.buffers);
    const words = rt.config.bytesPerBlock / 4;
    roles.writeBlock(7, 0x1234n, 0);
    const arena = new Uint32Array(rt.buffers.gpuArena);
    expect(Array.from(arena.subarray(7 * words, 8 * words))).toEqual(
      Array.from(roles.gpu.subarray(7 * words, 8 * words)),
    );
    expect(arena.subarray(7 * words, 8 * words).some((w) => w !== 0)).toBe(true);
  });
});
