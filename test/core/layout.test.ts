// The shared layout: one table declares every word (its line, index and single
// writer); geometry puts each role on its own cache line when padded; buffers
// are sized from the config and attachable without copies.
import { AssertionError } from 'node:assert';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import * as L from '../../src/layout.js';
import type { Role, SharedBuffers } from '../../src/layout.js';
import { loadHashing } from '../../src/hashing.js';
import { AllocatorRole } from '../../src/roles/allocator.js';
import { HasherRole } from '../../src/roles/hasher.js';
import { SchedulerRole } from '../../src/roles/scheduler.js';
import { RequestSnapshot, StoreRole } from '../../src/roles/store.js';
import { SharedState } from '../../src/state.js';
import { tokens } from '../helpers/local.js';

const LINE_ROLES: readonly Role[] = ['scheduler', 'hasher', 'allocator', 'store'];

/** Words a field occupies in its line for `groups` groups. */
function width(f: L.FieldSpec, groups: number): number {
  return f.perGroup ? groups : 1;
}

const INPUT: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 4 },
    { kind: 'sliding-window', tokensPerBlock: 8, windowTokens: 16 },
    { kind: 'mamba', tokensPerBlock: 8 },
  ],
  tokensPerHash: 4,
  blocksPerChunk: 2,
  maxRequests: 5,
  maxBlocksPerRequest: 12,
  gpuBlocks: 100,
  tierChunks: 20,
  bytesPerBlock: 64,
};

describe('FIELDS table', () => {
  it('every (writer line, word) is declared once, even with the most groups', () => {
    for (const role of LINE_ROLES) {
      const used = new Map<number, string>();
      for (const f of L.FIELDS.filter((x) => x.writer === role)) {
        for (let i = f.index; i < f.index + width(f, L.GROUPS_MAX); i += 1) {
          expect(used.get(i), `${role} word ${i}: ${f.name} overlaps ${used.get(i)}`).toBe(
            undefined,
          );
          used.set(i, f.name);
        }
      }
      // A padded line holds the role's words for GROUPS_MAX groups.
      expect(Math.max(...used.keys())).toBeLessThan(L.LINE_WORDS);
      // No gaps: the unpadded packing relies on dense indices.
      expect([...used.keys()].sort((a, b) => a - b)).toEqual([...Array(used.size).keys()]);
    }
  });

  it('names are unique and every writer is a role that owns a line', () => {
    const names = L.FIELDS.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    for (const f of L.FIELDS) {
      expect(LINE_ROLES).toContain(f.writer);
      expect(f.doc.length).toBeGreaterThan(0);
    }
    // Every line role has at least its generation word at index 0.
    for (const role of LINE_ROLES) {
      const first = L.FIELDS.find((f) => f.writer === role && f.index === 0);
      expect(first?.name.toLowerCase()).toContain('generation');
    }
  });

  it('indices agree with the exported constants', () => {
    const expected: Record<string, [Role, number, boolean]> = {
      generation: ['scheduler', L.S_GENERATION, false],
      status: ['scheduler', L.S_STATUS, false],
      requestId: ['scheduler', L.S_REQUEST_ID, false],
      promptTokens: ['scheduler', L.S_PROMPT_TOKENS, false],
      numTokens: ['scheduler', L.S_NUM_TOKENS, false],
      computedTokens: ['scheduler', L.S_COMPUTED_TOKENS, false],
      scheduledTokens: ['scheduler', L.S_SCHEDULED_TOKENS, false],
      maxOffloadTokens: ['scheduler', L.S_MAX_OFFLOAD_TOKENS, false],
      hitChunks: ['scheduler', L.S_HIT_CHUNKS, true],
      hasherGeneration: ['hasher', L.H_GENERATION, false],
      hashCount: ['hasher', L.H_HASH_COUNT, false],
      keyCount: ['hasher', L.H_KEY_COUNT, true],
      allocatorGeneration: ['allocator', L.A_GENERATION, false],
      blockSeq: ['allocator', L.A_SEQ, false],
      settledGeneration: ['allocator', L.A_SETTLED_GENERATION, false],
      blockCount: ['allocator', L.A_BLOCK_COUNT, true],
      storeGeneration: ['store', L.T_GENERATION, false],
      drainedGeneration: ['store', L.T_DRAINED_GENERATION, false],
      storeEpoch: ['store', L.T_EPOCH, false],
      cursor: ['store', L.T_CURSOR, true],
    };
    expect(L.FIELDS.map((f) => f.name).sort()).toEqual(Object.keys(expected).sort());
    for (const f of L.FIELDS) {
      expect([f.writer, f.index, f.perGroup], f.name).toEqual(expected[f.name]);
    }
  });

  it('every array is published by a declared count of the same writer', () => {
    for (const a of L.ARRAYS) {
      if (a.publishedBy === '-') continue;
      const count = L.FIELDS.find((f) => f.name === a.publishedBy);
      expect(count, a.name).toBeDefined();
      expect(count!.writer).toBe(a.writer);
    }
  });

  it('status names match status codes', () => {
    for (const [name, code] of Object.entries(L.Status)) expect(L.STATUS_NAMES[code]).toBe(name);
  });
});

describe('slot geometry', () => {
  it('padded: each role line starts its own 64-byte line and a slot is whole lines', () => {
    for (let groups = 1; groups <= L.GROUPS_MAX; groups += 1) {
      const g = L.slotGeometry(groups, true);
      const starts = [g.schedulerLine, g.hasherLine, g.allocatorLine, g.storeLine];
      expect(new Set(starts.map((w) => Math.floor((w * 4) / 64))).size).toBe(4);
      for (const w of starts) expect((w * 4) % 64).toBe(0);
      expect((g.slotWords * 4) % 64).toBe(0);
      expect(g.slotWords).toBe(4 * L.LINE_WORDS);
      // Every field of a role lies inside that role's 64-byte line.
      for (const f of L.FIELDS) {
        const line = lineOf(g, f.writer);
        const last = line + f.index + width(f, groups) - 1;
        expect(Math.floor((last * 4) / 64), f.name).toBe(Math.floor((line * 4) / 64));
      }
    }
  });

  it('unpadded: the four lines are packed back to back with no gaps', () => {
    for (let groups = 1; groups <= L.GROUPS_MAX; groups += 1) {
      const g = L.slotGeometry(groups, false);
      const size = (role: Role) =>
        Math.max(
          ...L.FIELDS.filter((f) => f.writer === role).map((f) => f.index + width(f, groups)),
        );
      expect(g.schedulerLine).toBe(0);
      expect(g.hasherLine).toBe(size('scheduler'));
      expect(g.allocatorLine).toBe(g.hasherLine + size('hasher'));
      expect(g.storeLine).toBe(g.allocatorLine + size('allocator'));
      expect(g.slotWords).toBe(g.storeLine + size('store'));
      expect(g.slotWords).toBeLessThan(4 * L.LINE_WORDS);
    }
    // Two groups: 10 + 4 + 5 + 5 words.
    expect(L.slotGeometry(2, false).slotWords).toBe(24);
  });
});

function lineOf(g: L.SlotGeometry, role: Role): number {
  if (role === 'scheduler') return g.schedulerLine;
  if (role === 'hasher') return g.hasherLine;
  if (role === 'allocator') return g.allocatorLine;
  return g.storeLine;
}

describe('shared buffers', () => {
  it('are sized from the config', () => {
    for (const padHotWords of [true, false]) {
      const config = resolveConfig({ ...INPUT, padHotWords });
      const sizes = L.bufferSizes(config);
      const geom = L.slotGeometry(3, padHotWords);
      // maxChunks = 6, maxTokens = 12 * 8 = 96, maxHashes = 96 / 4 = 24
      expect(config.maxChunksPerRequest).toBe(6);
      expect(config.maxTokensPerRequest).toBe(96);
      expect(config.maxHashesPerRequest).toBe(24);
      expect(sizes).toEqual({
        control: (5 * geom.slotWords + L.LINE_WORDS) * 4,
        tokens: 5 * 96 * 4,
        roots: 5 * 32, // a 32-byte root per slot
        hashes: 5 * 24 * 32, // a 32-byte digest per hash
        keys: 5 * 3 * 6 * 8,
        keyChecks: 5 * 3 * 6 * 24, // three 64-bit words beside each key word
        blocks: 5 * 3 * 12 * 4,
        pins: 100 * 4,
        dirty: 1 * 4, // 5 slots: one word of the dirty bitmap
      });
      const state = SharedState.create(config);
      for (const [name, bytes] of Object.entries(sizes)) {
        const buf = state.buffers[name as keyof SharedBuffers];
        expect(buf).toBeInstanceOf(SharedArrayBuffer);
        expect(buf.byteLength, name).toBe(bytes);
      }
    }
  });

  it('word indices of different slots and groups never overlap', () => {
    const state = SharedState.create(resolveConfig({ ...INPUT, padHotWords: false }));
    const words = new Set<number>();
    let expected = 0;
    for (let slot = 0; slot < state.config.maxRequests; slot += 1) {
      for (const f of L.FIELDS) {
        for (let i = 0; i < width(f, state.groupCount); i += 1) {
          const at =
            f.writer === 'scheduler'
              ? state.schedulerWord(slot, f.index + i)
              : f.writer === 'hasher'
                ? state.hasherWord(slot, f.index + i)
                : f.writer === 'allocator'
                  ? state.allocatorWord(slot, f.index + i)
                  : state.storeWord(slot, f.index + i);
          words.add(at);
          expected += 1;
          expect(at).toBeLessThan(state.control.length);
        }
      }
    }
    // One line after the last slot holds the role owner words.
    for (const role of L.OWNER_ROLES) {
      words.add(state.ownerWord(role));
      expected += 1;
    }
    expect(words.size).toBe(expected);
    // Packed: every slot word is declared; the owner line is the only padding.
    expect(state.control.length).toBe(words.size + L.LINE_WORDS - L.OWNER_ROLES.length);
    // Arrays: each (slot, group) range is disjoint and inside its buffer.
    const { maxChunksPerRequest: mc, maxBlocksPerRequest: mb } = state.config;
    expect(state.keyBase(4, 2) + mc).toBe(state.keys.length);
    expect(state.blockBase(4, 2) + mb).toBe(state.blocks.length);
    expect(state.keyBase(1, 0)).toBe(state.keyBase(0, 2) + mc);
    expect(state.tokenBase(4) + state.config.maxTokensPerRequest).toBe(state.tokens.length);
    expect((state.hashBase(4) + state.config.maxHashesPerRequest) * 32).toBe(state.hashes.length);
    expect(state.keyChecks.length).toBe(state.keys.length * L.KEY_CHECK_WORDS);
    expect(state.roots.length).toBe(state.config.maxRequests * 32);
  });

  it('attach on the same buffers sees the same data, both ways, without copies', async () => {
    const config = resolveConfig(INPUT);
    const a = SharedState.create(config);
    const b = SharedState.attach(config, a.buffers);
    expect(b.buffers.control).toBe(a.buffers.control);

    const sched = new SchedulerRole(a);
    const h = sched.open({ requestId: 77, promptTokens: tokens(24), hitChunks: [1, 0, 0] });
    sched.progress(h, 8, 8);
    new HasherRole(a, await loadHashing()).hash(h);
    new AllocatorRole(b).appendBlocks(h, 0, [5, 6, 7]); // written through the attached view

    const snap = new RequestSnapshot(3);
    expect(new StoreRole(b).snapshot(h.slot, snap)).toBe('ok');
    expect(snap.requestId).toBe(77);
    expect(snap.promptTokens).toBe(24);
    expect([snap.computedTokens, snap.scheduledTokens]).toEqual([8, 8]);
    expect([...snap.keyCount]).toEqual([3, 1, 1]); // 6 hashes: chunks of 8 and 16 tokens
    expect([...snap.blockCount]).toEqual([3, 0, 0]);
    expect([...snap.cursor]).toEqual([1, 0, 0]);
    expect(Array.from(b.tokens.subarray(b.tokenBase(h.slot), b.tokenBase(h.slot) + 24))).toEqual(
      tokens(24),
    );
    expect(b.keys[b.keyBase(h.slot, 0)]).toBe(a.keys[a.keyBase(h.slot, 0)]);
    expect(new AllocatorRole(a).blockIds(h, 0)).toEqual([5, 6, 7]);
    // A scheduler on the attached view sees the occupied slot and does not reuse it.
    expect(new SchedulerRole(b).freeSlotCount).toBe(config.maxRequests - 1);
  });

  it('attach with buffers of the wrong size or kind fails an invariant', () => {
    const config = resolveConfig(INPUT);
    const good = SharedState.create(config).buffers;
    for (const name of Object.keys(good) as (keyof SharedBuffers)[]) {
      const bad = { ...good, [name]: new SharedArrayBuffer(good[name].byteLength + 8) };
      expect(() => SharedState.attach(config, bad), name).toThrow(AssertionError);
      expect(() => SharedState.attach(config, bad)).toThrow(new RegExp(`buffer ${name}`));
    }
    // The buffers of another config (other group count) do not fit either.
    const other = resolveConfig({ ...INPUT, groups: INPUT.groups.slice(0, 2) });
    expect(() => SharedState.attach(other, good)).toThrow(AssertionError);
    // Padding changes the control size.
    expect(() => SharedState.attach(resolveConfig({ ...INPUT, padHotWords: false }), good)).toThrow(
      AssertionError,
    );
    // A plain ArrayBuffer is not shared memory.
    const plain = {
      ...good,
      pins: new ArrayBuffer(good.pins.byteLength) as unknown as SharedArrayBuffer,
    };
    expect(() => SharedState.attach(config, plain)).toThrow(AssertionError);
  });
});
