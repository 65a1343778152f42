// End-to-end: picolm-provider driven by the official `openai` npm client, the way an agent
// framework uses it (chat.completions.create with tools, streaming, models.list). Every tool
// call's arguments are validated against the tool's parameters by python3-jsonschema.
// Usage: node e2e.mjs --provider build/bin/picolm-provider --model MODEL.gguf
import { spawn, spawnSync } from "node:child_process";
import assert from "node:assert/strict";
import OpenAI from "openai";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
assert.ok(args.provider && args.model, "usage: node e2e.mjs --provider BIN --model MODEL");

const TOOLS = [
  {
    type: "function",
    function: {
      name: "set_light",
      description: "Switch a light on or off",
      parameters: {
        type: "object",
        properties: { room: { type: "string", enum: ["kitchen", "bedroom", "hall"] }, on: { type: "boolean" } },
        required: ["room", "on"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "set_volume",
      description: "Set the speaker volume",
      parameters: {
        type: "object",
        properties: { level: { type: "integer", minimum: 0, maximum: 10 } },
        required: ["level"],
      },
    },
  },
];

function startProvider() {
  return new Promise((resolve, reject) => {
    const child = spawn(args.provider, ["-m", args.model, "--port", "0", "-c", "2048", "-j", "1", "--cache-dir", "none"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (d) => {
      out += d.toString();
      const m = out.match(/listening on ([\d.]+):(\d+)/);
      if (m) resolve({ child, port: Number(m[2]) });
    });
    child.on("exit", (code) => reject(new Error(`provider exited with ${code}`)));
  });
}

async function waitHealthy(port) {
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/health`);
      if (r.status === 200) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("provider never became healthy");
}

const checked = [];
function recordCall(call) {
  assert.equal(call.type, "function");
  assert.match(call.id, /^call_/);
  assert.equal(typeof call.function.arguments, "string", "arguments must be a JSON string");
  const tool = TOOLS.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown tool ${call.function.name}`);
  checked.push({ schema: { ...tool.function.parameters, additionalProperties: false }, instance: JSON.parse(call.function.arguments) });
}

function validateAll() {
  const script = `
import json, sys
from jsonschema import Draft202012Validator
bad = 0
recs = json.load(sys.stdin)
for r in recs:
    errs = list(Draft202012Validator(r["schema"]).iter_errors(r["instance"]))
    if errs:
        bad += 1
        print("invalid:", r["instance"], errs[0].message)
print("validated", len(recs), "tool calls,", bad, "invalid")
sys.exit(1 if bad else 0)
`;
  const res = spawnSync("/usr/bin/python3", ["-c", script], { input: JSON.stringify(checked), encoding: "utf8" });
  process.stdout.write(res.stdout + res.stderr);
  assert.equal(res.status, 0, "tool-call arguments failed schema validation");
}

const messages = [
  { role: "system", content: "You control a smart home." },
  { role: "user", content: "Turn on the kitchen light." },
];

async function main() {
  const { child, port } = await startProvider();
  try {
    await waitHealthy(port);
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", timeout: 120000, maxRetries: 0 });

    const models = await client.models.list();
    assert.ok(models.data.length >= 1 && typeof models.data[0].id === "string");
    const model = models.data[0].id;

    // Plain chat.
    const plain = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
    assert.equal(plain.object, "chat.completion");
    assert.equal(typeof plain.choices[0].message.content, "string");
    assert.ok(["stop", "length"].includes(plain.choices[0].finish_reason));
    assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);

    // Every tool_choice. Forced choices must produce a call.
    const choices = ["required", { type: "function", function: { name: "set_volume" } }, "auto"];
    for (const tool_choice of choices) {
      for (const seed of [1, 2]) {
        const r = await client.chat.completions.create({
          model, messages, tools: TOOLS, tool_choice, parallel_tool_calls: false, max_tokens: tool_choice === "auto" ? 100 : 400, seed,
        });
        const msg = r.choices[0].message;
        const calls = msg.tool_calls ?? [];
        if (tool_choice !== "auto") {
          assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r));
          assert.equal(calls.length, 1);
        }
        if (typeof tool_choice === "object") assert.equal(calls[0].function.name, "set_volume");
        calls.forEach(recordCall);
      }
    }

    // A second turn with the call and its result in the history (max_completion_tokens spelling).
    const first = await client.chat.completions.create({
      model, messages, tools: TOOLS, tool_choice: "required", parallel_tool_calls: false, max_tokens: 400, seed: 3,
    });
    const call = first.choices[0].message.tool_calls[0];
    recordCall(call);
    const second = await client.chat.completions.create({
      model,
      messages: [...messages, first.choices[0].message, { role: "tool", tool_call_id: call.id, content: "done" }],
      tools: TOOLS, tool_choice: "required", parallel_tool_calls: false, max_completion_tokens: 400, seed: 4,
    });
    (second.choices[0].message.tool_calls ?? []).forEach(recordCall);

    // Streaming, greedy: the reassembled stream equals the non-streamed reply.
    const req = { model, messages, tools: TOOLS, tool_choice: "required", parallel_tool_calls: false, max_tokens: 400, temperature: 0 };
    const whole = await client.chat.completions.create(req);
    const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
    const acc = [];
    let finish = null, usage = null, content = "";
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const ch = chunk.choices[0];
      if (!ch) continue;
      if (ch.delta?.content) content += ch.delta.content;
      for (const d of ch.delta?.tool_calls ?? []) {
        acc[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
        if (d.id) acc[d.index].id = d.id;
        if (d.function?.name) acc[d.index].function.name += d.function.name;
        if (d.function?.arguments) acc[d.index].function.arguments += d.function.arguments;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.ok(usage && usage.completion_tokens > 0);
    assert.equal(content, whole.choices[0].message.content ?? "");
    const wholeCalls = whole.choices[0].message.tool_calls ?? [];
    assert.equal(acc.length, wholeCalls.length);
    acc.forEach((c, i) => {
      assert.equal(c.function.name, wholeCalls[i].function.name);
      assert.equal(c.function.arguments, wholeCalls[i].function.arguments);
      recordCall(c);
    });

    // Plain streaming text.
    const s2 = await client.chat.completions.create({ model, messages, max_tokens: 12, stream: true });
    let n = 0;
    for await (const chunk of s2) n += chunk.choices.length;
    assert.ok(n > 0);

    validateAll();
    console.log(`e2e ok: ${args.model} (${checked.length} tool calls validated)`);
  } finally {
    child.kill("SIGTERM");
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
