// Regression: the hasher role reads the caller's handle into one object it
// reuses (no allocation per call). Written field by field as each was read, a
// handle whose `generation` getter calls hash() for another request left that
// object holding the outer handle's slot overwritten by the inner one's: the
// outer call then hashed the other request and never the one it was given.
// Both fields are now read before either is written.
import { expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import { H_HASH_COUNT } from '../../src/layout.js';
import { LocalOffload } from '../../src/local.js';
import { HasherRole } from '../../src/roles/hasher.js';
import type { RequestHandle } from '../../src/roles/handle.js';

it('a handle whose getter hashes another request still hashes its own', async () => {
  const lo = await LocalOffload.create({
    groups: [{ kind: 'full', tokensPerBlock: 4 }],
    tokensPerHash: 4,
    maxRequests: 2,
    maxBlocksPerRequest: 4,
    gpuBlocks: 16,
    tierChunks: 16,
    bytesPerBlock: 8,
  });
  const a = lo.open({ requestId: 1, promptTokens: [1, 2, 3, 4, 5, 6, 7, 8] });
  const b = lo.open({ requestId: 2, promptTokens: [9, 10, 11, 12] });
  const hasher = new HasherRole(lo.state, await loadHashing());
  let inner = 0;
  const tricky: RequestHandle = {
    slot: a.slot,
    get generation() {
      inner += hasher.hash(b);
      return a.generation;
    },
  };
  const hashCount = (h: RequestHandle) =>
    Atomics.load(lo.state.control, lo.state.hasherWord(h.slot, H_HASH_COUNT));

  expect(hasher.hash(tricky)).toBe(2);
  expect(inner).toBe(1);
  expect(hashCount(a)).toBe(2);
  expect(hashCount(b)).toBe(1);
});
