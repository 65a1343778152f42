// End-to-end, issue 13: with the official `openai` npm client, every constrained request ends valid
// within its token budget. A budget below the shortest answer is a 400 (BadRequestError) naming the
// minimum; from that minimum up to 400 tokens, tool_choice required and named (streaming and not)
// always return >= 1 complete call whose arguments validate (python3-jsonschema), and json_schema
// replies always parse and validate.
// Usage: node budget.mjs --provider build/bin/picolm-provider --model qwen2-bpe-q4km.gguf
//        [--tools picoclaw-like-tools.json] (default: ../tool-lists/ next to the model's folder)
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { parseArgs, startProvider } from "./e2e_common/provider.mjs";
import { validateJsonSchema } from "./e2e_common/checks.mjs";

const args = parseArgs("node budget.mjs --provider BIN --model MODEL [--tools TOOLS.json]");
const toolsPath = args.tools ?? join(dirname(args.model), "..", "tool-lists", "picoclaw-like-tools.json");
const TOOLS = JSON.parse(readFileSync(toolsPath, "utf8"));

// (schema, text, label) records, validated in one python process at the end. The text is parsed
// there, so a reply that is not JSON counts as invalid too.
const records = [];
function paramsOf(name) {
  const tool = TOOLS.find((t) => t.function.name === name);
  assert.ok(tool, `unknown tool ${name}`);
  return { additionalProperties: false, ...tool.function.parameters };
}

// The minimum the server names when max_tokens is too small.
async function minimumOf(client, req) {
  try {
    await client.chat.completions.create({ ...req, max_tokens: 1 });
  } catch (e) {
    assert.ok(e instanceof OpenAI.BadRequestError, `expected a 400, got ${e}`);
    assert.equal(e.status, 400);
    assert.equal(e.param, "max_tokens");
    const m = /at least (\d+)/.exec(e.message);
    assert.ok(m, `the 400 names no minimum: ${e.message}`);
    return Number(m[1]);
  }
  assert.fail("max_tokens 1 was accepted for a constrained request");
}

async function complete(client, req, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(req);
    return { finish: r.choices[0].finish_reason, message: r.choices[0].message, usage: r.usage };
  }
  const s = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const calls = [];
  let finish = null, usage = null, content = "";
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.delta?.content) content += ch.delta.content;
    for (const d of ch.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].function.name += d.function.name;
      if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  return { finish, message: { content, tool_calls: calls }, usage };
}

// Dense near the minimum, sparse up to 400.
const schedule = (min) => [0, 1, 2, 3, 5, 8, 13, 21].map((d) => min + d).concat([64, 128, 256, 400].filter((v) => v > min + 21));

const messages = [
  { role: "system", content: "You are a helpful agent." },
  { role: "user", content: "Look up the weather in Paris and save it to notes.txt" },
];

async function main() {
  const { child, port } = await startProvider({ provider: args.provider, model: args.model, ctx: 4096 });
  try {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", timeout: 300000, maxRetries: 0 });
    const model = (await client.models.list()).data[0].id;
    let replies = 0;

    const choices = ["required", { type: "function", function: { name: "write_file" } }, { type: "function", function: { name: "cron" } }];
    for (const tool_choice of choices) {
      const base = { model, messages, tools: TOOLS, tool_choice, temperature: 1.0 };
      const min = await minimumOf(client, base);
      const sched = schedule(min);
      for (let seed = 1; seed <= 18; seed++) {
        const stream = seed % 2 === 0;
        const max_tokens = sched[(seed * 5) % sched.length];
        const req = { ...base, seed, max_tokens, parallel_tool_calls: seed % 3 === 0 };
        const r = await complete(client, req, stream);
        const label = `${JSON.stringify(tool_choice)} seed ${seed} max_tokens ${max_tokens}${stream ? " stream" : ""}`;
        assert.equal(r.finish, "tool_calls", label);
        const calls = r.message.tool_calls ?? [];
        assert.ok(calls.length >= 1, `${label}: no call`);
        assert.ok(r.usage.completion_tokens <= max_tokens, `${label}: ${r.usage.completion_tokens} tokens`);
        for (const c of calls) {
          assert.equal(c.type, "function");
          assert.match(c.id, /^call_/);
          if (typeof tool_choice === "object") assert.equal(c.function.name, tool_choice.function.name, label);
          records.push({ schema: paramsOf(c.function.name), text: c.function.arguments, label });
        }
        replies++;
      }
    }

    const schema = {
      type: "object",
      properties: {
        city: { type: "string" },
        days: { type: "array", items: { type: "object", properties: { t: { type: "integer" }, sky: { type: "string" } }, required: ["t", "sky"] }, minItems: 1 },
      },
      required: ["city", "days"],
    };
    const jbase = { model, messages, temperature: 1.0, response_format: { type: "json_schema", json_schema: { name: "w", schema } } };
    const jmin = await minimumOf(client, jbase);
    for (let i = 0; i < 24; i++) {
      const max_tokens = i < 16 ? jmin + i : [48, 96, 200, 300, 400, 400, 400, 400][i - 16];
      const stream = i % 2 === 1;
      const r = await complete(client, { ...jbase, seed: 50 + i, max_tokens }, stream);
      const label = `json_schema max_tokens ${max_tokens}${stream ? " stream" : ""}`;
      assert.equal(r.finish, "stop", label);
      assert.ok(r.usage.completion_tokens <= max_tokens, label);
      records.push({ schema, text: r.message.content, label });
      replies++;
    }

    assert.equal(validateJsonSchema(records, "replies"), 0, "replies failed schema validation");
    console.log(`e2e budget ok: ${replies} replies, ${records.length} records validated`);
  } finally {
    child.kill("SIGTERM");
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
