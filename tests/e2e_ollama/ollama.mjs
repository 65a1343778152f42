// End-to-end (issue 30 item 7): picolm-provider's Ollama API driven by the official `ollama` npm
// client the way Home Assistant, Open WebUI and n8n use it: list, show, ps, chat with tools (whole
// and streamed, a tool result sent back), chat with a `format` schema (whole and streamed), think,
// generate, and errors whose text the client can print. Every typed result is checked with zod:
// the tools' parameters and the format schema are written in zod and sent as the JSON Schema zod
// makes of them, and what comes back is parsed with the same zod schemas.
// The shared test models have random weights: to get calls from them, the chat requests with
// tools also send tool_choice "required" (the provider's extension to Ollama's request).
// With --readme README.md it also runs the README's Ollama snippet as written (host replaced).
// Usage: node ollama.mjs --provider build/bin/picolm-provider --model MODEL.gguf [--readme README.md]
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { z } from "zod";
import { parseArgs, startProvider } from "./e2e_common/provider.mjs";
import { runReadmeSnippets } from "./e2e_common/checks.mjs";

const args = parseArgs("node ollama.mjs --provider BIN --model MODEL [--readme README.md]");

// ---- the typed shapes (zod) ----
const SetLight = z.strictObject({ room: z.enum(["kitchen", "bedroom", "hall"]), on: z.boolean() });
const SetVolume = z.strictObject({ level: z.number().int().min(0).max(10) });
const ARGS = { set_light: SetLight, set_volume: SetVolume };
const TOOLS = [
  { type: "function", function: { name: "set_light", description: "Switch a light", parameters: z.toJSONSchema(SetLight) } },
  { type: "function", function: { name: "set_volume", description: "Set the volume", parameters: z.toJSONSchema(SetVolume) } },
];
const Reading = z.strictObject({
  room: z.enum(["kitchen", "bedroom", "hall"]),
  on: z.boolean(),
  level: z.number().int().min(0).max(10),
});

const Timestamp = z.iso.datetime({ offset: true });
const Details = z.object({
  format: z.literal("gguf"),
  family: z.string().min(1),
  families: z.array(z.string()),
  parameter_size: z.string().min(1),
  quantization_level: z.string().min(1),
});
const ModelEntry = z.object({
  name: z.string().min(1),
  model: z.string().min(1),
  size: z.number().int().positive(),
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  modified_at: z.union([Timestamp, z.date()]),
  details: Details,
});
const ToolCall = z.object({ function: z.object({ name: z.string(), arguments: z.record(z.string(), z.unknown()) }) });
const Done = z.object({
  model: z.string(),
  created_at: z.union([Timestamp, z.date()]),
  done: z.literal(true),
  done_reason: z.enum(["stop", "length"]),
  total_duration: z.number().int().positive(),
  load_duration: z.number().int().nonnegative(),
  prompt_eval_count: z.number().int().positive(),
  prompt_eval_duration: z.number().int().nonnegative(),
  eval_count: z.number().int().positive(),
  eval_duration: z.number().int().nonnegative(),
});
const ChatDone = Done.extend({
  message: z.object({
    role: z.literal("assistant"),
    content: z.string(),
    thinking: z.string().optional(),
    tool_calls: z.array(ToolCall).optional(),
  }),
});
const ChatPart = z.object({
  model: z.string(),
  created_at: z.union([Timestamp, z.date()]),
  done: z.boolean(),
  message: z.object({ role: z.literal("assistant"), content: z.string(), thinking: z.string().optional(), tool_calls: z.array(ToolCall).optional() }),
});

let calls = 0;
function checkCalls(toolCalls) {
  assert.ok(toolCalls && toolCalls.length >= 1, "expected at least one tool call");
  for (const call of toolCalls) {
    ToolCall.parse(call);
    const schema = ARGS[call.function.name];
    assert.ok(schema, `unknown tool ${call.function.name}`);
    schema.parse(call.function.arguments);  // throws on arguments that do not match the tool
    ++calls;
  }
}

async function expectError(promise, status, words) {
  try {
    await promise;
  } catch (e) {
    assert.equal(e.name, "ResponseError", String(e));
    assert.equal(e.status_code, status);
    assert.equal(typeof e.error, "string");
    assert.ok(!e.error.includes("[object Object]"), e.error);
    assert.ok(e.error.includes(words), `"${e.error}" should say "${words}"`);
    return;
  }
  assert.fail("expected an error");
}

const { child, port } = await startProvider({ provider: args.provider, model: args.model, ctx: 2048 });
try {
  const ollama = new Ollama({ host: `http://127.0.0.1:${port}` });
  const thinking = /qwen3/.test(args.model);

  // ---- list, show, ps, version ----
  const list = z.object({ models: z.array(ModelEntry).length(1) }).parse(await ollama.list());
  const model = list.models[0].model;
  const show = z
    .object({ capabilities: z.array(z.string()), details: Details, model_info: z.record(z.string(), z.unknown()), template: z.string() })
    .parse(await ollama.show({ model }));
  assert.ok(show.capabilities.includes("completion") && show.capabilities.includes("tools"), String(show.capabilities));
  assert.equal(show.capabilities.includes("thinking"), thinking);
  assert.equal(show.model_info["general.architecture"], show.details.family);
  const ps = z.object({ models: z.array(ModelEntry.extend({ context_length: z.literal(2048) })).length(1) }).parse(await ollama.ps());
  assert.equal(ps.models[0].model, model);
  z.object({ version: z.string().min(1) }).parse(await ollama.version());

  const messages = [
    { role: "system", content: "You control a house." },
    { role: "user", content: "Turn on the kitchen light and set the volume to 3." },
  ];

  // ---- chat with tools: whole, then the result sent back the way Home Assistant sends it ----
  for (const seed of [1, 2]) {
    const r = ChatDone.parse(
      await ollama.chat({ model, messages, tools: TOOLS, tool_choice: "required", think: false, options: { seed, temperature: 1, num_predict: 200 } }),
    );
    checkCalls(r.message.tool_calls);
    const next = ChatDone.parse(
      await ollama.chat({
        model,
        messages: [...messages, r.message, ...r.message.tool_calls.map(() => ({ role: "tool", content: JSON.stringify({ ok: true }) }))],
        tools: TOOLS,
        think: false,
        options: { seed, num_predict: 16 },
      }),
    );
    assert.equal(typeof next.message.content, "string");
  }

  // ---- chat with tools, streamed: parts, then the calls, then done ----
  {
    const parts = [];
    for await (const part of await ollama.chat({ model, messages, tools: TOOLS, tool_choice: "required", stream: true, think: false, options: { seed: 3, num_predict: 200 } })) {
      parts.push(part);
    }
    assert.ok(parts.length >= 2);
    parts.slice(0, -1).forEach((p) => assert.equal(ChatPart.parse(p).done, false));
    ChatDone.parse(parts.at(-1));
    checkCalls(parts.flatMap((p) => p.message.tool_calls ?? []));
  }

  // ---- format: a JSON Schema made by zod, whole and streamed ----
  const format = z.toJSONSchema(Reading);
  for (const seed of [1, 2]) {
    const whole = ChatDone.parse(await ollama.chat({ model, messages, format, think: false, options: { seed, temperature: 0 } }));
    assert.equal(whole.done_reason, "stop");
    Reading.parse(JSON.parse(whole.message.content));
    let text = "";
    let last;
    for await (const part of await ollama.chat({ model, messages, format, stream: true, think: false, options: { seed, temperature: 0 } })) {
      if (!part.done) ChatPart.parse(part);
      text += part.message.content;
      last = part;
    }
    ChatDone.parse(last);
    assert.equal(text, whole.message.content, "the stream adds up to the whole answer");
    Reading.parse(JSON.parse(text));
  }

  // ---- think ----
  if (thinking) {
    const on = ChatDone.parse(await ollama.chat({ model, messages, think: true, options: { seed: 1, num_predict: 40 } }));
    assert.ok(on.message.thinking && on.message.thinking.length > 0, "think: true gives message.thinking");
    const off = ChatDone.parse(await ollama.chat({ model, messages, think: false, options: { seed: 1, num_predict: 20 } }));
    assert.equal(off.message.thinking, undefined);
  }

  // ---- generate ----
  {
    const g = Done.extend({ response: z.string() }).parse(
      await ollama.generate({ model, system: "Be brief.", prompt: "Say hi", think: false, options: { num_predict: 8, seed: 1 } }),
    );
    assert.ok(g.eval_count <= 8);
    let text = "";
    for await (const part of await ollama.generate({ model, prompt: "Say hi", stream: true, think: false, options: { num_predict: 8, seed: 1 } })) {
      text += part.response;
    }
    assert.equal(typeof text, "string");
  }

  // ---- errors the client can print ----
  await expectError(ollama.chat({ model, messages, format: "xml" }), 400, "format");
  await expectError(ollama.chat({ model, messages: [{ role: "user", content: "what is this?", images: ["aGVsbG8="] }] }), 400,
                    "does not support image input");
  await expectError(ollama.pull({ model: "llama3.2" }), 404, "/api/chat");

  // ---- the README's snippet, as written ----
  if (args.readme) {
    runReadmeSnippets(args.readme, "ollama snippet", 1, "http://127.0.0.1:8080", `http://127.0.0.1:${port}`);
  }

  assert.ok(calls >= 3, `validated ${calls} calls`);
  console.log(`ollama e2e OK (${args.model}): ${calls} tool calls validated with zod`);
} finally {
  child.kill("SIGTERM");
}
