// How long the store role takes to answer lookups, as vLLM's offloading
// connector measures it: the synchronous time of one lookup call, and, for a
// lookup answered "ask again later", the time from its first deferral to the
// answer that resolved it. Kept on the store thread; totals are published as
// stats words, samples go to main for the /metrics histograms (bounded).
import { performance } from 'node:perf_hooks';

export interface LookupSample {
  readonly kind: 'sync' | 'deferred';
  readonly seconds: number;
}

/** Samples kept between two takes; beyond this only the totals count. */
const SAMPLES_MAX = 4096;
/** Deferred lookups remembered at once (a request that ended never asks again); the oldest go first. */
const DEFERRED_MAX = 4096;

export class LookupTiming {
  /** Lookup calls answered, and their total time. */
  syncCount = 0;
  syncSeconds = 0;
  /** Deferred lookups later resolved, and the total time they waited. */
  resolvedCount = 0;
  resolvedSeconds = 0;
  private readonly deferredSinceMs = new Map<number, number>();
  private samples: LookupSample[] = [];

  /** One lookup call for `tag` that began at `startMs` and answered (deferred or not) now. */
  answered(tag: number, startMs: number, deferred: boolean): void {
    const now = performance.now();
    this.add('sync', (now - startMs) / 1000);
    this.syncCount += 1;
    const since = this.deferredSinceMs.get(tag);
    if (deferred) {
      if (since !== undefined) return;
      if (this.deferredSinceMs.size >= DEFERRED_MAX) {
        this.deferredSinceMs.delete(this.deferredSinceMs.keys().next().value!);
      }
      this.deferredSinceMs.set(tag, startMs);
      return;
    }
    if (since === undefined) return;
    this.deferredSinceMs.delete(tag);
    this.resolvedCount += 1;
    this.add('deferred', (now - since) / 1000);
  }

  take(): LookupSample[] {
    const out = this.samples;
    this.samples = [];
    return out;
  }

  private add(kind: LookupSample['kind'], seconds: number): void {
    if (kind === 'sync') this.syncSeconds += seconds;
    else this.resolvedSeconds += seconds;
    if (this.samples.length < SAMPLES_MAX) this.samples.push({ kind, seconds });
  }
}
