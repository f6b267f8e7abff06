// Regression (issue 31, item 3): the README's serve line was
// `npx kvoff serve --port 8080  # SIGTERM drains`, but npx does not pass
// SIGTERM on: npx exited and the server, orphaned, kept serving. This runs the
// README's serve command as written (its argv, only the port made free), sends
// SIGTERM to the process the command started, as a supervisor or `kill` does,
// and expects what the README says: a drain, an exit, and nobody left on the
// port. The process group is killed afterwards, whatever happened.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { SHELL_LANGS, kvoffCalls, parseBlocks } from './doc-blocks.js';

const cache = mkdtempSync(join(tmpdir(), 'kvoff-npm-cache-'));
afterAll(() => rmSync(cache, { recursive: true, force: true }));

/** The README's `kvoff serve` command line, without its comment. */
function readmeServeCommand(): string[] {
  const blocks = parseBlocks('README.md', readFileSync(join(ROOT, 'README.md'), 'utf8'));
  const lines = blocks
    .filter((b) => (SHELL_LANGS as readonly string[]).includes(b.lang))
    .flatMap((b) => b.body.split('\n'))
    .filter((l) => kvoffCalls(l).some((c) => c.sub === 'serve'));
  expect(lines, 'the README has one kvoff serve command').toHaveLength(1);
  return lines[0]!
    .replace(/(^|\s)#.*$/, '')
    .trim()
    .split(/\s+/);
}

async function answers(url: string): Promise<boolean> {
  try {
    await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
    return true;
  } catch {
    return false;
  }
}

describe("the README's serve command", () => {
  it('regression: SIGTERM to the process it starts drains the server and leaves nothing on the port', async () => {
    const argv = readmeServeCommand().map((w, i, all) => (all[i - 1] === '--port' ? '0' : w));
    const [command, ...args] = argv;
    const child = spawn(command === 'node' ? process.execPath : command!, args, {
      cwd: ROOT,
      detached: true, // its own process group: cleaned up below, orphans included
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', npm_config_cache: cache, npm_config_yes: 'true' },
    });
    try {
      let stdout = '';
      let stderr = '';
      child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout!.setEncoding('utf8').on('data', (s: string) => {
          stdout += s;
          const m = /(http:\/\/[\d.:[\]]+)/.exec(stdout);
          if (m) resolve(m[1]!);
        });
        void exited.then(() => reject(new Error(`exited before listening:\n${stderr}`)));
      });
      expect(await answers(url)).toBe(true);
      const served = await fetch(`${url}/v1/requests`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ promptLength: 256, maxDecodeTokens: 2 }),
      });
      expect(served.status).toBe(200);
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      const code = await exited;
      clearTimeout(timer);
      expect(code, stderr).toBe(0);
      expect(stderr).toMatch(/SIGTERM: draining/);
      // One request: the drain line counts it in the singular ("1 requests" before).
      expect(stderr).toMatch(/drained; 1 request completed, \d+ chunks? stored, holes 0/);
      expect(await answers(url), 'something still serves on the port after the exit').toBe(false);
    } finally {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // The group is gone already: nothing was orphaned.
      }
    }
  }, 120_000);
});
