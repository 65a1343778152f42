// End-to-end (issue 30): agent frameworks, unchanged, running "an agent with tools and a typed
// result" against picolm-provider: the OpenAI Agents SDK (@openai/agents: an Agent with two
// function tools and an `outputType`, through OpenAIResponsesModel and OpenAIChatCompletionsModel)
// and Mastra (@mastra/core: an Agent with two tools and `structuredOutput`, through its
// OpenAI-compatible model router on chat completions and on the Responses API). Each run goes
// through `run` / `generate` and through their streamed twins.
//
// What each run must show:
// - it completes, and the framework parses the final answer into the typed result, which
//   validates with zod;
// - every tool call the framework executed, and every call it sent back to the model, has
//   arguments that validate with zod (strict objects: no missing, extra or mistyped fields);
// - every request carried the tools and the JSON schema of the result together (tools beside
//   `response_format` / `text.format`, issue 30 item 1), at temperature 0;
// - the first request forced a call (tool_choice "required") and the last one did not: the
//   Agents SDK resets tool_choice after a call (resetToolChoice, its default), Mastra is told so per
//   step by prepareStep. The answer that ends the run is thus the model's choice under tool_choice
//   auto, and it is the schema's JSON because the grammar allows only calls or that JSON.
// - it is deterministic: temperature 0 is greedy decoding (no seed involved) and the provider's
//   answers are batch-invariant, so a second run and the streamed run give the same calls and the
//   same result as the first.
// The shared models have random weights: the text is gibberish, but every call and answer is
// grammar-valid, and the frameworks' own parsers and validators must accept every byte.
// With --readme README.md it also runs the README's agents snippets as written (host replaced).
// Usage: node agents.mjs --provider build/bin/picolm-provider --model MODEL.gguf [--readme README.md]
import assert from "node:assert/strict";
import { z } from "zod";
import { parseArgs, startProvider } from "./e2e_common/provider.mjs";
import { runReadmeSnippets, stepRunner, zodChecker } from "./e2e_common/checks.mjs";

// Mastra reports usage to PostHog unless told not to; a test makes no outside connections. Set
// before @mastra/core is loaded (run.sh exports it too).
process.env.MASTRA_TELEMETRY_DISABLED = "1";
const { default: OpenAI } = await import("openai");
const agentsSdk = await import("@openai/agents");
const { Agent: MastraAgent } = await import("@mastra/core/agent");
const { createTool } = await import("@mastra/core/tools");

const args = parseArgs("node agents.mjs --provider BIN --model MODEL [--readme README.md]");
// The Agents SDK exports traces to OpenAI's servers by default.
agentsSdk.setTracingDisabled(true);

// ---- the typed shapes (zod) ----
const SetLight = z.strictObject({ room: z.enum(["kitchen", "bedroom", "hall"]), on: z.boolean() });
const SetVolume = z.strictObject({ level: z.number().int().min(0).max(10) });
const ARGS = { set_light: SetLight, set_volume: SetVolume };
// The typed result: short, finite fields (the model is tiny and random).
const Weather = z.strictObject({ city: z.string().max(12), score: z.number().int().min(0).max(9), sunny: z.boolean() });
const PROMPT = "Turn on the kitchen light, then tell me the weather in Paris.";
const INSTRUCTIONS = "You control a smart home. Switch what you are asked to, then answer with the weather report.";
const MODEL = "picolm-test";

const zod = zodChecker();
const valid = zod.valid;

// ---- what the frameworks send: every JSON body POSTed to the provider, in order ----
// Both frameworks call globalThis.fetch when they send (the openai client is also given it
// explicitly below), so wrapping it records their requests without changing them.
const sent = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const url = typeof input === "string" ? input : (input.url ?? String(input));
  if (init?.method === "POST" && typeof init.body === "string") sent.push({ url, body: JSON.parse(init.body) });
  return realFetch(input, init);
};

// The calls a request carries back to the model (name, raw arguments string), chat or Responses.
function callsSentBack(body) {
  if (body.messages) {
    return body.messages
      .filter((m) => m.role === "assistant" && m.tool_calls)
      .flatMap((m) => m.tool_calls.map((c) => ({ name: c.function.name, args: c.function.arguments })));
  }
  return (body.input ?? []).filter((i) => i.type === "function_call").map((i) => ({ name: i.name, args: i.arguments }));
}

// The requests of one run: tools and the result's schema in each, temperature 0, a call forced
// first and not last, and the calls sent back valid and equal to the ones executed.
function checkRequests(requests, api, executed) {
  assert.ok(requests.length >= 2, `${requests.length} request(s): a call, then the answer after its result`);
  for (const { url, body } of requests) {
    assert.ok(url.endsWith(api === "responses" ? "/v1/responses" : "/v1/chat/completions"), url);
    assert.equal(body.temperature, 0, "temperature 0 in every request");
    const names = (body.tools ?? []).map((t) => t.name ?? t.function?.name).sort();
    assert.deepEqual(names, ["set_light", "set_volume"], "both tools in every request");
    const format = api === "responses" ? body.text?.format : body.response_format;
    assert.equal(format?.type, "json_schema", `the result's schema beside the tools: ${JSON.stringify(format)}`);
  }
  assert.equal(requests[0].body.tool_choice, "required", "the first turn is forced to call");
  const last = requests[requests.length - 1].body;
  assert.ok(last.tool_choice === undefined || last.tool_choice === "auto", `last tool_choice ${JSON.stringify(last.tool_choice)}`);
  const back = callsSentBack(last);
  for (const c of back) valid(ARGS[c.name], JSON.parse(c.args), `${c.name} arguments sent back`);
  assert.deepEqual(back.map((c) => [c.name, JSON.parse(c.args)]), executed, "the calls sent back are the ones executed");
}

const { step, finish } = stepRunner();

// One run = the calls executed (in order) and the typed result; equal runs give equal transcripts.
async function openaiAgentsRun(model, stream) {
  const executed = [];
  const fn = (name) =>
    agentsSdk.tool({
      name,
      description: name === "set_light" ? "Switch a light on or off" : "Set the speaker volume",
      parameters: ARGS[name],
      execute: async (input) => {
        executed.push([name, valid(ARGS[name], input, `${name} input`)]);
        return "done";
      },
    });
  const agent = new agentsSdk.Agent({
    name: "home",
    instructions: INSTRUCTIONS,
    model,
    tools: [fn("set_light"), fn("set_volume")],
    outputType: Weather,
    modelSettings: { toolChoice: "required", temperature: 0, maxTokens: 200 },
  });
  let result;
  if (stream) {
    result = await agentsSdk.run(agent, PROMPT, { maxTurns: 6, stream: true });
    const events = new Set();
    for await (const ev of result) events.add(ev.type);
    await result.completed;
    assert.equal(result.error ?? null, null, String(result.error));
    assert.ok(events.has("raw_model_stream_event") && events.has("run_item_stream_event"), [...events].join(","));
  } else {
    result = await agentsSdk.run(agent, PROMPT, { maxTurns: 6 });
  }
  const kinds = result.newItems.map((i) => i.type);
  const calls = kinds.filter((k) => k === "tool_call_item").length;
  assert.ok(calls >= 1, `no tool call: ${kinds.join(",")}`);
  assert.equal(kinds.filter((k) => k === "tool_call_output_item").length, calls, kinds.join(","));
  assert.equal(kinds[kinds.length - 1], "message_output_item", kinds.join(","));
  assert.equal(executed.length, calls);
  const output = valid(Weather, result.finalOutput, "finalOutput");
  return { executed, output };
}

async function mastraRun(agent, executed, stream) {
  const options = {
    structuredOutput: { schema: Weather },
    maxSteps: 6,
    modelSettings: { temperature: 0, maxOutputTokens: 200 },
    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "auto" }),
  };
  executed.length = 0;
  let object, steps;
  if (stream) {
    const s = await agent.stream(PROMPT, options);
    const chunks = new Set();
    for await (const c of s.fullStream) chunks.add(c.type);
    assert.ok(!chunks.has("error") && !chunks.has("tool-error"), [...chunks].join(","));
    assert.ok(chunks.has("tool-call") && chunks.has("object-result"), [...chunks].join(","));
    object = await s.object;
    steps = await s.steps;
  } else {
    const r = await agent.generate(PROMPT, options);
    assert.equal(r.error ?? null, null, String(r.error));
    object = r.object;
    steps = r.steps;
  }
  assert.ok(steps.length >= 2, `${steps.length} step(s)`);
  assert.ok(steps[0].toolCalls.length >= 1, "the first step calls");
  assert.equal(steps[steps.length - 1].toolCalls.length, 0, "the last step answers");
  assert.ok(executed.length >= 1);
  const output = valid(Weather, object, "structuredOutput object");
  return { executed: [...executed], output };
}

function mastraAgent(url, api, executed) {
  const fn = (name) =>
    createTool({
      id: name,
      description: name === "set_light" ? "Switch a light on or off" : "Set the speaker volume",
      inputSchema: ARGS[name],
      execute: async (input) => {
        executed.push([name, valid(ARGS[name], input, `${name} input`)]);
        return { ok: true };
      },
    });
  return new MastraAgent({
    id: "home",
    name: "home",
    instructions: INSTRUCTIONS,
    // Mastra's model router, OpenAI-compatible form: a "provider/model" id and the base URL.
    model: { id: `picolm/${MODEL}`, url, apiKey: "none", api },
    tools: { set_light: fn("set_light"), set_volume: fn("set_volume") },
  });
}

// Runs `once` three times (whole, whole again, streamed), checks each one's requests, and that the
// three transcripts are equal.
async function threeRuns(label, api, once) {
  const runs = [];
  for (const [i, stream] of [false, false, true].entries()) {
    await step(`${label}${["", ", again", ", streamed"][i]}`, async () => {
      const from = sent.length;
      const run = await once(stream);
      checkRequests(sent.slice(from), api, run.executed);
      runs.push(run);
    });
  }
  await step(`${label}: the three runs agree`, async () => {
    assert.equal(runs.length, 3, "a run failed");
    assert.deepEqual(runs[1], runs[0], "a second run at temperature 0 gives the same calls and result");
    assert.deepEqual(runs[2], runs[0], "the streamed run gives the same calls and result");
  });
}

const { child, port } = await startProvider({ provider: args.provider, model: args.model, ctx: 4096, extra: ["--model-id", MODEL] });
try {
  const baseURL = `http://127.0.0.1:${port}/v1`;
  const client = new OpenAI({ baseURL, apiKey: "none", fetch: globalThis.fetch });
  const agentsModels = {
    responses: new agentsSdk.OpenAIResponsesModel(client, MODEL),
    chat: new agentsSdk.OpenAIChatCompletionsModel(client, MODEL),
  };
  for (const [api, model] of Object.entries(agentsModels)) {
    const label = `@openai/agents Agent with tools and outputType (${model.constructor.name})`;
    await threeRuns(label, api, (stream) => openaiAgentsRun(model, stream));
  }
  for (const api of ["chat", "responses"]) {
    const executed = [];
    const agent = mastraAgent(baseURL, api, executed);
    await threeRuns(`Mastra Agent with tools and structuredOutput (${api})`, api, (stream) => mastraRun(agent, executed, stream));
  }
  if (args.readme) {
    await step("README agents snippets run as written", async () => {
      // One snippet per framework; each prints the typed result, the framework's parsed object.
      const printed = runReadmeSnippets(args.readme, "agents snippets", 2, "http://127.0.0.1:8080/v1", baseURL);
      for (const out of printed) assert.match(out, /city: '.*',\s+celsius: -?\d+/, `a snippet printed ${out}`);
    });
  }
} finally {
  child.kill("SIGTERM");
}
finish(`${zod.count()} values validated with zod`);
