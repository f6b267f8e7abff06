// The shared request state: created once from a Config, attachable from any
// thread by passing its buffers (no copies). This module only maps indices; what
// each role may write lives in `src/roles/`.
import type { Config } from './config.js';
import { GROUPS_MAX, KEY_CHECK_WORDS, OWNER_ROLES, bufferSizes, slotGeometry } from './layout.js';
import { composeIdentity } from './identity.js';
import type { OwnedRole, SharedBuffers, SlotGeometry } from './layout.js';
import { invariant } from './errors.js';

export class SharedState {
  readonly config: Config;
  readonly buffers: SharedBuffers;
  readonly geometry: SlotGeometry;
  readonly control: Int32Array;
  readonly tokens: Int32Array;
  /** Per slot DIGEST_BYTES: the root of its key chain (scheduler). */
  readonly roots: Uint8Array;
  /** Per slot maxHashesPerRequest digests of DIGEST_BYTES (hasher). */
  readonly hashes: Uint8Array;
  /** Key words (hasher); `keyBytes` is the same memory as bytes. */
  readonly keys: BigUint64Array;
  readonly keyBytes: Uint8Array;
  /** KEY_CHECK_WORDS words per key (hasher); `keyCheckBytes` the same memory as bytes. */
  readonly keyChecks: BigUint64Array;
  readonly keyCheckBytes: Uint8Array;
  readonly blocks: Int32Array;
  readonly pins: Int32Array;
  /** One bit per slot, raised by the writer roles (markDirty), taken by the store's pass. */
  readonly dirty: Int32Array;
  readonly groupCount: number;

  private constructor(config: Config, buffers: SharedBuffers) {
    invariant(config.groups.length <= GROUPS_MAX, 'group count within GROUPS_MAX');
    const sizes = bufferSizes(config);
    for (const name of Object.keys(sizes) as (keyof SharedBuffers)[]) {
      if (!(buffers[name] instanceof SharedArrayBuffer))
        invariant(false, `buffer ${name} is a SharedArrayBuffer`);
      if (buffers[name].byteLength !== sizes[name])
        invariant(false, `buffer ${name} has ${sizes[name]} bytes for this config`);
    }
    this.config = config;
    this.buffers = buffers;
    this.groupCount = config.groups.length;
    this.geometry = slotGeometry(this.groupCount, config.padHotWords);
    this.control = new Int32Array(buffers.control);
    this.tokens = new Int32Array(buffers.tokens);
    this.roots = new Uint8Array(buffers.roots);
    this.hashes = new Uint8Array(buffers.hashes);
    this.keys = new BigUint64Array(buffers.keys);
    this.keyBytes = new Uint8Array(buffers.keys);
    this.keyChecks = new BigUint64Array(buffers.keyChecks);
    this.keyCheckBytes = new Uint8Array(buffers.keyChecks);
    this.blocks = new Int32Array(buffers.blocks);
    this.pins = new Int32Array(buffers.pins);
    this.dirty = new Int32Array(buffers.dirty);
  }

  /** Lays out fresh, zeroed shared memory for `config`. */
  static create(config: Config): SharedState {
    const sizes = bufferSizes(config);
    const buffers: SharedBuffers = {
      control: new SharedArrayBuffer(sizes.control),
      tokens: new SharedArrayBuffer(sizes.tokens),
      roots: new SharedArrayBuffer(sizes.roots),
      hashes: new SharedArrayBuffer(sizes.hashes),
      keys: new SharedArrayBuffer(sizes.keys),
      keyChecks: new SharedArrayBuffer(sizes.keyChecks),
      blocks: new SharedArrayBuffer(sizes.blocks),
      pins: new SharedArrayBuffer(sizes.pins),
      dirty: new SharedArrayBuffer(sizes.dirty),
    };
    return new SharedState(config, buffers);
  }

  /** Attaches to buffers created by `create` in another thread (same config). */
  static attach(config: Config, buffers: SharedBuffers): SharedState {
    return new SharedState(config, buffers);
  }

  schedulerWord(slot: number, field: number): number {
    return slot * this.geometry.slotWords + this.geometry.schedulerLine + field;
  }
  hasherWord(slot: number, field: number): number {
    return slot * this.geometry.slotWords + this.geometry.hasherLine + field;
  }
  allocatorWord(slot: number, field: number): number {
    return slot * this.geometry.slotWords + this.geometry.allocatorLine + field;
  }
  storeWord(slot: number, field: number): number {
    return slot * this.geometry.slotWords + this.geometry.storeLine + field;
  }
  /** The owner word of a host-driven role (after the last slot; see OWNER_ROLES). */
  ownerWord(role: OwnedRole): number {
    return this.config.maxRequests * this.geometry.slotWords + OWNER_ROLES.indexOf(role);
  }
  tokenBase(slot: number): number {
    return slot * this.config.maxTokensPerRequest;
  }
  /** Index of the slot's first hash; hash i's digest is at byte (hashBase + i) * DIGEST_BYTES of `hashes`. */
  hashBase(slot: number): number {
    return slot * this.config.maxHashesPerRequest;
  }
  /** Index of the group's first key word; key c's check words start at (keyBase + c) * KEY_CHECK_WORDS. */
  keyBase(slot: number, group: number): number {
    return (slot * this.groupCount + group) * this.config.maxChunksPerRequest;
  }
  /** The offload key (256-bit identity) of chunk `chunk` of a group, from its key word and its check. */
  key(slot: number, group: number, chunk: number): bigint {
    const i = this.keyBase(slot, group) + chunk;
    const c = i * KEY_CHECK_WORDS;
    return composeIdentity(
      this.keys[i]!,
      this.keyChecks[c]!,
      this.keyChecks[c + 1]!,
      this.keyChecks[c + 2]!,
    );
  }
  blockBase(slot: number, group: number): number {
    return (slot * this.groupCount + group) * this.config.maxBlocksPerRequest;
  }
}
