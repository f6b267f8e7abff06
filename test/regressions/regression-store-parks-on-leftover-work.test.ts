// Regression: a store worker that parked after every step that did work slept
// (up to the 20 ms bound) on work no doorbell announces, and on a loaded
// machine lost tier hits to preemptions. StoreLoop.hasWorkLeft() is what the
// worker now asks before parking; these are the leftovers it must report.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { markDirty } from '../../src/layout.js';
import { InlineTransferBackend } from '../../src/runtime/backend.js';
import { RuntimeViews, createRuntimeBuffers } from '../../src/runtime/buffers.js';
import { StoreLoop } from '../../src/runtime/store-loop.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

function storeLoop(): { views: RuntimeViews; loop: StoreLoop } {
  const config = resolveConfig(SMALL_HYBRID);
  const views = new RuntimeViews(config, createRuntimeBuffers(config));
  const loop = new StoreLoop(views, new InlineTransferBackend(views.transferArenas()), {
    jobs: () => {},
    drained: () => {},
  });
  return { views, loop };
}

describe('regression: the store parked on work no doorbell announces', () => {
  it('reports a slot marked for another visit (a dirty bit the pass raised itself) until a pass takes it', () => {
    const { views, loop } = storeLoop();
    loop.step(); // the first pass visits every slot
    expect(loop.hasWorkLeft()).toBe(false);
    // What the planner's revisit() does: a bit, and no ring.
    markDirty(views.state.dirty, 7);
    expect(loop.hasWorkLeft()).toBe(true);
    loop.step();
    expect(loop.hasWorkLeft()).toBe(false);
  });

  it('reports records left in the request ring past the per-step bound', () => {
    const { views, loop } = storeLoop();
    loop.step();
    const ring = views.ring('storeRequest');
    // Any record: hasWorkLeft() only asks whether the ring is empty.
    expect(ring.push([0x7fff, 1])).toBe(true);
    expect(loop.hasWorkLeft()).toBe(true);
  });
});
