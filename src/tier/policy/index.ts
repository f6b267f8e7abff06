// The host tier's cache policies by name, and the options that pick one.
import { InvalidArgumentError, UnknownPolicyError, quoted } from '../../errors.js';
import { ArcPolicy } from './arc.js';
import { LruPolicy } from './lru.js';
import { S3FifoPolicy } from './s3-fifo.js';
import { CACHE_POLICIES } from './types.js';
import type { CachePolicy, CachePolicyName } from './types.js';
import { STORE_THRESHOLD_MAX } from './admission.js';

export { CACHE_POLICIES, WRITING } from './types.js';
export type { CachePolicy, CachePolicyName, PolicyEntry } from './types.js';
export { AdmissionCounter, STORE_THRESHOLD_MAX } from './admission.js';
export { ArcPolicy } from './arc.js';
export { LruPolicy } from './lru.js';
export { S3FifoPolicy } from './s3-fifo.js';

/** What picks the host tier's policy (RuntimeOptions.cache, the cache replay). */
export interface CacheOptions {
  /** Eviction order; default 'lru'. */
  policy?: CachePolicyName;
  /** Store a chunk only once it was looked up this many times (vLLM's store_threshold); default 1: always. */
  storeThreshold?: number;
}

export function parseCachePolicy(name: string): CachePolicyName {
  if ((CACHE_POLICIES as readonly string[]).includes(name)) return name as CachePolicyName;
  throw new UnknownPolicyError('cache policy', name, CACHE_POLICIES);
}

/** A fresh policy for a tier of `capacityChunks` entries. */
export function createCachePolicy(name: CachePolicyName, capacityChunks: number): CachePolicy {
  switch (name) {
    case 'lru':
      return new LruPolicy();
    case 'arc':
      return new ArcPolicy(capacityChunks);
    case 's3-fifo':
      return new S3FifoPolicy(capacityChunks);
  }
}

export function validateCacheOptions(o: unknown, field = 'cache'): void {
  if (o === undefined) return;
  if (typeof o !== 'object' || o === null || Array.isArray(o)) {
    throw new InvalidArgumentError(field, 'must be an object');
  }
  const { policy, storeThreshold } = o as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== 'policy' && k !== 'storeThreshold') {
      throw new InvalidArgumentError(`${field}.${quoted(k)}`, 'is not a known field');
    }
  }
  if (policy !== undefined) {
    if (typeof policy !== 'string')
      throw new InvalidArgumentError(`${field}.policy`, 'must be a string');
    parseCachePolicy(policy);
  }
  if (
    storeThreshold !== undefined &&
    (typeof storeThreshold !== 'number' ||
      !Number.isInteger(storeThreshold) ||
      storeThreshold < 1 ||
      storeThreshold > STORE_THRESHOLD_MAX)
  ) {
    throw new InvalidArgumentError(
      `${field}.storeThreshold`,
      `must be an integer in [1, ${STORE_THRESHOLD_MAX}]`,
    );
  }
}
