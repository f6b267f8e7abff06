import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The summary reporter prints the plain "N passed, N failed" line CI reads.
    reporters: ['default', './test/summary-reporter.ts'],
    testTimeout: 60_000,
    // Real-thread tests spawn their own workers; two files at a time fits 2 cores.
    maxWorkers: 2,
  },
});
