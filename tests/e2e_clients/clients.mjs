// End-to-end (issue 21): the three most used JavaScript clients against picolm-provider, unchanged,
// as their documentation shows them: the Vercel AI SDK (Responses API through @ai-sdk/openai, chat
// completions through @ai-sdk/openai-compatible and .chat()), the openai client's Responses API
// (function tool round trip by items and by previous_response_id, streaming helper) and LangChain
// JS (bindTools, withStructuredOutput, chat completions and Responses API); generateText with tools
// and Output.object (the schema applies to the text answer beside the tools). Every tool input and
// structured output is validated with zod itself, against the schema the client sent.
// The model has random weights: the text is gibberish, but the grammar makes every call and object
// valid, and the clients' own parsers must accept every byte the server sends.
// Usage: node clients.mjs --provider build/bin/picolm-provider --model qwen2-bpe-q4km.gguf
import assert from "node:assert/strict";
import { generateText, streamText, generateObject, tool, stepCountIs, Output } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import OpenAI from "openai";
import { ChatOpenAI } from "@langchain/openai";
import { z } from "zod";
import { parseArgs, startProvider } from "./e2e_common/provider.mjs";
import { runReadmeSnippets, stepRunner, zodChecker } from "./e2e_common/checks.mjs";

const args = parseArgs("node clients.mjs --provider BIN --model MODEL [--readme README.md]");

// ---- schemas (zod 4): what the clients send as JSON Schema, and what validates the results ----
const lightInput = z.object({ room: z.enum(["kitchen", "bedroom", "hall"]), on: z.boolean() });
const volumeInput = z.object({ level: z.number().int().min(0).max(10) });
// A record (zod 4 emits propertyNames), a decimal step (money), a union (anyOf).
// A typed result beside tools (issue 30 item 1): short, finite fields.
const weather = z.object({ city: z.string().max(12), score: z.number().int().min(0).max(9), sunny: z.boolean() });
const order = z.object({
  prices: z.record(z.string().max(6), z.number().multipleOf(0.01).min(0).max(1000)),
  total: z.number().multipleOf(0.01).min(0).max(100000),
  payment: z.union([z.literal("cash"), z.object({ card: z.string().max(8) })]),
});

const zod = zodChecker();
const valid = zod.valid;

const { step, finish } = stepRunner();
const { child, port } = await startProvider({ provider: args.provider, model: args.model, ctx: 4096, extra: ["--model-id", "picolm-test"] });
try {
  const baseURL = `http://127.0.0.1:${port}/v1`;
  const MODEL = "picolm-test";

  // ---------------------------------------------------------------- Vercel AI SDK
  const openaiProvider = createOpenAI({ baseURL, apiKey: "none" }); // provider(model) = Responses API
  const compatible = createOpenAICompatible({
    name: "picolm",
    baseURL,
    apiKey: "none",
    supportsStructuredOutputs: true,
    includeUsage: true, // stream_options.include_usage: streamed usage (this provider asks only when told)
  });
  const models = {
    "responses (@ai-sdk/openai)": openaiProvider(MODEL),
    "chat (@ai-sdk/openai .chat)": openaiProvider.chat(MODEL),
    "chat (@ai-sdk/openai-compatible)": compatible.chatModel(MODEL),
  };
  const executed = [];
  const tools = {
    set_light: tool({
      description: "Switch a light on or off",
      inputSchema: lightInput,
      execute: async (input) => {
        executed.push(valid(lightInput, input, "set_light input"));
        return { ok: true };
      },
    }),
    set_volume: tool({
      description: "Set the speaker volume",
      inputSchema: volumeInput,
      execute: async (input) => {
        executed.push(valid(volumeInput, input, "set_volume input"));
        return { ok: true };
      },
    }),
  };

  for (const [label, model] of Object.entries(models)) {
    await step(`AI SDK generateText, plain (${label})`, async () => {
      const r = await generateText({ model, prompt: "Say hello", maxOutputTokens: 12, temperature: 0 });
      assert.equal(typeof r.text, "string");
      assert.ok(r.usage.inputTokens > 0 && r.usage.outputTokens > 0, JSON.stringify(r.usage));
      assert.ok(["stop", "length"].includes(r.finishReason), r.finishReason);
    });
    await step(`AI SDK generateText with tools, two steps (${label})`, async () => {
      executed.length = 0;
      const r = await generateText({
        model,
        prompt: "Turn on the kitchen light",
        tools,
        toolChoice: "required",
        stopWhen: stepCountIs(2),
        maxOutputTokens: 200,
        seed: 3,
      });
      assert.equal(r.steps.length, 2, "the tool result went back to the model for a second step");
      for (const s of r.steps) {
        assert.ok(s.toolCalls.length >= 1, "toolChoice required gives a call");
        for (const c of s.toolCalls) assert.ok(["set_light", "set_volume"].includes(c.toolName));
        const errors = s.content.filter((p) => p.type === "tool-error");
        assert.equal(errors.length, 0, JSON.stringify(errors));
      }
      assert.ok(executed.length >= 2);
    });
    await step(`AI SDK generateText, named tool choice gives one call (${label})`, async () => {
      const r = await generateText({
        model,
        prompt: "Volume",
        tools,
        toolChoice: { type: "tool", toolName: "set_volume" },
        maxOutputTokens: 200,
        seed: 5,
      });
      assert.equal(r.toolCalls.length, 1);
      assert.equal(r.toolCalls[0].toolName, "set_volume");
      valid(volumeInput, r.toolCalls[0].input, "named call input");
    });
    await step(`AI SDK streamText with tools (${label})`, async () => {
      const r = streamText({
        model,
        prompt: "Dim the hall",
        tools,
        toolChoice: "required",
        stopWhen: stepCountIs(2),
        maxOutputTokens: 200,
        seed: 7,
      });
      const parts = [];
      for await (const p of r.fullStream) parts.push(p.type);
      const errors = parts.filter((t) => t === "error" || t === "tool-error");
      assert.equal(errors.length, 0, parts.join(","));
      const steps = await r.steps;
      assert.equal(steps.length, 2);
      for (const s of steps) {
        assert.ok(s.toolCalls.length >= 1);
        for (const c of s.toolCalls) valid(c.toolName === "set_light" ? lightInput : volumeInput, c.input, "streamed call");
      }
    });
    await step(`AI SDK streamText, text (${label})`, async () => {
      const r = streamText({ model, prompt: "Tell me a story", maxOutputTokens: 16, temperature: 0 });
      let text = "";
      for await (const d of r.textStream) text += d;
      assert.equal(text, await r.text);
      assert.ok((await r.usage).outputTokens > 0);
    });
    await step(`AI SDK generateText with tools and Output.object (${label})`, async () => {
      // The model may call tools (validated, executed) or answer; an answer is the typed object. A
      // run whose last step is still a call (the step limit) has no output: at least one must end
      // with the object, and every one that does must validate.
      let outputs = 0;
      for (const seed of [1, 2, 3, 4, 5, 6]) {
        const r = await generateText({
          model,
          prompt: "Weather in Paris? You may switch a light first.",
          tools,
          output: Output.object({ schema: weather }),
          stopWhen: stepCountIs(3),
          maxOutputTokens: 200,
          temperature: 1,
          seed,
        });
        for (const s of r.steps) {
          const errors = s.content.filter((p) => p.type === "tool-error");
          assert.equal(errors.length, 0, JSON.stringify(errors));
        }
        const last = r.steps[r.steps.length - 1];
        if (last.toolCalls.length > 0) continue;
        valid(weather, r.output, `Output.object seed ${seed}`);
        valid(weather, JSON.parse(last.text), `the answer text, seed ${seed}`);
        outputs++;
      }
      assert.ok(outputs > 0, "no run ended with the typed answer");
    });
    await step(`AI SDK generateObject with record, multipleOf(0.01), union (${label})`, async () => {
      for (const seed of [1, 2]) {
        const r = await generateObject({ model, schema: order, prompt: "An order", maxOutputTokens: 300, seed });
        valid(order, r.object, "generateObject");
      }
    });
  }

  // ---------------------------------------------------------------- openai: Responses API
  const client = new OpenAI({ baseURL, apiKey: "none" });
  const flatTools = [
    {
      type: "function",
      name: "set_volume",
      description: "Set the speaker volume",
      parameters: z.toJSONSchema(volumeInput),
      strict: true,
    },
  ];
  await step("openai models.list / models.retrieve", async () => {
    const list = await client.models.list();
    assert.equal(list.data[0].id, MODEL);
    const m = await client.models.retrieve(MODEL);
    assert.equal(m.id, MODEL);
    await assert.rejects(client.models.retrieve("gpt-4o"), (e) => e.status === 404);
  });
  await step("openai responses.create: function tool round trip by items (function_call_output)", async () => {
    const first = await client.responses.create({
      model: MODEL,
      input: [{ role: "user", content: "Set the volume to 3" }],
      tools: flatTools,
      tool_choice: "required",
      max_output_tokens: 200,
    });
    const calls = first.output.filter((i) => i.type === "function_call");
    assert.ok(calls.length >= 1);
    for (const c of calls) valid(volumeInput, JSON.parse(c.arguments), "responses call");
    const second = await client.responses.create({
      model: MODEL,
      input: [
        { role: "user", content: "Set the volume to 3" },
        ...first.output,
        ...calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: JSON.stringify({ ok: true }) })),
      ],
      tools: flatTools,
      max_output_tokens: 24,
    });
    assert.equal(second.object, "response");
    assert.ok(second.usage.input_tokens > first.usage.input_tokens);
    assert.equal(typeof second.output_text, "string");
  });
  await step("openai responses.create: round trip by previous_response_id", async () => {
    const first = await client.responses.create({
      model: MODEL,
      input: "Set the volume",
      tools: flatTools,
      tool_choice: { type: "function", name: "set_volume" },
      max_output_tokens: 200,
    });
    const calls = first.output.filter((i) => i.type === "function_call");
    assert.equal(calls.length, 1, "a named tool_choice gives one call");
    // Tools are not carried over by previous_response_id (as at OpenAI): sent again.
    const second = await client.responses.create({
      model: MODEL,
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: calls[0].call_id, output: "done" }],
      tools: flatTools,
      max_output_tokens: 16,
    });
    assert.equal(second.previous_response_id, first.id);
    assert.ok(second.usage.input_tokens > first.usage.input_tokens);
  });
  await step("openai responses.stream: events accepted by the client's own accumulator", async () => {
    const stream = client.responses.stream({
      model: MODEL,
      input: "Set the volume",
      tools: flatTools,
      tool_choice: "required",
      max_output_tokens: 200,
    });
    const types = new Set();
    for await (const ev of stream) types.add(ev.type);
    const final = await stream.finalResponse();
    for (const t of ["response.created", "response.output_item.added", "response.function_call_arguments.delta", "response.completed"]) {
      assert.ok(types.has(t), `missing ${t}: ${[...types].join(",")}`);
    }
    const calls = final.output.filter((i) => i.type === "function_call");
    assert.ok(calls.length >= 1);
    for (const c of calls) valid(volumeInput, JSON.parse(c.arguments), "streamed responses call");
    const text = client.responses.stream({ model: MODEL, input: "Hello", max_output_tokens: 12 });
    let deltas = "";
    text.on("response.output_text.delta", (e) => (deltas += e.delta));
    const done = await text.finalResponse();
    assert.equal(done.output_text, deltas);
  });
  await step("openai chat.completions with logprobs", async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 8,
      logprobs: true,
      top_logprobs: 3,
    });
    const content = r.choices[0].logprobs.content;
    assert.ok(content.length > 0);
    for (const t of content) {
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 3);
      assert.ok(Array.isArray(t.bytes));
    }
  });

  // ---------------------------------------------------------------- the README's snippets
  await step("README Clients snippets run as written", async () => {
    assert.ok(args.readme, "--readme README.md is required");
    // One snippet per library.
    runReadmeSnippets(args.readme, "clients snippets", 3, "http://127.0.0.1:8080/v1", baseURL);
  });

  // ---------------------------------------------------------------- LangChain JS
  for (const useResponsesApi of [false, true]) {
    const label = useResponsesApi ? "Responses API" : "chat completions";
    const llm = new ChatOpenAI({ model: MODEL, apiKey: "none", configuration: { baseURL }, useResponsesApi, maxTokens: 300 });
    await step(`LangChain bindTools (${label})`, async () => {
      // LangChain 1.5 drops a string tool_choice "required"/"any" on its Responses path (its
      // formatter returns only objects there), so name the tool: that works on both paths.
      const withTools = llm.bindTools(
        [
          { name: "set_light", description: "Switch a light", schema: lightInput },
          { name: "set_volume", description: "Set the volume", schema: volumeInput },
        ],
        { tool_choice: useResponsesApi ? "set_light" : "required" },
      );
      const msg = await withTools.invoke("Turn on the hall light");
      assert.ok(msg.tool_calls.length >= 1, JSON.stringify(msg));
      for (const c of msg.tool_calls) valid(c.name === "set_light" ? lightInput : volumeInput, c.args, "LangChain tool call");
    });
    await step(`LangChain withStructuredOutput (${label})`, async () => {
      const structured = llm.withStructuredOutput(order, { name: "order", method: "jsonSchema" });
      const obj = await structured.invoke("An order");
      valid(order, obj, "LangChain structured output");
    });
  }
} finally {
  child.kill("SIGTERM");
}
finish(`${zod.count()} values validated with zod`);
