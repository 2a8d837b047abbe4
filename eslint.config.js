// Lint of the web UI's hand-written modules (not the vendored libraries) and of their node tests.
import js from "@eslint/js";
import globals from "globals";
import reactHooks from "eslint-plugin-react-hooks";

export default [
  { ignores: ["src/corral/frontend/ui/vendor/**", "node_modules/**"] },
  js.configs.recommended,
  {
    files: ["src/corral/frontend/ui/js/**/*.js"],
    languageOptions: { ecmaVersion: 2023, sourceType: "module", globals: globals.browser },
    plugins: { "react-hooks": reactHooks }, // Preact's hooks follow the same rules
    rules: {
      "no-unused-vars": ["error", { args: "none", caughtErrors: "none" }],
      "react-hooks/rules-of-hooks": "error",
      "react-hooks/exhaustive-deps": "warn",
    },
  },
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: { ecmaVersion: 2023, sourceType: "module", globals: { ...globals.node, ...globals.browser } },
  },
];
