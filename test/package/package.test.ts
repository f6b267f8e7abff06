// What `npm pack` would publish: the license the package declares, every
// source map resolving to a file inside the tarball, every entry point
// present, the docs and examples the README links to (issue 31, item 7: an
// installed copy had dead links), where the package points for its home and
// bugs, and the ESM-only contract stated where users look.
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { relativeLinks } from '../docs/doc-blocks.js';

interface PackEntry {
  files: { path: string }[];
}
interface PackageJson {
  license: string;
  homepage: string;
  repository: { type: string; url: string };
  bugs: { url: string };
  description: string;
  type: string;
  engines: { node: string };
  bin: Record<string, string>;
  main: string;
  types: string;
  exports: Record<string, string | Record<string, string>>;
}

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as PackageJson;
let files: Set<string>;

beforeAll(async () => {
  // --ignore-scripts: the global setup already built dist/; prepack would rebuild it.
  const { stdout } = await promisify(execFile)(
    'npm',
    ['pack', '--dry-run', '--json', '--ignore-scripts'],
    { cwd: ROOT, env: { ...process.env, NO_COLOR: '1' } },
  );
  const [entry] = JSON.parse(stdout) as PackEntry[];
  files = new Set(entry!.files.map((f) => f.path));
}, 120_000);

describe('npm pack contents', () => {
  it('ships the Apache-2.0 LICENSE that package.json declares', () => {
    expect(pkg.license).toBe('Apache-2.0');
    expect(files.has('LICENSE')).toBe(true);
    const text = readFileSync(join(ROOT, 'LICENSE'), 'utf8');
    expect(text).toContain('Apache License');
    expect(text).toContain('Version 2.0, January 2004');
    expect(text).toContain('END OF TERMS AND CONDITIONS');
  });

  it('ships every entry point package.json names', () => {
    const named = [
      pkg.main,
      pkg.types,
      ...Object.values(pkg.bin),
      ...Object.values(pkg.exports).flatMap((e) =>
        typeof e === 'string' ? [e] : Object.values(e),
      ),
    ].map((p) => posix.normalize(p));
    expect(named.filter((p) => !files.has(p))).toEqual([]);
  });

  it('has no source map pointing at a file the tarball lacks', () => {
    const maps = [...files].filter((f) => f.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(0);
    const broken = maps.flatMap((map) => {
      const { sources } = JSON.parse(readFileSync(join(ROOT, map), 'utf8')) as {
        sources: string[];
      };
      return sources
        .map((s) => posix.normalize(posix.join(dirname(map), s)))
        .filter((target) => !files.has(target))
        .map((target) => `${map} -> ${target}`);
    });
    expect(broken).toEqual([]);
  });

  it('ships no tests, benchmarks or local state', () => {
    expect([...files].filter((f) => /^(test|bench|node_modules|coverage)\//.test(f))).toEqual([]);
  });

  it('regression: ships docs/ and examples/, so every relative link of README and docs resolves in an installed copy', () => {
    const docs = ['README.md', ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`)];
    const examples = readdirSync(join(ROOT, 'examples')).map((f) => `examples/${f}`);
    expect([...docs, ...examples].filter((f) => !files.has(f))).toEqual([]);
    const dead = docs
      .filter((f) => f.endsWith('.md'))
      .flatMap((f) =>
        relativeLinks(readFileSync(join(ROOT, f), 'utf8'))
          .filter((t) => t !== '')
          .map((t) => posix.normalize(posix.join(posix.dirname(f), t)).replace(/\/$/, ''))
          .filter((t) => !files.has(t) && ![...files].some((p) => p.startsWith(`${t}/`)))
          .map((t) => `${f} -> ${t}`),
      );
    expect(dead).toEqual([]);
  });

  it('says where its home, repository and bugs are, each a file the tarball ships when relative', () => {
    const targets = [pkg.homepage, pkg.repository.url, pkg.bugs.url];
    for (const t of targets) expect(typeof t).toBe('string');
    const missing = targets
      .filter((t) => !/^[a-z+]+:/.test(t))
      .map((t) => posix.normalize(t.replace(/#.*$/, '')).replace(/\/$/, ''))
      .filter((t) => t !== '.' && !files.has(t));
    expect(missing).toEqual([]);
  });

  it('says ESM only and the Node version where users look', () => {
    expect(pkg.type).toBe('module');
    expect(pkg.engines.node).toBe('>=20.19');
    expect(JSON.stringify(pkg.exports)).not.toContain('"require"');
    expect(pkg.description).toMatch(/ES modules only/);
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    expect(readme).toMatch(/ES module only/);
    expect(readme).toContain('Node.js ≥ 20.19');
  });
});

describe('entries', () => {
  it('the main entry is what an embedder uses; the fuzzer and the simulator are in kvoff/testing', async () => {
    const main = (await import(join(ROOT, 'dist', 'src', 'index.js'))) as Record<string, unknown>;
    const testing = (await import(join(ROOT, 'dist', 'src', 'testing.js'))) as Record<
      string,
      unknown
    >;
    for (const name of ['OffloadRuntime', 'LocalOffload', 'KvoffServer', 'DiskTier', 'KvoffError'])
      expect(main[name], name).toBeDefined();
    for (const name of ['runSchedule', 'World', 'EngineSimulator', 'SchedulerRole']) {
      expect(main[name], name).toBeUndefined();
      expect(testing[name], name).toBeDefined();
    }
    // Every typed error is public: an embedder catches them by class.
    const errors = (await import(join(ROOT, 'dist', 'src', 'errors.js'))) as Record<
      string,
      unknown
    >;
    const KvoffError = errors.KvoffError as abstract new (...args: never[]) => unknown;
    const errorClasses = Object.entries(errors).filter(
      ([, v]) => typeof v === 'function' && (v === KvoffError || v.prototype instanceof KvoffError),
    );
    expect(errorClasses.length).toBeGreaterThan(10);
    expect(errorClasses.filter(([name]) => main[name] === undefined).map(([n]) => n)).toEqual([]);
    // Types a backend that wraps the default pool needs (issue 31, item 7).
    const types = readFileSync(join(ROOT, 'dist', 'src', 'index.d.ts'), 'utf8');
    for (const name of ['PiscinaBackendOptions', 'TransferBackendModule', 'Doorbell'])
      expect(types, name).toMatch(new RegExp(`\\b${name}\\b`));
    expect(pkg.exports['./testing']).toEqual({
      types: './dist/src/testing.d.ts',
      import: './dist/src/testing.js',
    });
  });
});
