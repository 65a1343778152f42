// picolm-grammar: compile a JSON Schema or an OpenAI tool list, check instances against it, sample
// random instances under the token mask, and measure compile and mask times.
//
//   picolm-grammar compile (--schema S.json | --tools T.json) [options]
//   picolm-grammar check   (--schema S.json | --tools T.json) (--instance I.json | --instances I.jsonl)
//   picolm-grammar sample  (--schema S.json | --tools T.json) --vocab V.gguf [--seed N] [--max-tokens K]
//   picolm-grammar bench   (--schema S.json | --tools T.json) --vocab V.gguf [--walks N] [--seed N]
//
// Exit codes: 0 success; 1 bad usage or unreadable input; 2 schema unsupported or invalid;
// 3 `check` rejected an instance, or `sample` could not finish a walk.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar_walk.h"
#include "vocab_loader.h"

namespace {

using picolm::grammar::CompileResult;
using picolm::grammar::ToolCallFormat;
using picolm::grammar::Whitespace;
using picolm::grammar::PropertyOrder;
namespace tools = picolm::tools;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: picolm-grammar <compile|check|sample|bench> (--schema S.json | --tools T.json) [options]\n"
    "       picolm-grammar cache-stress [--schemas N] [--props P] [--cache-mb M]\n"
    "         N distinct P-property schemas through a GrammarCache of M MB (defaults 320, 10000,\n"
    "         64): prints the cache's accounted bytes and the process RSS (issue 15)\n"
    "  --format object|array|hermes|envelope|qwen-xml|python|gemma4\n"
    "                                           tool-call format (with --tools; default object;\n"
    "                                           qwen-xml: Qwen3.5, python: LFM2, gemma4: Gemma 4)\n"
    "  --parallel                               allow several tool calls\n"
    "  --dump                                   compile: print the rules\n"
    "  --allow-text                             envelope: also allow {\"content\":\"...\"}\n"
    "  --forced-tool NAME                       only this tool may be called\n"
    "  --whitespace compact|flexible|natural    default compact\n"
    "  --ws-run N                               flexible: longest whitespace run (default 16)\n"
    "  --indent N                               natural: newline + up to N spaces (default -1: no newlines)\n"
    "  --no-additional-properties               schema: additionalProperties defaults to false\n"
    "  --property-order schema|any              order of generated properties (default schema)\n"
    "  --instance I.json | --instances I.jsonl  check: one instance per file / per line\n"
    "  --vocab V.gguf                           sample, bench (check: optional, default single bytes)\n"
    "  --seed N  --max-tokens K                 sample, bench\n"
    "  --walks N  --compile-reps N              bench (defaults 20 and 20)\n"
    "  --close-after N [--closing-slack S]      sample: closing mode (fill_mask_closing) after N tokens\n"
    "exit: 0 ok, 1 usage, 2 schema refused, 3 instance rejected / walk not finished\n";

struct Args {
  std::string command;
  std::string schema_path, tools_path, vocab_path, instance_path, instances_path;
  std::string format = "object";
  std::string whitespace = "compact";
  std::string property_order = "schema";
  int ws_run = -1;  // -1: the library default
  int indent = -1;
  std::string forced_tool;
  bool parallel = false, allow_text = false, no_additional = false, dump = false;
  uint64_t seed = 1;
  int max_tokens = 512;
  int walks = 20;
  int close_after = -1, closing_slack = 0;
  int compile_reps = 20;
  int n_schemas = 320, n_props = 10000, cache_mb = 64;  // cache-stress
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "picolm-grammar: %s\n%s", msg.c_str(), kUsage);
  std::exit(1);
}

long parse_int(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi)
    usage_error(flag + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  if (argc < 2) usage_error("missing command");
  a.command = argv[1];
  if (a.command == "-h" || a.command == "--help") {
    std::fputs(kUsage, stdout);
    std::exit(0);
  }
  if (a.command != "compile" && a.command != "check" && a.command != "sample" && a.command != "bench" &&
      a.command != "cache-stress")
    usage_error("unknown command '" + a.command + "'");
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(f + " needs a value");
      return argv[++i];
    };
    if (f == "--schema") a.schema_path = value();
    else if (f == "--tools") a.tools_path = value();
    else if (f == "--vocab") a.vocab_path = value();
    else if (f == "--instance") a.instance_path = value();
    else if (f == "--instances") a.instances_path = value();
    else if (f == "--format") a.format = value();
    else if (f == "--whitespace") a.whitespace = value();
    else if (f == "--property-order") a.property_order = value();
    else if (f == "--ws-run") a.ws_run = static_cast<int>(parse_int(f, value(), 0, 1 << 10));
    else if (f == "--indent") a.indent = static_cast<int>(parse_int(f, value(), -1, 1 << 10));
    else if (f == "--forced-tool") a.forced_tool = value();
    else if (f == "--parallel") a.parallel = true;
    else if (f == "--dump") a.dump = true;
    else if (f == "--allow-text") a.allow_text = true;
    else if (f == "--no-additional-properties") a.no_additional = true;
    else if (f == "--seed") a.seed = static_cast<uint64_t>(parse_int(f, value(), 0, 1L << 62));
    else if (f == "--max-tokens") a.max_tokens = static_cast<int>(parse_int(f, value(), 1, 1 << 20));
    else if (f == "--walks") a.walks = static_cast<int>(parse_int(f, value(), 1, 100000));
    else if (f == "--close-after") a.close_after = static_cast<int>(parse_int(f, value(), 0, 1 << 20));
    else if (f == "--closing-slack") a.closing_slack = static_cast<int>(parse_int(f, value(), 0, 1 << 20));
    else if (f == "--compile-reps") a.compile_reps = static_cast<int>(parse_int(f, value(), 1, 100000));
    else if (f == "--schemas") a.n_schemas = static_cast<int>(parse_int(f, value(), 1, 100000));
    else if (f == "--props") a.n_props = static_cast<int>(parse_int(f, value(), 1, 1000000));
    else if (f == "--cache-mb") a.cache_mb = static_cast<int>(parse_int(f, value(), 0, 1 << 20));
    else if (f == "-h" || f == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else usage_error("unknown option '" + f + "'");
  }
  if (a.command == "cache-stress") return a;
  if (a.schema_path.empty() == a.tools_path.empty()) usage_error("give exactly one of --schema and --tools");
  if (a.format != "object" && a.format != "array" && a.format != "hermes" && a.format != "envelope" &&
      a.format != "qwen-xml" && a.format != "python" && a.format != "gemma4")
    usage_error("--format must be object, array, hermes, envelope, qwen-xml, python or gemma4");
  if (a.whitespace != "compact" && a.whitespace != "flexible" && a.whitespace != "natural")
    usage_error("--whitespace must be compact, flexible or natural");
  if (a.property_order != "schema" && a.property_order != "any")
    usage_error("--property-order must be schema or any");
  if (a.command == "check" && a.instance_path.empty() == a.instances_path.empty())
    usage_error("check needs exactly one of --instance and --instances");
  if ((a.command == "sample" || a.command == "bench") && a.vocab_path.empty())
    usage_error(a.command + " needs --vocab V.gguf");
  return a;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

std::string read_or_die(const std::string& path) {
  std::string s;
  if (!read_file(path, s)) {
    std::fprintf(stderr, "picolm-grammar: cannot read '%s'\n", path.c_str());
    std::exit(1);
  }
  return s;
}

// Everything needed to compile the grammar again (bench compiles it many times).
struct Source {
  std::string text;
  bool is_tools = false;
  picolm::grammar::CompileOptions schema_opts;
  picolm::grammar::ToolListOptions tool_opts;
  CompileResult compile() const {
    return is_tools ? picolm::grammar::compile_tool_list(text, tool_opts)
                    : picolm::grammar::compile_json_schema(text, schema_opts);
  }
  std::string describe() const {
    std::string d = is_tools ? "tools" : "schema";
    d += schema_opts.whitespace == Whitespace::Compact    ? ", whitespace compact"
         : schema_opts.whitespace == Whitespace::Flexible ? ", whitespace flexible (run " + std::to_string(schema_opts.max_whitespace_run) + ")"
                                                          : ", whitespace natural (indent " + std::to_string(schema_opts.max_indent) + ")";
    if (schema_opts.property_order == PropertyOrder::Any) d += ", any property order";
    if (is_tools) {
      static const char* names[] = {"object", "array", "hermes", "triggered-text", "envelope", "qwen-xml", "python", "gemma4"};
      d += std::string(", format ") + names[static_cast<int>(tool_opts.format)];
      if (tool_opts.parallel) d += ", parallel";
      if (tool_opts.allow_text) d += ", allow-text";
      if (!tool_opts.forced_tool.empty()) d += ", forced " + tool_opts.forced_tool;
    } else if (!schema_opts.additional_properties_default) {
      d += ", additionalProperties default false";
    }
    return d;
  }
};

Source make_source(const Args& a) {
  Source s;
  s.is_tools = !a.tools_path.empty();
  s.text = read_or_die(s.is_tools ? a.tools_path : a.schema_path);
  s.schema_opts.whitespace = a.whitespace == "flexible" ? Whitespace::Flexible
                             : a.whitespace == "natural" ? Whitespace::Natural
                                                         : Whitespace::Compact;
  if (a.ws_run >= 0) s.schema_opts.max_whitespace_run = a.ws_run;
  s.schema_opts.max_indent = a.indent;
  s.schema_opts.additional_properties_default = !a.no_additional;
  s.schema_opts.property_order = a.property_order == "any" ? PropertyOrder::Any : PropertyOrder::Schema;
  s.tool_opts.schema = s.schema_opts;
  s.tool_opts.format = a.format == "array"      ? ToolCallFormat::JsonArray
                       : a.format == "hermes"   ? ToolCallFormat::Hermes
                       : a.format == "envelope" ? ToolCallFormat::Envelope
                       : a.format == "qwen-xml" ? ToolCallFormat::QwenXml
                       : a.format == "python"   ? ToolCallFormat::PythonList
                       : a.format == "gemma4"   ? ToolCallFormat::Gemma4
                                                : ToolCallFormat::JsonObject;
  s.tool_opts.parallel = a.parallel;
  s.tool_opts.allow_text = a.allow_text;
  s.tool_opts.forced_tool = a.forced_tool;
  return s;
}

CompileResult compile_or_die(const Source& src, double* ms = nullptr) {
  const auto t0 = Clock::now();
  CompileResult r = src.compile();
  const auto t1 = Clock::now();
  if (ms) *ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "picolm-grammar: schema refused (%zu problem%s):\n%s\n", r.errors.size(),
                 r.errors.size() == 1 ? "" : "s", r.error_text().c_str());
    std::exit(2);
  }
  return r;
}

std::shared_ptr<const picolm::grammar::Vocabulary> load_vocab_or_die(const std::string& path, double* ms = nullptr) {
  const auto t0 = Clock::now();
  auto v = tools::load_grammar_vocab(path);
  const auto t1 = Clock::now();
  if (ms) *ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (!v) {
    std::fprintf(stderr, "picolm-grammar: cannot load vocabulary: %s\n", v.error().c_str());
    std::exit(1);
  }
  return *v;
}

int cmd_compile(const Args& a) {
  const Source src = make_source(a);
  double ms = 0;
  const CompileResult r = compile_or_die(src, &ms);
  std::printf("ok: %s compiled in %.3f ms (%s)\n", src.is_tools ? a.tools_path.c_str() : a.schema_path.c_str(), ms,
              src.describe().c_str());
  if (a.dump) std::fputs(picolm::grammar::grammar_to_text(*r.grammar).c_str(), stdout);
  return 0;
}

// Strips the line ending a text editor leaves at the end of a one-instance file.
std::string strip_final_newline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

int cmd_check(const Args& a) {
  const Source src = make_source(a);
  const CompileResult g = compile_or_die(src);
  auto vocab = a.vocab_path.empty() ? tools::byte_vocabulary() : load_vocab_or_die(a.vocab_path);
  std::vector<std::string> instances;
  if (!a.instance_path.empty()) {
    instances.push_back(strip_final_newline(read_or_die(a.instance_path)));
  } else {
    std::istringstream in(read_or_die(a.instances_path));
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) instances.push_back(line);
    }
  }
  size_t n_rejected = 0;
  for (size_t i = 0; i < instances.size(); ++i) {
    const std::string& s = instances[i];
    // As written first (the report says where the bytes went wrong), then by value: the same
    // value spelled another way (member order, number and string spelling) is valid too.
    const picolm::grammar::InstanceCheck c = picolm::grammar::check_instance(g.grammar, vocab, s);
    const size_t pos = c.rejected_at;
    std::string verdict;
    if (c.accepted) {
      verdict = "accepted";
      if (!c.as_written) verdict += " (by value, as " + c.canonical + ")";
    } else if (pos < s.size()) {
      verdict = "rejected: byte " + std::to_string(pos) + " ('" + std::string(1, s[pos]) + "') after \"" +
                s.substr(pos > 40 ? pos - 40 : 0, std::min<size_t>(pos, 40)) + "\"; " + c.detail;
    } else {
      verdict = "rejected: incomplete; " + c.detail;
    }
    if (!c.accepted) ++n_rejected;
    if (instances.size() == 1) std::printf("%s\n", verdict.c_str());
    else std::printf("%zu: %s\n", i + 1, verdict.c_str());
  }
  if (instances.size() > 1) std::printf("%zu accepted, %zu rejected\n", instances.size() - n_rejected, n_rejected);
  return n_rejected == 0 ? 0 : 3;
}

int cmd_sample(const Args& a) {
  const Source src = make_source(a);
  const CompileResult g = compile_or_die(src);
  auto vocab = load_vocab_or_die(a.vocab_path);
  tools::WalkOptions wo;
  wo.seed = a.seed;
  wo.max_tokens = a.max_tokens;
  wo.close_after = a.close_after;
  wo.closing_slack = a.closing_slack;
  const tools::WalkResult w = tools::random_walk(g.grammar, tools::WalkVocabulary(vocab), wo);
  std::fwrite(w.text.data(), 1, w.text.size(), stdout);
  std::fputc('\n', stdout);
  std::fprintf(stderr, "%s after %d tokens%s%s\n", tools::walk_status_name(w.status), w.n_tokens,
               w.detail.empty() ? "" : ": ", w.detail.c_str());
  if (w.closing_used >= 0)
    std::fprintf(stderr, "closing mode after %d tokens: shortest completion %d tokens, allowed %d, used %d\n",
                 a.close_after, w.closing_min_tokens, w.closing_budget, w.closing_used);
  return w.status == tools::WalkStatus::Finished ? 0 : 3;
}

int cmd_bench(const Args& a) {
  const Source src = make_source(a);
  std::printf("bench: %s (%s)\n", src.is_tools ? a.tools_path.c_str() : a.schema_path.c_str(), src.describe().c_str());
  double vocab_ms = 0;
  auto vocab = load_vocab_or_die(a.vocab_path, &vocab_ms);
  std::printf("vocab: %s, %zu tokens, %zu eog, loaded in %.1f ms (tokenizer + Vocabulary::create)\n",
              a.vocab_path.c_str(), vocab->size(), vocab->eog_ids().size(), vocab_ms);

  std::vector<double> compile_ms;
  CompileResult g;
  for (int i = 0; i < a.compile_reps; ++i) {
    double ms = 0;
    g = compile_or_die(src, &ms);
    compile_ms.push_back(ms);
  }
  const tools::Stats cs = tools::summarize(compile_ms);
  std::printf("compile: median %.3f ms, max %.3f ms (%d runs)\n", cs.median, cs.max, a.compile_reps);

  // The first Matcher of a (grammar, vocabulary) pair may build per-pair tables; time it apart.
  const auto t0 = Clock::now();
  { picolm::grammar::Matcher first(g.grammar, vocab); }
  const auto t1 = Clock::now();
  std::printf("first matcher: %.3f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count());

  const tools::WalkVocabulary wv(vocab);
  std::vector<double> mask_us, mask_cpu_us, accept_us, first_walk_mask_us;
  std::map<std::string, int> statuses;
  int tokens = 0;
  double slowest = 0;
  std::string slowest_prefix;
  for (int i = 0; i < a.walks; ++i) {
    tools::WalkOptions wo;
    wo.seed = a.seed + static_cast<uint64_t>(i);
    wo.max_tokens = a.max_tokens;
    wo.time_masks = true;
    const tools::WalkResult w = tools::random_walk(g.grammar, wv, wo);
    statuses[tools::walk_status_name(w.status)]++;
    tokens += w.n_tokens;
    mask_us.insert(mask_us.end(), w.mask_us.begin(), w.mask_us.end());
    mask_cpu_us.insert(mask_cpu_us.end(), w.mask_cpu_us.begin(), w.mask_cpu_us.end());
    if (i == 0) first_walk_mask_us = w.mask_us;
    if (w.slowest_mask_cpu_us > slowest) {
      slowest = w.slowest_mask_cpu_us;
      slowest_prefix = w.slowest_mask_prefix;
    }
    accept_us.insert(accept_us.end(), w.accept_us.begin(), w.accept_us.end());
  }
  std::string st;
  for (const auto& [k, v] : statuses) st += (st.empty() ? "" : ", ") + k + " " + std::to_string(v);
  std::printf("walks: %d (%s), %d tokens\n", a.walks, st.c_str(), tokens);
  const tools::Stats ms = tools::summarize(mask_us);
  const tools::Stats as = tools::summarize(accept_us);
  const tools::Stats fs = tools::summarize(first_walk_mask_us);
  const tools::Stats cpu = tools::summarize(mask_cpu_us);
  std::printf("fill_mask: median %.2f us, p99 %.2f us, max %.2f us, mean %.2f us (%zu calls)\n", ms.median, ms.p99,
              ms.max, ms.mean, ms.n);
  std::printf("fill_mask, thread CPU time: median %.2f us, p99 %.2f us, max %.2f us\n", cpu.median, cpu.p99, cpu.max);
  std::printf("fill_mask, first walk only (cold caches): median %.2f us, p99 %.2f us, max %.2f us (%zu calls)\n",
              fs.median, fs.p99, fs.max, fs.n);
  std::printf("slowest fill_mask: %.1f us CPU, after %zu bytes: \"%s\"\n", slowest, slowest_prefix.size(),
              slowest_prefix.size() > 200 ? (slowest_prefix.substr(0, 80) + " ... " + slowest_prefix.substr(slowest_prefix.size() - 100)).c_str()
                                          : slowest_prefix.c_str());
  std::printf("accept_token: median %.2f us, p99 %.2f us, max %.2f us (%zu calls)\n", as.median, as.p99, as.max, as.n);

  // Shortest completion and closing mode: the same walks switch to closing mode after a random
  // number of tokens (what a budget-aware decoder does when the budget runs low) and must finish
  // within min_completion_tokens() at that point.
  std::vector<double> completion_us, closing_us;
  std::map<std::string, int> closing_statuses;
  int closing_tokens = 0, closing_over = 0;
  for (int i = 0; i < a.walks; ++i) {
    tools::WalkOptions wo;
    wo.seed = a.seed + static_cast<uint64_t>(i);
    wo.max_tokens = a.max_tokens;
    wo.time_masks = true;
    wo.close_after = static_cast<int>((a.seed * 31 + static_cast<uint64_t>(i) * 7) % 40);
    const tools::WalkResult w = tools::random_walk(g.grammar, wv, wo);
    closing_statuses[tools::walk_status_name(w.status)]++;
    completion_us.insert(completion_us.end(), w.completion_us.begin(), w.completion_us.end());
    closing_us.insert(closing_us.end(), w.closing_mask_us.begin(), w.closing_mask_us.end());
    if (w.closing_used >= 0) closing_tokens += w.closing_used;
    if (w.closing_used > w.closing_budget) ++closing_over;
  }
  st.clear();
  for (const auto& [k, v] : closing_statuses) st += (st.empty() ? "" : ", ") + k + " " + std::to_string(v);
  const tools::Stats cps = tools::summarize(completion_us);
  const tools::Stats cls = tools::summarize(closing_us);
  std::printf("closing walks: %d (%s), %d tokens in closing mode, %d over budget\n", a.walks, st.c_str(),
              closing_tokens, closing_over);
  std::printf("min_completion_tokens (every step before closing): median %.2f us, p99 %.2f us, max %.2f us (%zu calls)\n",
              cps.median, cps.p99, cps.max, cps.n);
  std::printf("fill_mask_closing: median %.2f us, p99 %.2f us, max %.2f us (%zu calls)\n", cls.median, cls.p99,
              cls.max, cls.n);
  return 0;
}

}  // namespace

// VmRSS and VmHWM (peak) of this process in MB, from /proc (0 where unavailable).
std::pair<double, double> rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  double rss = 0, hwm = 0;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::atof(line.c_str() + 6) / 1024.0;
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::atof(line.c_str() + 6) / 1024.0;
  }
  return {rss, hwm};
}

int cmd_cache_stress(const Args& a) {
  picolm::grammar::GrammarCache cache(size_t(a.cache_mb) << 20);
  const auto r0 = rss_mb();
  std::printf("before: rss %.1f MB\n", r0.first);
  const auto t0 = Clock::now();
  size_t largest = 0;
  for (int i = 0; i < a.n_schemas; ++i) {
    std::string s = R"({"type":"object","properties":{)";
    for (int k = 0; k < a.n_props; ++k) {
      if (k) s += ',';
      s += "\"p" + std::to_string(i) + "_" + std::to_string(k) + "\":";
      s += k % 3 == 0 ? R"({"type":"string","maxLength":8})" : k % 3 == 1 ? R"({"type":"integer","minimum":0})" : R"({"type":"boolean"})";
    }
    s += "}}";
    const auto r = cache.schema(s);
    if (!r.ok()) {
      std::fprintf(stderr, "schema %d refused: %s", i, r.error_text().c_str());
      return 2;
    }
    largest = std::max(largest, picolm::grammar::grammar_memory_bytes(*r.grammar));
    if ((i + 1) % 40 == 0 || i + 1 == a.n_schemas) {
      const auto r1 = rss_mb();
      std::printf("%4d schemas: cache %.1f MB in %zu entries, rss %.1f MB (peak %.1f MB)\n", i + 1,
                  double(cache.bytes()) / (1 << 20), cache.entries(), r1.first, r1.second);
      std::fflush(stdout);
    }
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("largest grammar %.2f MB; %.1f s (%.0f ms per schema)\n", double(largest) / (1 << 20), sec,
              1000 * sec / a.n_schemas);
  return 0;
}

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  if (a.command == "cache-stress") return cmd_cache_stress(a);
  if (a.command == "compile") return cmd_compile(a);
  if (a.command == "check") return cmd_check(a);
  if (a.command == "sample") return cmd_sample(a);
  return cmd_bench(a);
}
