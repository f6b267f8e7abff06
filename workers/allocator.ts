// The allocator role's worker: attaches to the shared buffers and runs its loop.
// No logic here: see src/runtime/role-main.ts and src/runtime/*-loop.ts.
import { parentPort, workerData } from 'node:worker_threads';
import { runRole } from '../src/runtime/role-main.js';
import type { RoleWorkerData } from '../src/runtime/role-main.js';

await runRole(workerData as RoleWorkerData, parentPort!);
