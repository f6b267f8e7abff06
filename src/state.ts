// The shared request state: created once from a Config, attachable from any
// thread by passing its buffers (no copies). This module only maps indices; what
// each role may write lives in `src/roles/`.
import type { Config } from './config.js';
import { GROUPS_MAX, OWNER_ROLES, bufferSizes, slotGeometry } from './layout.js';
import type { OwnedRole, SharedBuffers, SlotGeometry } from './layout.js';
import { invariant } from './errors.js';

export class SharedState {
  readonly config: Config;
  readonly buffers: SharedBuffers;
  readonly geometry: SlotGeometry;
  readonly control: Int32Array;
  readonly tokens: Int32Array;
  readonly hashes: BigUint64Array;
  readonly keys: BigUint64Array;
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
    this.hashes = new BigUint64Array(buffers.hashes);
    this.keys = new BigUint64Array(buffers.keys);
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
      hashes: new SharedArrayBuffer(sizes.hashes),
      keys: new SharedArrayBuffer(sizes.keys),
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
  hashBase(slot: number): number {
    return slot * this.config.maxHashesPerRequest;
  }
  keyBase(slot: number, group: number): number {
    return (slot * this.groupCount + group) * this.config.maxChunksPerRequest;
  }
  blockBase(slot: number, group: number): number {
    return (slot * this.groupCount + group) * this.config.maxBlocksPerRequest;
  }
}
