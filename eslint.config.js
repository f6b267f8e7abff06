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
  // The JavaScript examples are type-checked by tsc (checkJs), which knows Node's globals.
  { files: ['examples/**/*.mjs'], rules: { 'no-undef': 'off' } },
);
