// Regression: a replay token's watched invariants were written `.w<names>`, so
// watching `hole` gave `.whole`, which reads as "the whole schedule". They are
// now `.watch-<names>`; the old spelling still decodes (tokens printed with it
// are version-1 roles tokens, refused since `.trl2`: test/fuzz/parts.test.ts).
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { decodeReplayToken, encodeReplayToken } from '../../src/fuzz/token.js';
import type { ReplaySpec } from '../../src/fuzz/token.js';

const SPEC: ReplaySpec = {
  policy: 'legacy-zip',
  strategy: 'random',
  pins: true,
  seed: 8,
  watch: ['hole'],
  events: [0],
  decisions: [0, 0, 3, 0, 3, 2, 3, 1],
};

describe('replay token: watched invariants cannot be misread', () => {
  it('spells them .watch-<names>, never .whole', () => {
    const token = encodeReplayToken(SPEC);
    expect(token).toBe('kvf1.legacy-zip.random.pins.8.trl2.watch-hole.e0.d00303231');
    expect(token).not.toContain('.whole');
    expect(decodeReplayToken(token)).toEqual(SPEC);
  });

  it('lists several watched invariants, hyphenated names included', () => {
    const spec: ReplaySpec = { ...SPEC, watch: ['cursor-within-ready', 'double-store'] };
    const token = encodeReplayToken(spec);
    expect(token).toContain('.watch-cursor-within-ready,double-store.');
    expect(decodeReplayToken(token)).toEqual(spec);
  });

  it('still decodes the old .w<names> spelling', () => {
    expect(decodeReplayToken('kvf1.legacy-zip.random.pins.8.trl2.whole.e0.d00303231')).toEqual(
      SPEC,
    );
  });

  it('names the unknown invariant in either spelling', () => {
    expect(() => decodeReplayToken('kvf1.legacy-zip.random.pins.8.trl2.watch-holes')).toThrow(
      InvalidArgumentError,
    );
    expect(() => decodeReplayToken('kvf1.legacy-zip.random.pins.8.trl2.wat')).toThrow(
      /unknown invariant "at"/,
    );
  });
});
