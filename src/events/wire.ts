// vLLM's KV-event schema as plain values for a msgpack encoder, and as JSON.
//
// vLLM declares its events as msgspec structs with omit_defaults=True and
// tag=True: the tag is the class name. Until 0.26 they were also
// array_like=True, so an event is an array whose first element is the tag and
// whose fields follow in declaration order; omit_defaults can then drop only
// *trailing* fields that equal their defaults (a field in the middle keeps its
// place, as nil). Since 0.26 (PR #42892) an event is a map with the tag under
// "type" and every field that differs from its default (fields without a
// default are always there, even when nil). The batch stays an array
// [ts, events, data_parallel_rank] in both.
import type { BlockRemoved, BlockStored, EventWire, KvEvent, KvEventBatch } from './types.js';

/** Fields of BlockStored in vLLM's declaration order; `required` ones have no default. */
const STORED_FIELDS = [
  ['block_hashes', true],
  ['parent_block_hash', true],
  ['token_ids', true],
  ['block_size', true],
  ['lora_id', true],
  ['medium', true],
  ['lora_name', true],
  ['extra_keys', false],
  ['group_idx', false],
  ['kv_cache_spec_kind', false],
  ['kv_cache_spec_sliding_window', false],
] as const;

const REMOVED_FIELDS = [
  ['block_hashes', true],
  ['medium', true],
  ['group_idx', false],
] as const;

type Fields = readonly (readonly [string, boolean])[];
type Value = unknown;

function storedValues(e: BlockStored): Value[] {
  return [
    e.blockHashes,
    e.parentBlockHash,
    e.tokenIds,
    e.blockSize,
    null, // lora_id: kvoff has no adapters in its keys
    e.medium,
    null, // lora_name
    null, // extra_keys
    e.groupIdx,
    e.kvCacheSpecKind,
    e.kvCacheSpecSlidingWindow,
  ];
}

function removedValues(e: BlockRemoved): Value[] {
  return [e.blockHashes, e.medium, e.groupIdx];
}

/** Every optional field defaults to None in vLLM's schema. */
function isDefault(v: Value): boolean {
  return v === null;
}

function asArray(tag: string, fields: Fields, values: Value[]): Value[] {
  let end = values.length;
  while (end > 0 && !fields[end - 1]![1] && isDefault(values[end - 1])) end -= 1;
  return [tag, ...values.slice(0, end)];
}

function asMap(tag: string, fields: Fields, values: Value[]): Record<string, Value> {
  const out: Record<string, Value> = { type: tag };
  fields.forEach(([name, required], i) => {
    if (required || !isDefault(values[i])) out[name] = values[i];
  });
  return out;
}

/** One event in vLLM's form for `wire`. */
function wireEvent(e: KvEvent, wire: EventWire): Value {
  const shape = wire === 'array' ? asArray : asMap;
  if (e.type === 'BlockStored') return shape(e.type, STORED_FIELDS, storedValues(e));
  if (e.type === 'BlockRemoved') return shape(e.type, REMOVED_FIELDS, removedValues(e));
  return shape(e.type, [], []);
}

/** The batch as vLLM's KVEventBatch: [ts, events, data_parallel_rank]. */
export function wireBatch(batch: KvEventBatch, wire: EventWire): Value[] {
  // A float field: msgspec packs a Python float as float64 even when it is
  // integral, while a JavaScript encoder packs an integral number as an int.
  // A batch formed exactly on a whole second is moved by 1 us to stay a float.
  const ts = Number.isInteger(batch.ts) ? batch.ts + 1e-6 : batch.ts;
  return [ts, batch.events.map((e) => wireEvent(e, wire)), batch.dataParallelRank];
}

/**
 * The batch as JSON for `GET /v1/events`: vLLM's map form (snake_case fields,
 * the tag under "type"), 64-bit hashes as decimal strings (a JSON number
 * holds 53 bits exactly).
 */
export function jsonBatch(batch: KvEventBatch): string {
  return JSON.stringify(
    {
      seq: batch.seq,
      ts: batch.ts,
      events: batch.events.map((e) => wireEvent(e, 'map')),
      data_parallel_rank: batch.dataParallelRank,
    },
    (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v),
  );
}
