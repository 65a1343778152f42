// Shared by the npm end-to-end tests (tests/e2e_*/): named steps that report and go on, and an
// independent JSON Schema validator (python3-jsonschema) for what the provider produced. Each
// run.sh copies this file into its work folder as e2e_common/checks.mjs.
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import assert from "node:assert/strict";

// step(name, fn) runs fn, prints "ok   name (ms)" or "FAIL name: stack", and goes on; `failures`
// lists the names that failed; finish(summary) prints the summary and the failures, and exits 1
// if there were any.
export function stepRunner() {
  const failures = [];
  function finish(summary) {
    console.log(`${summary}; ${failures.length} failures`);
    if (failures.length) {
      console.log("failed: " + failures.join("; "));
      process.exit(1);
    }
  }
  async function step(name, fn) {
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      console.log(`FAIL ${name}: ${e.stack || e}`);
      failures.push(name);
    }
  }
  return { step, failures, finish };
}

// valid(zodSchema, value, what) asserts that value validates, naming `what` and zod's message if
// not, and returns the parsed value; count() is how many values passed.
export function zodChecker() {
  let passed = 0;
  function valid(schema, value, what) {
    const r = schema.safeParse(value);
    assert.ok(r.success, `${what}: ${JSON.stringify(value)} does not validate: ${r.success ? "" : r.error.message}`);
    passed++;
    return r.data;
  }
  return { valid, count: () => passed };
}

// Runs the README's ```js blocks between "<!-- BEGIN <name>" and "<!-- END <name> -->" as written,
// with `url` (the address the README uses) replaced by `actual`, each as its own node process in the
// current folder; asserts there are `count` of them, each names `url`, and each exits 0. Returns
// what each printed.
export function runReadmeSnippets(readmePath, name, count, url, actual) {
  const readme = readFileSync(readmePath, "utf8");
  const begin = readme.indexOf(`<!-- BEGIN ${name}`);
  const end = readme.indexOf(`<!-- END ${name} -->`);
  assert.ok(begin >= 0 && end > begin, `the README has no "${name}"`);
  const blocks = [...readme.slice(begin, end).matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.equal(blocks.length, count, `${name}: ${blocks.length} js blocks`);
  return blocks.map((code, i) => {
    assert.ok(code.includes(url), `${name} ${i} does not use ${url}`);
    const file = `readme_${name.replaceAll(" ", "_")}_${i}.mjs`;
    writeFileSync(file, code.replaceAll(url, actual));
    const r = spawnSync("node", [file], { encoding: "utf8", timeout: 120000 });
    assert.equal(r.status, 0, `${name} ${i} failed:\n${code}\n${r.stdout}\n${r.stderr}`);
    return r.stdout;
  });
}

// A chat-completions tool call (OpenAI shape) as a record for validateJsonSchema: its arguments
// (which must be a JSON string) against its tool's parameters from `tools`, with no other fields.
export function callRecord(tools, call) {
  assert.equal(call.type, "function");
  assert.match(call.id, /^call_/);
  assert.equal(typeof call.function.arguments, "string", "arguments must be a JSON string");
  const tool = tools.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown tool ${call.function.name}`);
  return { schema: { ...tool.function.parameters, additionalProperties: false }, instance: JSON.parse(call.function.arguments) };
}

// Validates records {schema, instance} or {schema, text, label} (a text is parsed there, so one
// that is not JSON counts as invalid) in one python3 process with jsonschema's Draft 2020-12
// validator; prints "validated N <noun>, B invalid" and the invalid ones; returns B.
export function validateJsonSchema(records, noun) {
  const script = `
import json, sys
from jsonschema import Draft202012Validator
bad = 0
recs = json.load(sys.stdin)
for r in recs:
    try:
        instance = json.loads(r["text"]) if "text" in r else r["instance"]
        errs = [e.message for e in Draft202012Validator(r["schema"]).iter_errors(instance)]
    except Exception as e:
        errs = [str(e)]
    if errs:
        bad += 1
        print("invalid:", r.get("label", ""), json.dumps(r.get("text", r.get("instance")))[:300], errs[0][:300])
print("validated", len(recs), sys.argv[1] + ",", bad, "invalid")
sys.exit(min(bad, 100))
`;
  const res = spawnSync("/usr/bin/python3", ["-c", script, noun], { input: JSON.stringify(records), encoding: "utf8" });
  process.stdout.write(res.stdout + res.stderr);
  assert.ok(res.status !== null && !res.error, `python3 did not run: ${res.error ?? res.signal}`);
  assert.ok(res.stdout.includes("validated"), "the validator did not finish");
  return res.status;
}
