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

const FROM_SOURCE = import.meta.url.endsWith('.ts');

/**
 * Set by the test runner's config (vitest.config.ts), whose global setup keeps
 * dist/ fresh: the runtime runs from source and its worker files from the
 * build. A worker from source registers tsx and compiles its modules first,
 * 1-3 s a worker at load 30 against 0.1-0.6 s built, and a start spawns six or
 * more: 7-15 s a start, which put the tests that start runtimes past their
 * bounds on a loaded 2-core machine.
 */
const WORKERS_FROM_BUILD = FROM_SOURCE && process.env['KVOFF_TEST_WORKERS_FROM_BUILD'] === '1';

/**
 * The worker file of a role. `hostModule`: a module of the host's the worker
 * imports (transferBackendModule); one written in TypeScript needs the worker
 * from source, where tsx is registered.
 */
export function workerUrl(name: string, hostModule?: string): URL {
  if (WORKERS_FROM_BUILD && hostModule?.endsWith('.ts') !== true)
    return new URL(`../../dist/workers/${name}.js`, import.meta.url);
  return new URL(`../../workers/${name}${FROM_SOURCE ? '.ts' : '.js'}`, import.meta.url);
}

export function spawnWorker(url: URL, options: WorkerOptions = {}): Worker {
  const opts: WorkerOptions = { execArgv: workerExecArgv(), ...options };
  if (!url.pathname.endsWith('.ts')) return new Worker(url, opts);
  const api = import.meta.resolve('tsx/esm/api');
  const code =
    `import(${JSON.stringify(api)}).then((m) => { m.register(); ` +
    `return import(${JSON.stringify(url.href)}); })`;
  return new Worker(code, { ...opts, eval: true });
}

/** Host flags a worker needs, each with its value: module loaders and resolution conditions. */
const WORKER_FLAGS: ReadonlySet<string> = new Set([
  '--import',
  '--require',
  '-r',
  '--loader',
  '--experimental-loader',
  '--conditions',
  '-C',
]);

/**
 * The host's execArgv reduced to what workers need. A worker inherits the
 * process's flags by default, and many are the process's alone and make
 * `new Worker` fail (--expose-gc, --max-old-space-size, --stack-size, --title,
 * --abort-on-uncaught-exception, --max-semi-space-size, --zero-fill-buffers)
 * or re-run the host's code (-e, --input-type): only module loaders and
 * conditions are passed on. Entries that are not flags are values of the
 * flag before them and go with it.
 */
export function workerExecArgv(argv: readonly string[] = process.execArgv): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i]!;
    const eq = a.indexOf('=');
    const name = eq > 0 ? a.slice(0, eq) : a;
    if (!WORKER_FLAGS.has(name)) continue; // a dropped flag, or the value of one
    if (eq > 0) out.push(a);
    else if (i + 1 < argv.length) {
      out.push(a, argv[i + 1]!);
      i += 1;
    }
  }
  return out;
}

/** execArgv for piscina threads: tsx's loader when running from source. */
export function piscinaExecArgv(): string[] {
  const base = workerExecArgv();
  if (!FROM_SOURCE || WORKERS_FROM_BUILD) return base;
  if (base.some((a) => a.includes('tsx'))) return base;
  return [...base, '--import', import.meta.resolve('tsx')];
}
