// Tests that use the package as a user gets it (the documented snippets, the
// samples of `kvoff` output, `npm pack`) need dist/. Build it once before the
// run when it is missing or older than any source file, so `npx vitest run`
// works from a fresh clone and never tests a stale build.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function newestMtimeMs(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtimeMs(path) : statSync(path).mtimeMs);
  }
  return newest;
}

export function setup(): void {
  const built = join(ROOT, 'dist', 'src', 'index.js');
  const sources = Math.max(newestMtimeMs(join(ROOT, 'src')), newestMtimeMs(join(ROOT, 'workers')));
  if (existsSync(built) && statSync(built).mtimeMs >= sources) return;
  // From an empty dist/, as `npm run build` does: a file removed from src/ must not linger.
  rmSync(join(ROOT, 'dist'), { recursive: true, force: true });
  execFileSync(
    process.execPath,
    [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'],
    {
      cwd: ROOT,
      stdio: 'inherit',
    },
  );
}
