// CPU profiles of the bench threads, for finding where a design's CPU goes:
// `KVOFF_BENCH_CPU_PROF=some/dir npm run bench -- --quick --only designs`
// writes one .cpuprofile per bench thread (open it in Chrome DevTools or
// speedscope) when the pool closes. `node --cpu-prof` profiles the main thread
// only: the bench threads are started with the few flags workers accept.
import { writeFileSync, mkdirSync } from 'node:fs';
import { Session } from 'node:inspector';
import path from 'node:path';
import { threadId } from 'node:worker_threads';

/** The folder profiles go to, or undefined when profiling is off. */
export function profileDir(): string | undefined {
  const dir = process.env.KVOFF_BENCH_CPU_PROF;
  return dir === undefined || dir === '' ? undefined : dir;
}

/** Starts the V8 CPU profiler in this thread; the returned function writes the profile. */
export function startThreadProfile(dir: string): () => Promise<void> {
  const session = new Session();
  session.connect();
  const post = (method: string, params?: object) =>
    new Promise<unknown>((resolve, reject) =>
      session.post(method, params, (error, result) => (error ? reject(error) : resolve(result))),
    );
  const started = post('Profiler.enable').then(() => post('Profiler.start'));
  return async () => {
    await started;
    const { profile } = (await post('Profiler.stop')) as { profile: unknown };
    session.disconnect();
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `bench-thread-${process.pid}-${threadId}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
  };
}
