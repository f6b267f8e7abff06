// Tests that use the package as a user gets it (the documented snippets, the
// samples of `kvoff` output, `npm pack`) need dist/. Build it once before the
// run when it is missing or older than any source file, so `npx vitest run`
// works from a fresh clone and never tests a stale build.
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export function setup(): void {
  // The package's own rule (its `prepare` script): build unless dist/ is newer than src/ and workers/.
  execFileSync('sh', [join(ROOT, 'scripts', 'build-if-stale.sh')], { cwd: ROOT, stdio: 'inherit' });
}
