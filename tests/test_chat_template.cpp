// Chat templates: every family's hand-written renderer against python3-jinja2 running the real
// template (tests/render_jinja.py, HF settings), byte for byte, with and without tools, over
// multi-turn conversations with tool calls and tool results; plus llama.cpp's own renders stored in
// the golden files, and family detection over every shared template.
#include <catch2/catch.hpp>

#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>

#include "chat_template.h"
#include "reasoning.h"
#include "tool_format.h"

using namespace picolm;

namespace {

const std::string kShared = PICOLM_SHARED_DIR;
const std::string kTemplates = kShared + "/templates/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());  // a missing input fails the test
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void json_string(std::string_view s, std::string& out) {
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else out += ch;
  }
  out += '"';
}

ChatMessage msg(std::string role, std::string content) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}
ChatMessage call_msg(std::string content, std::vector<ToolCall> calls) {
  ChatMessage m = msg("assistant", std::move(content));
  m.tool_calls = std::move(calls);
  return m;
}
ChatMessage tool_msg(std::string id, std::string content) {
  ChatMessage m = msg("tool", std::move(content));
  m.tool_call_id = std::move(id);
  return m;
}

// The message dicts as an OpenAI client sends them (the convention chat_template.h states; Qwen3
// gets "" for a null content).
void json_message(const ChatMessage& m, std::string& out, TemplateFamily family) {
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

std::string cases_json(const std::vector<Case>& cases) {
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
    out += "}";
  }
  out += "]\n";
  return out;
}

struct OracleAnswer {
  bool ok = false;
  std::string text;  // the render, or the error message
};

// Runs tests/render_jinja.py once over all cases.
std::vector<OracleAnswer> run_oracle(const std::vector<Case>& cases) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string stem = "picolm_chat_template_" + std::to_string(::getpid());
  const std::string in_path = (dir / (stem + ".in.json")).string();
  const std::string out_path = (dir / (stem + ".out")).string();
  {
    std::ofstream in(in_path, std::ios::binary);
    in << cases_json(cases);
    REQUIRE(in.good());
  }
  const std::string cmd = std::string("/usr/bin/python3 ") + PICOLM_SOURCE_DIR + "/tests/render_jinja.py < " + in_path + " > " + out_path;
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
  REQUIRE(answers.size() == cases.size());
  return answers;
}

// ---------------------------------------------------------------------------------------------
// Test data.

// Key order deliberately unsorted; numbers in every notation Python prints differently from its
// input; characters jinja2's own tojson would HTML-escape; \u escapes, a surrogate pair, a
// control character, U+2028.
const char* kTools = R"([
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

const char* kArgsParis = R"({"location": "Paris", "unit": "celsius", "days": 3, "threshold": 1.50, "tags": ["a", "é"], "z": null})";
const char* kArgsTokyo = "{\"location\":\"Tokyo \\\"JP\\\"\\n\",\"unit\":\"fahrenheit\"}";

std::vector<std::pair<std::string, std::vector<ChatMessage>>> conversations() {
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
const char* kGemma3Template =
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

const char* kChatMLTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string golden_template(const std::string& file) {
  simdjson::dom::parser parser;
  simdjson::padded_string json = simdjson::padded_string(read_file(kShared + "/golden/" + file));
  simdjson::dom::element doc;
  REQUIRE(parser.parse(json).get(doc) == simdjson::SUCCESS);
  std::string_view t;
  REQUIRE(doc["chat_template"].get_string().get(t) == simdjson::SUCCESS);
  return std::string(t);
}

std::vector<FamilyTemplates> all_families() {
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
  };
}

Case base_case(const FamilyTemplates& f, const std::string& file) {
  Case base;
  base.family = f.family;
  if (file == "inline:chatml") {
    base.template_text = kChatMLTemplate;
  } else if (file == "inline:gemma3") {
    base.template_text = kGemma3Template;
  } else if (file.rfind("golden:", 0) == 0) {
    base.template_text = golden_template(file.substr(7));
  } else {
    base.template_file = kTemplates + file;
    read_file(base.template_file);  // missing file: fail here, loudly
  }
  base.options.bos_token = f.bos;
  base.options.eos_token = f.eos;
  base.options.date_string = "02 Jan 2025";
  return base;
}

// Renders every case and compares with the oracle: same success, same bytes. Returns, per family
// name, how many cases rendered successfully {without tools, with tools}.
std::map<std::string, std::pair<int, int>> compare_with_oracle(const std::vector<Case>& cases) {
  const auto answers = run_oracle(cases);
  std::map<std::string, std::pair<int, int>> matched;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    RenderOptions opt = c.options;
    if (!c.pass_date) opt.date_string.clear();
    const ChatRenderResult got = render_chat(c.family, c.messages, opt);
    INFO("case: " << c.label);
    INFO("oracle " << (answers[i].ok ? "text" : "error") << ":\n" << answers[i].text);
    INFO("ours " << (got.ok ? "text" : "error") << ":\n" << (got.ok ? got.text : got.error));
    REQUIRE(got.ok == answers[i].ok);
    if (got.ok) {
      REQUIRE(got.text == answers[i].text);
      auto& m = matched[std::string(family_name(c.family))];
      ++(c.options.tools_json.empty() ? m.first : m.second);
    }
  }
  return matched;
}

}  // namespace

TEST_CASE("chat templates render byte-identical to python3-jinja2", "[chat_template]") {
  const std::vector<FamilyTemplates> families = all_families();

  std::vector<Case> cases;
  for (const auto& f : families) {
    for (const auto& file : f.files) {
      const Case base = base_case(f, file);
      for (const auto& [conv_name, conv] : conversations()) {
        // enable_thinking undefined / true / false where the template reads it.
        const int thinking_variants = reasoning_traits(f.family).switchable ? 3 : 1;
        for (int tools = 0; tools < 2; ++tools) {
          for (int gen = 0; gen < 2; ++gen) {
            for (int think = 0; think < thinking_variants; ++think) {
              Case c = base;
              c.messages = conv;
              c.options.tools_json = tools ? kTools : "";
              c.options.add_generation_prompt = gen == 1;
              if (think > 0) c.options.enable_thinking = think == 1;
              c.label = std::string(family_name(f.family)) + " [" + file + "] " + conv_name + (tools ? " +tools" : "") +
                        (gen ? " +gen" : "") + (think == 1 ? " +thinking" : think == 2 ? " -thinking" : "");
              cases.push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  // Llama 3.1/3.3 without a date_string use their own fixed date.
  for (const char* file : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"}) {
    Case c;
    c.family = TemplateFamily::Llama31;
    c.template_file = kTemplates + file;
    c.options.bos_token = "<|begin_of_text|>";
    c.options.tools_json = kTools;
    c.messages = {msg("user", "hi")};
    c.pass_date = false;
    c.label = std::string("llama3.1 default date ") + file;
    cases.push_back(std::move(c));
  }
  // Inputs the real templates reject must be rejected too.
  {
    Case c;
    c.family = TemplateFamily::Hermes;
    c.template_file = kTemplates + "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja";
    c.options.tools_json = R"([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "null"}}}}}])";
    c.messages = {msg("user", "hi")};
    c.label = "hermes: type outside the macro's map";
    cases.push_back(c);
    c.options.tools_json = R"([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": 5}, "b": {"description": "no type"}, "c": true}}, "return": {"type": "object", "description": "ret"}}}])";
    c.label = "hermes: odd schemas and return";
    cases.push_back(c);
  }
  {
    Case c;
    c.family = TemplateFamily::MistralNemo;
    c.template_file = kTemplates + "mistralai-Mistral-Nemo-Instruct-2407.jinja";
    c.options.tools_json = kTools;
    c.messages = {msg("user", "Hello"), call_msg("", {{"call1", "get_time", "{}"}}), tool_msg("call1", "12:00")};
    c.label = "mistral: short tool call id";
    cases.push_back(c);
    c.messages = {msg("user", "same"), msg("assistant", "a"), msg("user", "same")};
    c.label = "mistral: repeated last user message gets tools twice";
    cases.push_back(c);
    c.messages = {msg("user", "a"), msg("user", "b")};
    c.label = "mistral: roles must alternate";
    cases.push_back(c);
  }

  const auto matched = compare_with_oracle(cases);
  // No family passes vacuously: each has conversations the template accepts, with and without tools.
  for (const auto& f : families) {
    const std::string fam(family_name(f.family));
    INFO("family " << fam);
    REQUIRE(matched.count(fam) == 1);
    CHECK(matched.at(fam).first >= 6);
    CHECK(matched.at(fam).second >= 6);
  }
}

TEST_CASE("chat templates reproduce llama.cpp's golden renders", "[chat_template]") {
  for (const char* file : {"llama-spm32k-q4km.json", "qwen2-bpe-q4km.json"}) {
    INFO("golden " << file);
    simdjson::dom::parser parser;
    simdjson::padded_string json = simdjson::padded_string(read_file(kShared + "/golden/" + file));
    simdjson::dom::element doc;
    REQUIRE(parser.parse(json).get(doc) == simdjson::SUCCESS);
    std::string_view tmpl;
    REQUIRE(doc["chat_template"].get_string().get(tmpl) == simdjson::SUCCESS);
    const TemplateFamily family = detect_template_family(tmpl);
    CHECK(family == (std::string_view(file).starts_with("llama") ? TemplateFamily::Zephyr : TemplateFamily::Qwen25));
    int chats = 0;
    for (simdjson::dom::element p : doc["prompts"].get_array()) {
      std::string_view source;
      REQUIRE(p["source"].get_string().get(source) == simdjson::SUCCESS);
      if (source != "chat") continue;
      std::vector<ChatMessage> messages;
      for (simdjson::dom::element m : p["chat_messages"].get_array()) {
        std::string_view role, content;
        REQUIRE(m["role"].get_string().get(role) == simdjson::SUCCESS);
        REQUIRE(m["content"].get_string().get(content) == simdjson::SUCCESS);
        messages.push_back(msg(std::string(role), std::string(content)));
      }
      bool gen = false;
      REQUIRE(p["chat_add_generation_prompt"].get_bool().get(gen) == simdjson::SUCCESS);
      std::string_view text;
      REQUIRE(p["text"].get_string().get(text) == simdjson::SUCCESS);
      RenderOptions opt;
      opt.add_generation_prompt = gen;
      opt.bos_token = "<s>";
      opt.eos_token = "</s>";
      const ChatRenderResult got = render_chat(family, messages, opt);
      REQUIRE(got.ok);
      CHECK(got.text == text);
      ++chats;
    }
    CHECK(chats == 2);
  }
}

TEST_CASE("template family detection", "[chat_template]") {
  const std::map<std::string, TemplateFamily> expected = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", TemplateFamily::Qwen25},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", TemplateFamily::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", TemplateFamily::Hermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", TemplateFamily::Llama31},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", TemplateFamily::Llama31},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", TemplateFamily::Llama32},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", TemplateFamily::MistralNemo},
      {"google-gemma-2-2b-it.jinja", TemplateFamily::Gemma2},
      {"microsoft-Phi-3.5-mini-instruct.jinja", TemplateFamily::Phi35},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", TemplateFamily::DeepSeekR1},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TemplateFamily::DeepSeekR1},
      {"Qwen-Qwen3-0.6B.jinja", TemplateFamily::Qwen3},
      {"HuggingFaceTB-SmolLM3-3B.jinja", TemplateFamily::SmolLM3},
      // Not reproduced: must not be mistaken for a supported family.
      {"llama-cpp-deepseek-r1.jinja", TemplateFamily::Unknown},
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", TemplateFamily::Unknown},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", TemplateFamily::Unknown},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", TemplateFamily::Unknown},
      {"meetkai-functionary-medium-v3.1.jinja", TemplateFamily::Unknown},
      {"meetkai-functionary-medium-v3.2.jinja", TemplateFamily::Unknown},
      {"Qwen3.5-4B.jinja", TemplateFamily::Qwen35},
      {"LFM2-8B-A1B.jinja", TemplateFamily::Lfm2},
      {"LFM2.5-Instruct.jinja", TemplateFamily::Lfm25},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", TemplateFamily::Unknown},
      {"google-gemma-4-31B-it.jinja", TemplateFamily::Unknown},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", TemplateFamily::Unknown},
  };
  // Every shared template is classified on purpose.
  size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kTemplates)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    INFO("template " << name);
    auto it = expected.find(name);
    REQUIRE(it != expected.end());
    CHECK(detect_template_family(read_file(entry.path().string())) == it->second);
    ++seen;
  }
  CHECK(seen == expected.size());
  CHECK(detect_template_family(kChatMLTemplate) == TemplateFamily::ChatML);
  CHECK(detect_template_family(kGemma3Template) == TemplateFamily::Gemma3);
  CHECK(detect_template_family("") == TemplateFamily::Unknown);
}

TEST_CASE("family names and traits", "[chat_template]") {
  for (int i = 1; i <= static_cast<int>(kLastTemplateFamily); ++i) {
    const auto f = static_cast<TemplateFamily>(i);
    INFO("family " << family_name(f));
    REQUIRE(family_from_name(family_name(f)) == f);
    CHECK_FALSE(family_traits(f).stop_strings.empty());
  }
  CHECK(family_from_name("LLAMA3") == TemplateFamily::Llama31);
  CHECK(family_from_name("qwen") == TemplateFamily::Qwen25);
  CHECK_FALSE(family_from_name("nonsense").has_value());
  CHECK(family_traits(TemplateFamily::Qwen25).tool_call_start == "<tool_call>");
  CHECK(family_traits(TemplateFamily::Llama31).arguments_key == "parameters");

  std::vector<ChatMessage> m = {msg("user", "hi")};
  RenderOptions opt;
  opt.tools_json = "[{\"type\": ";
  CHECK_FALSE(render_chat(TemplateFamily::Qwen25, m, opt).ok);
  opt.tools_json = "{}";
  CHECK_FALSE(render_chat(TemplateFamily::Qwen25, m, opt).ok);
  opt.tools_json.clear();
  CHECK_FALSE(render_chat(TemplateFamily::Unknown, m, opt).ok);
  m.push_back(call_msg("", {{"call00001", "f", "{not json"}}));
  const auto r = render_chat(TemplateFamily::Qwen25, m, opt);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("arguments") != std::string::npos);
}

TEST_CASE("tool lowering for templates without tool syntax", "[chat_template]") {
  const ToolCall tokyo{"call00003", "get_weather", kArgsTokyo};
  const ToolCall time_call{"callABCDE", "get_time", "{}"};
  const std::vector<ToolCall> calls = {tokyo, time_call};
  std::string err;
  CHECK(format_lowered_tool_calls(calls, LoweredToolSyntax::Tagged, &err) ==
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Tokyo \\\"JP\\\"\\n\", \"unit\": \"fahrenheit\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  CHECK(format_lowered_tool_calls(calls, LoweredToolSyntax::Envelope, &err) ==
        "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Tokyo \\\"JP\\\"\\n\", \"unit\": \"fahrenheit\"}}, "
        "{\"name\": \"get_time\", \"arguments\": {}}]}");
  CHECK(err.empty());
  const std::vector<ToolCall> bad = {{"x", "f", "{oops"}};
  CHECK(format_lowered_tool_calls(bad, LoweredToolSyntax::Tagged, &err).empty());
  CHECK_FALSE(err.empty());

  const auto convs = conversations();
  const auto& conv = std::find_if(convs.begin(), convs.end(), [](const auto& c) { return c.first == "tool call with content then answer"; })->second;
  const std::vector<ChatMessage> with_system = [&] {
    std::vector<ChatMessage> v = conv;
    v.insert(v.begin(), msg("system", "Be helpful."));
    return v;
  }();

  for (TemplateFamily f : {TemplateFamily::ChatML, TemplateFamily::Zephyr, TemplateFamily::Gemma2, TemplateFamily::Phi35,
                           TemplateFamily::DeepSeekR1, TemplateFamily::SmolLM3, TemplateFamily::Gemma3, TemplateFamily::Unknown}) {
    for (LoweredToolSyntax syntax : {LoweredToolSyntax::Tagged, LoweredToolSyntax::Envelope, LoweredToolSyntax::Native}) {
      for (const auto* c : {&conv, &with_system}) {
        INFO("family " << family_name(f) << " syntax " << static_cast<int>(syntax) << " system " << (c == &with_system));
        REQUIRE(family_needs_tool_lowering(f));
        const LoweredConversation low = lower_tool_conversation(f, *c, kTools, syntax);
        REQUIRE(low.ok);
        RenderOptions opt;
        opt.bos_token = "<s>";
        opt.eos_token = "</s>";
        const TemplateFamily render_as = f == TemplateFamily::Unknown ? TemplateFamily::ChatML : f;
        const ChatRenderResult r = render_chat(render_as, low.messages, opt);
        INFO("error: " << r.error);
        REQUIRE(r.ok);
        INFO("prompt:\n" << r.text);
        CHECK(r.text.find("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") != std::string::npos);
        CHECK(r.text.find("{\"type\": \"function\", \"function\": {\"name\": \"get_time\"") != std::string::npos);
        CHECK(r.text.find("12:00") != std::string::npos);  // the tool result is shown
        if (c == &with_system) CHECK(r.text.find("Be helpful.") != std::string::npos);
        if (f == TemplateFamily::DeepSeekR1 && syntax == LoweredToolSyntax::Native) {
          CHECK(r.text.find("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time") != std::string::npos);
          continue;
        }
        for (const auto& m : low.messages) {
          CHECK(m.role != "tool");
          CHECK(m.tool_calls.empty());
        }
        const std::string expected_call = syntax != LoweredToolSyntax::Envelope
                                              ? "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"
                                              : "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {}}]}";
        CHECK(r.text.find("Let me check.\n" + expected_call) != std::string::npos);
        CHECK(r.text.find("<tool_response>\n12:00\n</tool_response>\n\nAnd the weather in Tokyo?") == std::string::npos);  // not merged: an assistant turn sits between
        CHECK(r.text.find("<tool_response>\nsunny\n</tool_response>") != std::string::npos);
        if (syntax == LoweredToolSyntax::Envelope) {
          CHECK(r.text.find("{\"content\": \"Sunny.\"}") != std::string::npos);
          CHECK(r.text.find("It is noon.\"}") != std::string::npos);
        }
      }
    }
  }
  // Families that render tools themselves are left alone.
  const LoweredConversation same = lower_tool_conversation(TemplateFamily::Qwen25, conv, kTools);
  REQUIRE(same.ok);
  CHECK(same.messages.size() == conv.size());
  CHECK_FALSE(lower_tool_conversation(TemplateFamily::ChatML, conv, "[{", LoweredToolSyntax::Tagged).ok);
  CHECK_FALSE(lower_tool_conversation(TemplateFamily::ChatML, conv, "{}", LoweredToolSyntax::Tagged).ok);
}

// Random conversations (fixed seed) built from awkward pieces: Python-only whitespace for |trim,
// "</think>" for DeepSeek's split, numbers Python re-spells, \u escapes, tool-call ids of the wrong
// length, roles in unexpected places. Whatever the real template does, accept or reject, we must do.
TEST_CASE("chat templates match python3-jinja2 on random conversations", "[chat_template]") {
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

  std::mt19937 rng(20240726);
  auto pick = [&](const auto& v) -> const auto& { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };

  std::vector<Case> cases;
  for (const auto& f : all_families()) {
    for (const auto& file : f.files) {
      const Case base = base_case(f, file);
      for (int n = 0; n < 150; ++n) {
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
        c.label = std::string(family_name(f.family)) + " [" + file + "] random #" + std::to_string(n);
        cases.push_back(std::move(c));
      }
    }
  }
  const auto matched = compare_with_oracle(cases);
  for (const auto& f : all_families()) {
    const std::string fam(family_name(f.family));
    INFO("family " << fam);
    REQUIRE(matched.count(fam) == 1);
    CHECK(matched.at(fam).first >= 10);
    CHECK(matched.at(fam).second >= 10);
  }
}

// ---------------------------------------------------------------------------------------------
// Thinking: the reasoning/content split and the per-request plan (reasoning.h).

namespace {

struct SplitCase {
  std::string text;
  bool start_inside;
  std::string reasoning, content;
};

// Feeds `text` cut at the given positions; returns the concatenated outputs and checks, piece by
// piece, that no delta carries a tag (or a part of one that was later completed).
std::pair<std::string, std::string> split_in_pieces(const SplitCase& c, const std::vector<size_t>& cuts) {
  ReasoningSplitter sp("<think>", "</think>", c.start_inside);
  std::string reasoning, content;
  size_t prev = 0;
  auto take = [&](const ReasoningPiece& p) {
    CHECK(p.reasoning.find("</think>") == std::string::npos);
    CHECK(p.reasoning.find("<think>") == std::string::npos);
    reasoning += p.reasoning;
    content += p.content;
  };
  for (size_t cut : cuts) {
    take(sp.push(std::string_view(c.text).substr(prev, cut - prev)));
    prev = cut;
  }
  take(sp.push(std::string_view(c.text).substr(prev)));
  take(sp.finish());
  return {reasoning, content};
}

}  // namespace

TEST_CASE("reasoning splitter: same split for every chunking", "[reasoning]") {
  const std::vector<SplitCase> cases = {
      {"<think>\nI think.\n</think>\n\nHello", false, "I think.", "Hello"},
      {"  \n<think>x</think>y", false, "x", "y"},
      {"<think>a \n b</think>c d\n", false, "a \n b", "c d\n"},
      {"<think>\n\n</think>\n\nHi", false, "", "Hi"},                 // empty think block
      {"<think>\nnever closed\n", false, "never closed", ""},         // no </think>: all reasoning
      {"<think>a</thi", false, "a</thi", ""},                         // a close tag cut off is text
      {"Hello <think>x</think> there", false, "", "Hello <think>x</think> there"},  // not first: content
      {"<thi", false, "", "<thi"},                                    // an open tag that never completed
      {"<thinking>about</thinking>", false, "", "<thinking>about</thinking>"},
      {"\n\nHello", false, "", "\n\nHello"},                          // thinking off: text as it is
      {"", false, "", ""},
      {"R1 reasoning\n</think>\n\nanswer </think>", true, "R1 reasoning", "answer </think>"},  // prefilled open
      {"</think>\n\nok", true, "", "ok"},
      {"<think>one</think><think>two</think>", false, "one", "<think>two</think>"},
      {"<think>x</think>\n\n<tool_call>\n{}\n</tool_call>", false, "x", "<tool_call>\n{}\n</tool_call>"},
  };
  std::mt19937 rng(19);
  for (const auto& c : cases) {
    INFO("text: " << c.text);
    // Whole, byte by byte, and random cuts.
    std::vector<std::vector<size_t>> cut_sets = {{}};
    std::vector<size_t> every;
    for (size_t i = 1; i < c.text.size(); ++i) every.push_back(i);
    cut_sets.push_back(every);
    for (int r = 0; r < 50 && c.text.size() > 1; ++r) {
      std::vector<size_t> cuts;
      for (size_t i = 1; i < c.text.size(); ++i)
        if (rng() % 3 == 0) cuts.push_back(i);
      cut_sets.push_back(cuts);
    }
    for (const auto& cuts : cut_sets) {
      const auto [reasoning, content] = split_in_pieces(c, cuts);
      CHECK(reasoning == c.reasoning);
      CHECK(content == c.content);
    }
  }
}

TEST_CASE("reasoning splitter: state and held text", "[reasoning]") {
  ReasoningSplitter sp("<think>", "</think>", false);
  CHECK(sp.state() == ReasoningSplitter::State::Start);
  ReasoningPiece p = sp.push("<thi");
  CHECK(p.reasoning.empty());
  CHECK(p.content.empty());  // may still be the tag
  p = sp.push("nk>\nabc </");
  CHECK(sp.state() == ReasoningSplitter::State::Thinking);
  CHECK(p.reasoning == "abc");  // " </" held: whitespace before a possible close
  p = sp.push("think>\n\n");
  CHECK(sp.in_answer());
  CHECK(p.reasoning.empty());
  CHECK(p.content.empty());  // the separator is not content
  p = sp.push("Answer");
  CHECK(p.content == "Answer");
  // Text that starts otherwise is content at once.
  ReasoningSplitter plain("<think>", "</think>", false);
  CHECK(plain.push("Hi").content == "Hi");
  CHECK(plain.in_answer());
}

TEST_CASE("thinking plan per family and request", "[reasoning]") {
  const std::vector<ChatMessage> user = {msg("user", "Hi")};
  std::optional<bool> render;

  // Qwen3: thinks by default; the template is left to decide (enable_thinking undefined).
  ThinkingPlan p = plan_thinking(TemplateFamily::Qwen3, user, std::nullopt, std::nullopt, ReasoningMode::Auto, render);
  CHECK(p.split);
  CHECK(p.enabled);
  CHECK_FALSE(render.has_value());
  size_thinking_budget(p, 400);
  CHECK(p.budget == 200);  // medium: half of max_tokens
  CHECK(p.force_open);
  CHECK(p.separator == "\n\n");

  // Off, three ways; the prompt then carries the empty think block.
  for (int way = 0; way < 3; ++way) {
    INFO("way " << way);
    p = plan_thinking(TemplateFamily::Qwen3, user, way == 0 ? std::optional<bool>(false) : std::nullopt,
                      way == 1 ? std::optional(ReasoningEffort::None) : std::nullopt,
                      way == 2 ? ReasoningMode::Off : ReasoningMode::Auto, render);
    CHECK_FALSE(p.enabled);
    REQUIRE(render == std::optional<bool>(false));
    size_thinking_budget(p, 400);
    CHECK(p.budget == 0);
    CHECK_FALSE(p.force_open);
    RenderOptions ro;
    ro.enable_thinking = render;
    const auto r = render_chat(TemplateFamily::Qwen3, user, ro);
    REQUIRE(r.ok);
    CHECK(r.text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  }
  // The request wins over the provider default; enable_thinking wins over reasoning_effort.
  p = plan_thinking(TemplateFamily::Qwen3, user, true, ReasoningEffort::None, ReasoningMode::Off, render);
  CHECK(p.enabled);
  CHECK(render == std::optional<bool>(true));
  size_thinking_budget(p, 400);
  CHECK(p.budget == 200);
  p = plan_thinking(TemplateFamily::Qwen3, user, std::nullopt, ReasoningEffort::Low, ReasoningMode::Off, render);
  CHECK(p.enabled);
  size_thinking_budget(p, 400);
  CHECK(p.budget == 100);
  p = plan_thinking(TemplateFamily::Qwen3, user, std::nullopt, ReasoningEffort::High, ReasoningMode::Auto, render);
  size_thinking_budget(p, 400);
  CHECK(p.budget == 300);
  size_thinking_budget(p, 1000000);
  CHECK(p.budget == 16384);
  size_thinking_budget(p, 1);
  CHECK(p.budget == 0);
  CHECK_FALSE(p.force_open);  // no room to think: the block is not opened

  // SmolLM3: the system flag wins over enable_thinking, in the prompt and in the plan alike.
  const std::vector<ChatMessage> no_think = {msg("system", "Be brief /no_think"), msg("user", "Hi")};
  p = plan_thinking(TemplateFamily::SmolLM3, no_think, true, std::nullopt, ReasoningMode::Auto, render);
  CHECK_FALSE(p.enabled);
  RenderOptions ro;
  ro.enable_thinking = render;
  auto r = render_chat(TemplateFamily::SmolLM3, no_think, ro);
  REQUIRE(r.ok);
  CHECK(r.text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n"));
  p = plan_thinking(TemplateFamily::SmolLM3, user, std::nullopt, std::nullopt, ReasoningMode::Auto, render);
  CHECK(p.enabled);
  CHECK(p.separator == "\n");

  // DeepSeek R1 opens the block in the prompt; "off" closes it at once.
  p = plan_thinking(TemplateFamily::DeepSeekR1, user, false, std::nullopt, ReasoningMode::Auto, render);
  CHECK(p.enabled);
  CHECK(p.start_inside);
  CHECK_FALSE(render.has_value());  // the template has no switch
  size_thinking_budget(p, 400);
  CHECK(p.budget == 0);
  CHECK_FALSE(p.force_open);

  // Families without thinking.
  for (TemplateFamily f : {TemplateFamily::Gemma3, TemplateFamily::Qwen25, TemplateFamily::ChatML}) {
    p = plan_thinking(f, user, true, ReasoningEffort::High, ReasoningMode::On, render);
    CHECK_FALSE(p.split);
    CHECK_FALSE(p.enabled);
    CHECK_FALSE(render.has_value());
  }

  CHECK(reasoning_effort_from_name("HIGH") == ReasoningEffort::High);
  CHECK(reasoning_effort_from_name("minimal") == ReasoningEffort::Low);
  CHECK(reasoning_effort_from_name("max") == ReasoningEffort::High);  // issue 30: xhigh and max are high
  CHECK(reasoning_effort_from_name("xhigh") == ReasoningEffort::High);
  CHECK_FALSE(reasoning_effort_from_name("maximal").has_value());
  CHECK(reasoning_mode_from_name("off") == ReasoningMode::Off);
  CHECK_FALSE(reasoning_mode_from_name("maybe").has_value());
}

TEST_CASE("Qwen3.5 thinking: the prompt opens the block, off closes it there", "[reasoning]") {
  const std::vector<ChatMessage> user = {msg("user", "Hi")};
  std::optional<bool> render;
  ThinkingPlan p = plan_thinking(TemplateFamily::Qwen35, user, std::nullopt, std::nullopt, ReasoningMode::Auto, render);
  CHECK(p.split);
  CHECK(p.enabled);
  CHECK(p.start_inside);  // the generation prompt ends with "<think>\n"
  CHECK_FALSE(render.has_value());
  size_thinking_budget(p, 400);
  CHECK(p.budget == 200);
  CHECK_FALSE(p.force_open);  // the prompt opened it already
  RenderOptions ro;
  ro.enable_thinking = render;
  auto r = render_chat(TemplateFamily::Qwen35, user, ro);
  REQUIRE(r.ok);
  CHECK(r.text.ends_with("<|im_start|>assistant\n<think>\n"));
  // The reply then starts inside the block.
  ReasoningSplitter sp(p.open, p.close, p.start_inside);
  ReasoningPiece a = sp.push("Let me think.\n</think>\n\nHello");
  const ReasoningPiece rest = sp.finish();
  a.reasoning += rest.reasoning;
  a.content += rest.content;
  CHECK(a.reasoning == "Let me think.");
  CHECK(a.content == "Hello");

  p = plan_thinking(TemplateFamily::Qwen35, user, false, std::nullopt, ReasoningMode::Auto, render);
  CHECK_FALSE(p.enabled);
  CHECK_FALSE(p.start_inside);  // the prompt closes the block: the reply is the answer
  REQUIRE(render == std::optional<bool>(false));
  ro.enable_thinking = render;
  r = render_chat(TemplateFamily::Qwen35, user, ro);
  REQUIRE(r.ok);
  CHECK(r.text.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  CHECK(reasoning_traits(TemplateFamily::Lfm2).supported == false);
  CHECK(family_traits(TemplateFamily::Qwen35).tool_call_style == ToolCallStyle::QwenXml);
  CHECK(family_traits(TemplateFamily::Lfm25).tool_call_style == ToolCallStyle::PythonList);
}
