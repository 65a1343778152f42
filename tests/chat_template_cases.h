// The conversations and the oracle shared by the chat-template tests (test_chat_template.cpp for
// the hand-written renderers, test_jinja.cpp for the Jinja interpreter): the fixed conversation
// set, the random-conversation generator, the templates with the BOS/EOS of their models, and
// tests/render_jinja.py run once over a batch of cases.
#pragma once
#include <catch2/catch.hpp>

#include <simdjson.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "chat_template.h"
#include "python_oracle.h"

namespace chat_test {

using namespace picolm;

inline const std::string kShared = PICOLM_SHARED_DIR;
inline const std::string kTemplates = kShared + "/templates/";

using test_oracle::json_string;
using test_oracle::read_file;

inline ChatMessage msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}
inline ChatMessage call_msg(std::string content, std::vector<ToolCall> calls) {
  ChatMessage m = msg("assistant", std::move(content));
  m.tool_calls = std::move(calls);
  return m;
}
inline ChatMessage tool_msg(std::string id, std::string content) {
  ChatMessage m = msg("tool", std::move(content));
  m.tool_call_id = std::move(id);
  return m;
}

// The message dicts as an OpenAI client sends them (the convention chat_template.h states; Qwen3
// gets "" for a null content).
inline void json_message(const ChatMessage& m, std::string& out, TemplateFamily family) {
  out += "{\"role\": ";
  json_string(m.role, out);
  out += ", \"content\": ";
  if (m.role == "assistant" && !m.tool_calls.empty() && m.content.empty() && family != TemplateFamily::Qwen3) out += "null";
  else json_string(m.content, out);
  if (m.reasoning_content) {
    out += ", \"reasoning_content\": ";
    json_string(*m.reasoning_content, out);
  }
  if (!m.tool_calls.empty()) {
    out += ", \"tool_calls\": [";
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      const auto& tc = m.tool_calls[i];
      if (i) out += ", ";
      out += "{\"id\": ";
      json_string(tc.id, out);
      out += ", \"type\": \"function\", \"function\": {\"name\": ";
      json_string(tc.name, out);
      out += ", \"arguments\": ";
      json_string(tc.arguments_json, out);
      out += "}}";
    }
    out += "]";
  }
  if (!m.tool_call_id.empty()) {
    out += ", \"tool_call_id\": ";
    json_string(m.tool_call_id, out);
  }
  if (!m.name.empty()) {
    out += ", \"name\": ";
    json_string(m.name, out);
  }
  out += "}";
}

struct Case {
  std::string label;
  TemplateFamily family;
  std::string template_file;  // or
  std::string template_text;
  std::vector<ChatMessage> messages;
  RenderOptions options;
  bool pass_date = true;  // give date_string to the template (else it uses its own default)
};

inline std::string cases_json(const std::vector<Case>& cases) {
  std::string out = "[";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (i) out += ",\n";
    out += "{";
    if (!c.template_file.empty()) {
      out += "\"template_file\": ";
      json_string(c.template_file, out);
    } else {
      out += "\"template\": ";
      json_string(c.template_text, out);
    }
    out += ", \"messages\": [";
    for (size_t k = 0; k < c.messages.size(); ++k) {
      if (k) out += ", ";
      json_message(c.messages[k], out, c.family);
    }
    out += "], \"tools\": ";
    out += c.options.tools_json.empty() ? "null" : c.options.tools_json;
    out += ", \"arguments_as_string\": ";
    out += c.family == TemplateFamily::DeepSeekR1 ? "true" : "false";
    out += ", \"add_generation_prompt\": ";
    out += c.options.add_generation_prompt ? "true" : "false";
    out += ", \"bos_token\": ";
    json_string(c.options.bos_token, out);
    out += ", \"eos_token\": ";
    json_string(c.options.eos_token, out);
    if (c.pass_date) {
      out += ", \"date_string\": ";
      json_string(c.options.date_string, out);
    }
    if (c.options.enable_thinking) out += *c.options.enable_thinking ? ", \"enable_thinking\": true" : ", \"enable_thinking\": false";
    if (c.family == TemplateFamily::Lfm2 || c.family == TemplateFamily::Lfm25) out += ", \"calls_in_content\": \"python\"";
    // Phi-4-mini: calls in content as a tagged JSON array, the tools in the system message.
    if (c.family == TemplateFamily::Phi4Mini)
      out += ", \"calls_in_content\": \"json\", \"call_tags\": [\"<|tool_call|>\", \"<|/tool_call|>\"], \"tools_in_system_message\": true";
    // Gemma 4: the model's turn llama.cpp opens after a prompt the template left closed.
    if (c.family == TemplateFamily::Gemma4) out += ", \"reopen_turn\": [\"<turn|>\\n\", \"<|turn>model\\n\"]";
    out += "}";
  }
  out += "]\n";
  return out;
}

struct OracleAnswer {
  bool ok = false;
  std::string text;  // the render, or the error message
};

// Runs tests/render_jinja.py once over a JSON list of `count` cases (its input format);
// `fixed_now` >= 0: strftime_now renders that UTC time (seconds since the epoch) instead of the
// local time now.
inline std::vector<OracleAnswer> run_oracle_json(const std::string& cases_json_text, size_t count, long long fixed_now = -1) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "picolm_chat_template_" + std::to_string(::getpid());
  const std::string in_path = (dir / (stem + ".in.json")).string();
  const std::string out_path = (dir / (stem + ".out")).string();
  {
    std::ofstream in(in_path, std::ios::binary);
    in << cases_json_text;
    REQUIRE(in.good());
  }
  const std::string now_arg = fixed_now >= 0 ? " --now " + std::to_string(fixed_now) : "";
  const std::string cmd = std::string("/usr/bin/python3 ") + PICOLM_SOURCE_DIR + "/tests/render_jinja.py" + now_arg + " < " + in_path + " > " + out_path;
  const int rc = std::system(cmd.c_str());
  std::string out = read_file(out_path);
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
  REQUIRE(rc == 0);

  std::vector<OracleAnswer> answers;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t sp = out.find(' ', pos);
    size_t nl = out.find('\n', pos);
    REQUIRE(sp != std::string::npos);
    REQUIRE(nl != std::string::npos);
    OracleAnswer a;
    a.ok = out.compare(pos, sp - pos, "OK") == 0;
    size_t n = std::stoul(out.substr(sp + 1, nl - sp - 1));
    a.text = out.substr(nl + 1, n);
    pos = nl + 1 + n + 1;
    answers.push_back(std::move(a));
  }
  REQUIRE(answers.size() == count);
  return answers;
}

// Runs tests/render_jinja.py once over all cases (see run_oracle_json).
inline std::vector<OracleAnswer> run_oracle(const std::vector<Case>& cases, long long fixed_now = -1) {
  return run_oracle_json(cases_json(cases), cases.size(), fixed_now);
}

// ---------------------------------------------------------------------------------------------
// Test data.

// Key order deliberately unsorted; numbers in every notation Python prints differently from its
// input; characters jinja2's own tojson would HTML-escape; \u escapes, a surrogate pair, a
// control character, U+2028.
inline const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather <b>&'\" in a city. Temp\u00e9rature \ud83d\ude00 \u0001\u2028 a\/b",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "  The city, e.g. Paris \n"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
      "days": {"type": "integer", "minimum": 1, "maximum": 10, "default": -0},
      "threshold": {"type": "number", "default": 0.5, "examples": [1e-7, 1E5, 2.50, 1e16, 1e15, 123456789012345678901234567890, 0.0001, 0.00001, -1.5e-300, 3.141592653589793]},
      "tags": {"type": "array", "items": {"type": "string"}, "description": "tags"},
      "opts": {"type": "object", "additionalProperties": {"type": "boolean"}, "description": "flags"},
      "either": {"type": ["string", "integer"], "description": "either"},
      "nothing": {"type": "object", "properties": {}, "description": "empty object", "x": null, "y": true}
    }, "required": ["location"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}
])";

inline const char* kArgsParis = R"({"location": "Paris", "unit": "celsius", "days": 3, "threshold": 1.50, "tags": ["a", "é"], "z": null})";
inline const char* kArgsTokyo = "{\"location\":\"Tokyo \\\"JP\\\"\\n\",\"unit\":\"fahrenheit\"}";

inline std::vector<std::pair<std::string, std::vector<ChatMessage>>> conversations() {
  std::vector<std::pair<std::string, std::vector<ChatMessage>>> v;
  v.push_back({"single user", {msg("user", "Hello")}});
  v.push_back({"system + user", {msg("system", "You are a helpful assistant."), msg("user", "Hi é 😀! What is 2+2?")}});
  v.push_back({"multi-turn with system",
               {msg("system", "Be brief."), msg("user", "Hello"), msg("assistant", "Hi there!"), msg("user", "Tell me a story.")}});
  v.push_back({"multi-turn without system", {msg("user", "Hello"), msg("assistant", "Hi there!"), msg("user", "Tell me a story.")}});
  v.push_back({"whitespace and specials",
               {msg("system", "  padded system \n"), msg("user", "\n  quotes \" back\\slash <tag> &amp; {\"json\": 1}\t "),
                msg("assistant", " <think>hmm</think> ok \u00a0"), msg("user", "line1\nline2\u3000")}});
  v.push_back({"ends with assistant", {msg("user", "Hello"), msg("assistant", "Hi there!")}});
  v.push_back({"tool call round trip with system",
               {msg("system", "You are a weather bot."), msg("user", "What's the weather in Paris?"),
                call_msg("", {{"call00001", "get_weather", kArgsParis}}), tool_msg("call00001", "{\"temp\": 20, \"unit\": \"C\"}"),
                msg("assistant", "It is 20 C in Paris."), msg("user", "Thanks!")}});
  v.push_back({"tool call round trip without system",
               {msg("user", "What's the weather in Paris?"), call_msg("", {{"call00001", "get_weather", kArgsParis}}),
                tool_msg("call00001", "20 degrees")}});
  v.push_back({"parallel tool calls",
               {msg("user", "Weather in Paris and Tokyo?"),
                call_msg("", {{"call00001", "get_weather", kArgsParis}, {"call00002", "get_weather", kArgsTokyo}}),
                tool_msg("call00001", "{\"temp\": 20}"), tool_msg("call00002", "{\"temp\": 68}")}});
  v.push_back({"tool call with content then answer",
               {msg("user", "Time?"), call_msg("Let me check.", {{"callABCDE", "get_time", "{}"}}), tool_msg("callABCDE", "12:00"),
                msg("assistant", "<think>ok</think>It is noon."), msg("user", "And the weather in Tokyo?"),
                call_msg("", {{"call00003", "get_weather", kArgsTokyo}}), tool_msg("call00003", "sunny"),
                msg("assistant", "Sunny."), msg("user", "Bye")}});
  v.push_back({"empty", {}});
  {
    // Reasoning in the history: a multi-step tool loop after the last user query (Qwen3 keeps its
    // reasoning there), reasoning_content given as a field, think blocks inside content.
    ChatMessage think_call = call_msg("<think>\nI should look it up.\n</think>\n\n", {{"call00001", "get_weather", kArgsParis}});
    ChatMessage with_field = call_msg("", {{"call00002", "get_time", "{}"}});
    with_field.reasoning_content = "\nTime matters too.\n";
    ChatMessage answer = msg("assistant", "It is 20 C.");
    answer.reasoning_content = "Both known.";
    v.push_back({"reasoning in a tool loop",
                 {msg("system", "You are a weather bot."), msg("user", "Weather in Paris?"), think_call,
                  tool_msg("call00001", "{\"temp\": 20}"), with_field, tool_msg("call00002", "12:00"), answer}});
    ChatMessage old = msg("assistant", "<think>old reasoning</think>\n\nOld answer.");
    v.push_back({"reasoning before the last query", {msg("user", "Q1"), old, msg("user", "Q2")}});
    ChatMessage empty_reasoning = msg("assistant", "Plain.");
    empty_reasoning.reasoning_content = "";
    v.push_back({"reasoning after the last query", {msg("user", "Q1"), empty_reasoning}});
  }
  v.push_back({"system think flag", {msg("system", "Be brief. /think"), msg("user", "Hi"), msg("assistant", "\n\nHello")}});
  v.push_back({"system no_think flag", {msg("system", "/no_think  "), msg("user", "Hi")}});
  {
    ChatMessage named = msg("user", "I am Bob.");
    named.name = "bob";
    v.push_back({"system in the middle and a named user",
                 {msg("user", "Hello"), msg("assistant", "Hi!"), msg("system", "Now answer in French."), named}});
  }
  v.push_back({"leading tool result", {tool_msg("call00009", "orphan"), msg("user", "Hello")}});
  v.push_back({"only a system message", {msg("system", "You are terse.")}});
  v.push_back({"ipython and developer roles",
               {msg("developer", "Dev note."), msg("user", "Run it"), msg("ipython", "{\"out\": 1}"), msg("assistant", "Done.")}});
  return v;
}

struct FamilyTemplates {
  TemplateFamily family;
  std::vector<std::string> files;  // shared template files (or inline text, see below)
  std::string bos, eos;
};

// Gemma 3's template (google/gemma-3-*-it tokenizer_config.json, as llama.cpp and HF copies show
// it); not among the shared template files.
inline const char* kGemma3Template =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n";

inline const char* kChatMLTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

inline std::string golden_template(const std::string& file) {
  simdjson::dom::parser parser;
  simdjson::padded_string json = simdjson::padded_string(read_file(kShared + "/golden/" + file));
  simdjson::dom::element doc;
  REQUIRE(parser.parse(json).get(doc) == simdjson::SUCCESS);
  std::string_view t;
  REQUIRE(doc["chat_template"].get_string().get(t) == simdjson::SUCCESS);
  return std::string(t);
}

inline std::vector<FamilyTemplates> all_families() {
  return {
      {TemplateFamily::ChatML, {"inline:chatml"}, "<s>", "</s>"},
      {TemplateFamily::Qwen25, {"Qwen-Qwen2.5-7B-Instruct.jinja"}, "", "<|im_end|>"},
      {TemplateFamily::Hermes, {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"}, "<|begin_of_text|>", "<|im_end|>"},
      {TemplateFamily::Llama31, {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"}, "<|begin_of_text|>", "<|eot_id|>"},
      {TemplateFamily::Llama32, {"meta-llama-Llama-3.2-3B-Instruct.jinja"}, "<|begin_of_text|>", "<|eot_id|>"},
      {TemplateFamily::Zephyr, {"golden:llama-spm32k-q4km.json"}, "<s>", "</s>"},
      {TemplateFamily::MistralNemo, {"mistralai-Mistral-Nemo-Instruct-2407.jinja"}, "<s>", "</s>"},
      {TemplateFamily::Gemma2, {"google-gemma-2-2b-it.jinja"}, "<bos>", "<eos>"},
      {TemplateFamily::Phi35, {"microsoft-Phi-3.5-mini-instruct.jinja"}, "<s>", "<|endoftext|>"},
      {TemplateFamily::DeepSeekR1, {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"}, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
      {TemplateFamily::Qwen3, {"Qwen-Qwen3-0.6B.jinja"}, "", "<|im_end|>"},
      {TemplateFamily::SmolLM3, {"HuggingFaceTB-SmolLM3-3B.jinja"}, "", "<|im_end|>"},
      {TemplateFamily::Gemma3, {"inline:gemma3"}, "<bos>", "<eos>"},
      {TemplateFamily::Qwen35, {"Qwen3.5-4B.jinja"}, "", "<|im_end|>"},
      {TemplateFamily::Lfm2, {"LFM2-8B-A1B.jinja"}, "<|startoftext|>", "<|im_end|>"},
      {TemplateFamily::Lfm25, {"LFM2.5-Instruct.jinja"}, "<|startoftext|>", "<|im_end|>"},
      {TemplateFamily::Gemma4, {"google-gemma-4-31B-it.jinja"}, "<bos>", "<eos>"},
      {TemplateFamily::Phi4Mini, {"tests:microsoft-Phi-4-mini-instruct.jinja"}, "<|endoftext|>", "<|endoftext|>"},
      {TemplateFamily::Granite4, {"tests:ibm-granite-granite-4.0.jinja"}, "", "<|end_of_text|>"},
  };
}

inline Case base_case(const FamilyTemplates& f, const std::string& file) {
  Case base;
  base.family = f.family;
  if (file == "inline:chatml") {
    base.template_text = kChatMLTemplate;
  } else if (file == "inline:gemma3") {
    base.template_text = kGemma3Template;
  } else if (file.rfind("golden:", 0) == 0) {
    base.template_text = golden_template(file.substr(7));
  } else if (file.rfind("tests:", 0) == 0) {  // a published template in tests/templates (ORIGIN.md)
    base.template_file = std::string(PICOLM_SOURCE_DIR) + "/tests/templates/" + file.substr(6);
    read_file(base.template_file);  // missing file: fail here, loudly
  } else {
    base.template_file = kTemplates + file;
    read_file(base.template_file);  // missing file: fail here, loudly
  }
  base.options.bos_token = f.bos;
  base.options.eos_token = f.eos;
  base.options.date_string = "02 Jan 2025";
  return base;
}

// Random conversations (a fixed seed in the caller) built from awkward pieces: Python-only
// whitespace for |trim, "</think>" for DeepSeek's split, numbers Python re-spells, \u escapes,
// tool-call ids of the wrong length, roles in unexpected places. Appends n cases drawn from rng
// to `cases`, labelled `label` + " random #" + index.
inline void add_random_cases(const Case& base, const std::string& label, std::mt19937& rng, int count, std::vector<Case>& cases) {
  const std::vector<std::string> contents = {
      "", "Hello", "  spaced  ", "\n\nnewlines\n", "tab\tin", "\u00a0nbsp\u00a0", "\u3000ideographic\u3000",
      "\x1c" "fs\x1f", "line\u2028sep", "\u0085nel\u0085", "quotes \" and \\ back", "<tool_call>fake</tool_call>",
      "a</think>b", "<think>x</think>\n\ny", "</think>", "émoji 😀 中文", "{\"json\": [1, 2.50]}", "[INST]", "<|im_end|>", "None"};
  const std::vector<std::string> args = {
      "{}", "{\"a\": 1}", " {\"location\":\"Paris\",\"n\":1.0,\"big\":1e400} ",
      "{\"nested\":{\"x\":[true,false,null]},\"s\":\"\\u00e9\\/\\ud83d\\ude00\\u0007\"}", "{\"neg\":-0,\"negf\":-0.0,\"exp\":1E-5,\"f\":123.456e3}",
      "\"just a string\"", "[1,2]"};
  const std::vector<std::string> ids = {"call00001", "short", "ĉall0001é", "abcdefghi"};
  const std::vector<std::string> names = {"get_weather", "f", "tool-with-dash", "ünï"};
  const std::string small_tools =
      R"([{"type":"function","function":{"name":"lookup","description":"Look up\na word","parameters":{"type":"object","properties":{"word":{"type":"string","description":"\tthe word "}},"required":["word"]}}}])";
  auto pick = [&](const auto& v) -> const auto& { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  for (int n = 0; n < count; ++n) {
    Case c = base;
    const int len = std::uniform_int_distribution<int>(0, 7)(rng);
    for (int k = 0; k < len; ++k) {
      const double r = std::uniform_real_distribution<double>(0, 1)(rng);
      ChatMessage m;
      if (r < 0.1) m = msg("system", pick(contents));
      else if (r < 0.45) m = msg("user", pick(contents));
      else if (r < 0.75) {
        m = msg("assistant", pick(contents));
        if (chance(0.2)) m.reasoning_content = pick(contents);
        if (chance(0.4)) {
          const int ncalls = std::uniform_int_distribution<int>(1, 3)(rng);
          for (int q = 0; q < ncalls; ++q) m.tool_calls.push_back({pick(ids), pick(names), pick(args)});
        }
      } else if (r < 0.95) {
        m = tool_msg(pick(ids), pick(contents));
      } else {
        m = msg(chance(0.5) ? "developer" : "ipython", pick(contents));
      }
      if (chance(0.1)) m.name = "bob";
      c.messages.push_back(std::move(m));
    }
    // Bias towards conversations the strict templates accept.
    if (chance(0.5)) {
      std::vector<ChatMessage> clean;
      for (auto& m : c.messages)
        if (m.role == "user" || m.role == "assistant") clean.push_back(m);
      for (size_t k = 0; k < clean.size(); ++k) clean[k].role = k % 2 == 0 ? "user" : "assistant";
      c.messages = std::move(clean);
    }
    c.options.tools_json = chance(0.5) ? "" : chance(0.5) ? std::string(kTools) : small_tools;
    c.options.add_generation_prompt = chance(0.5);
    if (chance(0.5)) c.options.enable_thinking = chance(0.5);
    c.label = label + " random #" + std::to_string(n);
    cases.push_back(std::move(c));
  }
}

}  // namespace chat_test
