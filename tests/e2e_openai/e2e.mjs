// End-to-end: picolm-provider driven by the official `openai` npm client, the way an agent
// framework uses it (chat.completions.create with tools, streaming, models.list). Every tool
// call's arguments are validated against the tool's parameters by python3-jsonschema.
// Usage: node e2e.mjs --provider build/bin/picolm-provider --model MODEL.gguf
import assert from "node:assert/strict";
import OpenAI from "openai";
import { parseArgs, startProvider } from "./e2e_common/provider.mjs";
import { callRecord, validateJsonSchema } from "./e2e_common/checks.mjs";

const args = parseArgs("node e2e.mjs --provider BIN --model MODEL");

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

const checked = [];
const recordCall = (call) => checked.push(callRecord(TOOLS, call));

const messages = [
  { role: "system", content: "You control a smart home." },
  { role: "user", content: "Turn on the kitchen light." },
];

async function main() {
  const { child, port } = await startProvider({ provider: args.provider, model: args.model, ctx: 2048 });
  try {
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

    assert.equal(validateJsonSchema(checked, "tool calls"), 0, "tool-call arguments failed schema validation");
    console.log(`e2e ok: ${args.model} (${checked.length} tool calls validated)`);
  } finally {
    child.kill("SIGTERM");
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
