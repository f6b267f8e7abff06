// Lint the TypeScript sources with the type-aware recommended rules; built
// output and dependencies are not ours to lint.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    files: ['src/**/*.ts'],
    rules: {
      // invariant(cond, `... ${x}`) builds its message on every call, also
      // when the condition holds: on hot paths (unpin per block, completion per
      // job) that string was most of the call. Guard it instead:
      // if (!cond) invariant(false, `... ${x}`).
      'no-restricted-syntax': [
        'error',
        {
          selector:
            'CallExpression[callee.name="invariant"]:not([arguments.0.value=false]) > TemplateLiteral[expressions.length>0]',
          message:
            'Build an invariant message only when it fails: if (!cond) invariant(false, `...`).',
        },
      ],
    },
  },
  // Small files with one job, functions a reader can hold (docs/contributing.md):
  // the limits hold in CI, so they cannot slip back one line at a time.
  {
    files: ['src/**/*.ts', 'workers/**/*.ts'],
    rules: {
      'max-lines': ['error', { max: 600, skipBlankLines: true, skipComments: true }],
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
    },
  },
  // The JavaScript examples are type-checked by tsc (checkJs), which knows Node's globals.
  { files: ['examples/**/*.mjs'], rules: { 'no-undef': 'off' } },
);
