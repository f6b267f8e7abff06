// Resolving and spawning worker files the same way from source (tsx, vitest)
// and from dist. Worker files live in workers/ beside src/: from
// src/runtime/x.ts that is ../../workers/name.ts, from dist/src/runtime/x.js it
// is dist/workers/name.js (the build keeps rootDir ".").
//
// Under tsx/vitest on Node 20, tsx's ESM hooks do not reach worker threads, so
// a raw .ts worker registers tsx itself (eval shim), and piscina threads get
// `--import tsx` (piscina require()s its task file, which tsx's hook handles).
import { Worker } from 'node:worker_threads';
import type { WorkerOptions } from 'node:worker_threads';

export const FROM_SOURCE = import.meta.url.endsWith('.ts');

export function workerUrl(name: string): URL {
  return new URL(`../../workers/${name}${FROM_SOURCE ? '.ts' : '.js'}`, import.meta.url);
}

export function spawnWorker(url: URL, options: WorkerOptions = {}): Worker {
  if (!url.pathname.endsWith('.ts')) return new Worker(url, options);
  const api = import.meta.resolve('tsx/esm/api');
  const code =
    `import(${JSON.stringify(api)}).then((m) => { m.register(); ` +
    `return import(${JSON.stringify(url.href)}); })`;
  return new Worker(code, { ...options, eval: true });
}

/** execArgv for piscina threads: tsx's loader when running from source. */
export function piscinaExecArgv(): string[] {
  const base = process.execArgv.filter((a) => !a.startsWith('--input-type'));
  if (!FROM_SOURCE) return base;
  if (base.some((a) => a.includes('tsx'))) return base;
  return [...base, '--import', import.meta.resolve('tsx')];
}
