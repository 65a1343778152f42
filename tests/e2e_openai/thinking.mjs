// End-to-end, thinking models (issue 19): picolm-provider with a Qwen3 model, driven by the official
// `openai` npm client with PicoClaw-like tools, the way PicoClaw calls it (reads reasoning_content,
// shows content).
//
//   A. thinking on and off, streaming and not, tool_choice auto and required: reasoning never
//      appears in content (no tags, no reasoning text), reasoning_content is there exactly when
//      thinking is on, every returned call validates (python3-jsonschema).
//   B. tool_choice required, thinking on and off, max_tokens from the minimum up to 400: the
//      thinking budget closes </think> in time (reasoning_tokens within the budget, the rest of
//      max_tokens left to the answer; this provider's part) and every reply holds a complete valid
//      call (needs issue 13's closing mode as well). The two parts are counted and reported apart;
//      the second fails the test only once the provider announces the closing mode (it answers 400
//      up front for a max_tokens below the shortest call), so a branch without it reports
//      "PENDING" instead of failing. PICOLM_E2E_STRICT=1 fails on it regardless.
//
// Usage: node thinking.mjs --provider BIN --model QWEN3.gguf --tools picoclaw-like-tools.json
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { parseArgs, startProvider } from "./e2e_common/provider.mjs";
import { callRecord, validateJsonSchema } from "./e2e_common/checks.mjs";

const args = parseArgs("node thinking.mjs --provider BIN --model MODEL.gguf --tools TOOLS.json", ["provider", "model", "tools"]);
const TOOLS = JSON.parse(readFileSync(args.tools, "utf8"));
assert.ok(Array.isArray(TOOLS) && TOOLS.length > 0, "the tool list must be a non-empty array");

// The documented default budget (reasoning.h): medium = half of max_tokens; + the forced "\n</think>".
const SHARE = { medium: 0.5, low: 0.25, high: 0.75 };
const CLOSE_TOKENS = 4;

const checked = [];
const recordCall = (call) => checked.push(callRecord(TOOLS, call));

// One request, streamed or not, reduced to the same shape.
async function ask(client, req, stream) {
  if (!stream) {
    const r = await client.chat.completions.create(req);
    const m = r.choices[0].message;
    return {
      content: m.content ?? "",
      reasoning: m.reasoning_content,
      calls: m.tool_calls ?? [],
      finish: r.choices[0].finish_reason,
      completion_tokens: r.usage.completion_tokens,
      reasoning_tokens: r.usage.completion_tokens_details?.reasoning_tokens ?? 0,
    };
  }
  const s = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const out = { content: "", reasoning: undefined, calls: [], finish: null, completion_tokens: 0, reasoning_tokens: 0 };
  for await (const chunk of s) {
    if (chunk.usage) {
      out.completion_tokens = chunk.usage.completion_tokens;
      out.reasoning_tokens = chunk.usage.completion_tokens_details?.reasoning_tokens ?? 0;
    }
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.delta?.content) out.content += ch.delta.content;
    if (typeof ch.delta?.reasoning_content === "string") out.reasoning = (out.reasoning ?? "") + ch.delta.reasoning_content;
    for (const d of ch.delta?.tool_calls ?? []) {
      out.calls[d.index] ??= { id: "", type: "function", function: { name: "", arguments: "" } };
      if (d.id) out.calls[d.index].id = d.id;
      if (d.function?.name) out.calls[d.index].function.name += d.function.name;
      if (d.function?.arguments) out.calls[d.index].function.arguments += d.function.arguments;
    }
    if (ch.finish_reason) out.finish = ch.finish_reason;
  }
  return out;
}

function assertReasoningNotInContent(r, label) {
  assert.ok(!r.content.includes("<think>") && !r.content.includes("</think>"), `${label}: a think tag in content: ${r.content}`);
  if (r.reasoning && r.reasoning.length >= 12 && r.content) {
    assert.ok(!r.content.includes(r.reasoning.slice(0, 12)), `${label}: reasoning text in content`);
  }
}

const messages = [
  { role: "system", content: "You are PicoClaw, a personal assistant. Use the tools when they help." },
  { role: "user", content: "What's the weather in Lisbon, and save it to notes/weather.txt?" },
];
const MODES = [
  { label: "thinking on", extra: {}, on: true, share: SHARE.medium },
  { label: "thinking off", extra: { chat_template_kwargs: { enable_thinking: false } }, on: false, share: 0 },
];

async function main() {
  // The PicoClaw tool list is ~1.8k prompt tokens: a context of 4096 leaves room for 400 more.
  const { child, port } = await startProvider({ provider: args.provider, model: args.model, ctx: 4096 });
  let failed = false;
  try {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", timeout: 300000, maxRetries: 0 });
    const model = (await client.models.list()).data[0].id;

    // ---- A ----
    let a = 0;
    for (const mode of MODES) {
      for (const stream of [false, true]) {
        for (const tool_choice of ["auto", "required"]) {
          for (const seed of [1, 2]) {
            const label = `A ${mode.label} ${stream ? "stream" : "whole"} ${tool_choice} seed ${seed}`;
            const req = { model, messages, tools: TOOLS, tool_choice, max_tokens: 400, seed, ...mode.extra };
            const r = await ask(client, req, stream);
            assertReasoningNotInContent(r, label);
            if (mode.on) {
              assert.ok(r.reasoning && r.reasoning.length > 0, `${label}: no reasoning_content`);
              assert.ok(r.reasoning_tokens > 0 && r.reasoning_tokens <= mode.share * 400 + CLOSE_TOKENS, `${label}: reasoning_tokens ${r.reasoning_tokens}`);
            } else {
              assert.equal(r.reasoning, undefined, `${label}: reasoning_content with thinking off`);
              assert.equal(r.reasoning_tokens, 0);
            }
            if (tool_choice === "required") assert.equal(r.content, "", `${label}: content next to a required call`);
            // Calls that come back are complete and valid; whether a required one always comes is part B.
            r.calls.forEach(recordCall);
            ++a;
          }
        }
      }
    }
    console.log(`A: ${a} replies, reasoning never in content, reasoning_content exactly when thinking is on`);

    // ---- B ----
    // The minimum max_tokens: issue 13's provider answers 400 up front below it and names it.
    let minimum = 16;
    let closingMode = false;
    try {
      await client.chat.completions.create({ model, messages, tools: TOOLS, tool_choice: "required", max_tokens: 1 });
    } catch (e) {
      if (e.status === 400) {
        // "... set max_tokens to at least N" (the client prefixes the status to e.message, so the
        // number is taken from the error body, after "at least" where it says so, else the last one).
        const text = String(e.error?.message ?? e.message);
        const n = text.match(/at least (\d+)/)?.[1] ?? (text.match(/\d+/g) ?? []).at(-1);
        if (n !== undefined && Number(n) > 1) {
          minimum = Number(n);
          closingMode = true;
        }
      }
    }
    const sweep = [...new Set([0, 1, 2, 3, 5, 8, 13, 21, 34].map((d) => minimum + d).concat([80, 120, 200, 300, 400]))]
      .filter((m) => m <= 400)
      .sort((x, y) => x - y);
    let closedInTime = 0, thinkingReplies = 0, complete = 0, total = 0;
    const incomplete = [];
    for (const mode of MODES) {
      for (const max_tokens of sweep) {
        for (const seed of [3, 4]) {
          const stream = seed % 2 === 0;
          const label = `B ${mode.label} max_tokens ${max_tokens} seed ${seed}${stream ? " stream" : ""}`;
          const req = { model, messages, tools: TOOLS, tool_choice: "required", max_tokens, seed, ...mode.extra };
          const r = await ask(client, req, stream);
          assertReasoningNotInContent(r, label);
          assert.ok(r.completion_tokens <= max_tokens, `${label}: ${r.completion_tokens} tokens`);
          if (mode.on) {
            ++thinkingReplies;
            // The provider's part: thinking stopped within its budget, and (when the provider names
            // the shortest answer) early enough to leave at least that much to the answer.
            const inBudget = r.reasoning_tokens <= Math.floor(mode.share * max_tokens) + CLOSE_TOKENS;
            const roomLeft = !closingMode || max_tokens - r.reasoning_tokens >= minimum;
            if (inBudget && roomLeft) ++closedInTime;
            else console.log(`${label}: thinking not closed in time (${r.reasoning_tokens} reasoning tokens)`);
          }
          ++total;
          if (r.finish === "tool_calls" && r.calls.length >= 1) {
            ++complete;
            r.calls.forEach(recordCall);
          } else {
            incomplete.push(`${label}: finish ${r.finish}, ${r.calls.length} calls, ${r.completion_tokens} tokens (${r.reasoning_tokens} reasoning)`);
          }
        }
      }
    }
    console.log(`B: minimum max_tokens ${minimum}${closingMode ? " (named by the provider)" : " (assumed)"}`);
    console.log(`B: max_tokens ${sweep.join(",")}; thinking closed in time ${closedInTime}/${thinkingReplies} (thinking budget, this provider)`);
    console.log(`B: complete valid call ${complete}/${total} (needs issue 13's closing mode: ${closingMode ? "present" : "NOT present"})`);
    if (closedInTime !== thinkingReplies) failed = true;
    if (complete !== total) {
      incomplete.slice(0, 8).forEach((l) => console.log("  " + l));
      if (closingMode || process.env.PICOLM_E2E_STRICT === "1") {
        console.log("FAIL: replies without a complete call although the closing mode is present");
        failed = true;
      } else {
        console.log("PENDING: incomplete calls at small max_tokens are issue 13's part (closing mode not merged here)");
      }
    }
    if (validateJsonSchema(checked, "tool calls") !== 0) failed = true;
    console.log(`thinking e2e ${failed ? "FAILED" : "ok"}: ${args.model} (${checked.length} tool calls validated)`);
  } finally {
    child.kill("SIGTERM");
  }
  if (failed) process.exit(1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
