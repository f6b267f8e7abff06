import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Builds dist/ when it is missing or stale: the docs and package tests use the build.
    globalSetup: ['./test/helpers/global-setup.ts'],
    // Runtimes the tests start (and the kvoff children they spawn) run their
    // worker threads from that build: from source each worker compiles with
    // tsx first, and a start took 7-15 s at load 30 against 2 s built
    // (src/runtime/worker-files.ts). One test starts its workers from source.
    env: { KVOFF_TEST_WORKERS_FROM_BUILD: '1' },
    // The summary reporter prints the plain "N passed, N failed" line CI reads.
    reporters: ['default', './test/helpers/summary-reporter.ts'],
    testTimeout: 60_000,
    // Hooks start and close runtimes as tests do, so they get the same bound
    // (vitest's 10 s default is less than a runtime start on a loaded 2-core box).
    hookTimeout: 60_000,
    // Real-thread tests spawn their own workers; two files at a time fits 2 cores.
    maxWorkers: 2,
  },
});
