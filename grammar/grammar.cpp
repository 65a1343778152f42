// Entry points: schema and tool-list compilation, the grammar cache.
#include "grammar/grammar.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <iterator>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "grammar/grammar_impl.h"
#include "grammar/json_value.h"
#include "grammar/schema_compiler.h"

namespace picolm::grammar {

using namespace detail;

std::string CompileResult::error_text() const {
  std::string out;
  for (const auto& e : errors) {
    out += (e.pointer.empty() ? std::string("(root)") : e.pointer);
    if (!e.keyword.empty()) out += " [" + e.keyword + "]";
    out += ": " + e.message + "\n";
  }
  return out;
}

std::string grammar_to_text(const Grammar& grammar) { return grammar.dump(); }

size_t grammar_memory_bytes(const Grammar& grammar) { return grammar.memory_bytes(); }

namespace {
template <class V>
size_t vec_bytes(const V& v) {
  return v.capacity() * sizeof(typename V::value_type);
}
}  // namespace

size_t Grammar::memory_bytes() const {
  size_t n = sizeof(Grammar) + vec_bytes(elems) + vec_bytes(rule_alt_begin) + vec_bytes(alt_starts) +
             vec_bytes(classes) + vec_bytes(self_loop_class) + vec_bytes(loop_class_ids) + vec_bytes(strchar_run) +
             vec_bytes(class_run) + vec_bytes(min_rule_len) + vec_bytes(min_suffix) + description.capacity();
  std::lock_guard<std::mutex> lock(cache_mu);
  // Per entry: the node, the key, the shared vector's control block and words.
  n += mask_cache.bucket_count() * sizeof(void*);
  for (const auto& [key, mask] : mask_cache) n += 64 + key.capacity() + (mask ? 48 + vec_bytes(*mask) : 0);
  n += key_token_cache.bucket_count() * sizeof(void*);
  for (const auto& [key, t] : key_token_cache)
    n += 64 + key.capacity() + (t ? 96 + vec_bytes(t->closing) + vec_bytes(t->closing_more) + vec_bytes(t->opening) +
                                    vec_bytes(t->closing_keyed) + 32 * t->closing_keyed.size() : 0);
  return n;
}

namespace {

std::string mb_text(size_t bytes) {
  return std::to_string(bytes >> 20) + "." + std::to_string(((bytes & ((size_t(1) << 20) - 1)) * 10) >> 20) + " MB";
}

CompileResult finish(RuleBuilder& rb, uint32_t root, std::vector<CompileError> errors, std::string desc) {
  CompileResult res;
  if (rb.over_budget) {
    // Reported alone: the other errors may be artifacts of the truncated rules.
    if (rb.over_scratch)
      res.errors.push_back({"", "size", "schema is too large: compiling it would take more than " +
                                            mb_text(RuleBuilder::kScratchFactor * rb.budget_bytes) + " (" +
                                            std::to_string(RuleBuilder::kScratchFactor) + " x max_grammar_bytes " +
                                            mb_text(rb.budget_bytes) + ")"});
    else
      res.errors.push_back({"", "size", "schema is too large: its grammar would take more than " + mb_text(rb.budget_bytes) +
                                            " (max_grammar_bytes)"});
    return res;
  }
  if (!errors.empty()) {
    res.errors = std::move(errors);
    return res;
  }
  std::string err;
  auto g = Grammar::build(rb, root, err);
  if (!g) {
    res.errors.push_back({"", "", err});
    return res;
  }
  g->description = std::move(desc);
  res.grammar = std::move(g);
  return res;
}

// Free text up to and including the first occurrence of `trigger`, which continues with `after`
// (a KMP automaton over bytes, so the trigger is recognized exactly where it first occurs). With
// `may_end`, the text may also simply end without any trigger. A rule without alternatives as
// `after` gives "text that never contains the trigger".
uint32_t free_text_rule(RuleBuilder& rb, const std::string& trigger, uint32_t after, bool may_end) {
  size_t m = trigger.size();
  std::vector<size_t> fail(m + 1, 0);
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k > 0 && trigger[i] != trigger[k]) k = fail[k];
    if (trigger[i] == trigger[k]) ++k;
    fail[i + 1] = k;
  }
  auto delta = [&](size_t j, unsigned char b) {
    while (j > 0 && static_cast<unsigned char>(trigger[j]) != b) j = fail[j];
    if (static_cast<unsigned char>(trigger[j]) == b) ++j;
    return j;
  };
  std::vector<uint32_t> st(m);
  for (auto& r : st) r = rb.new_rule();
  for (size_t j = 0; j < m; ++j) {
    if (may_end) rb.add_alt(st[j], {});
    std::vector<ByteSet> by(m + 1);
    std::vector<uint8_t> used(m + 1, 0);
    for (int b = 0; b < 256; ++b) {
      size_t nj = delta(j, uint8_t(b));
      byteset_add(by[nj], uint8_t(b));
      used[nj] = 1;
    }
    for (size_t nj = 0; nj <= m; ++nj)
      if (used[nj]) rb.add_alt(st[j], {rb.cls(by[nj]), RuleBuilder::ref(nj == m ? after : st[nj])});
  }
  return st[0];
}

}  // namespace

CompileResult compile_json_schema(std::string_view schema_json, const CompileOptions& opts) {
  RuleBuilder rb;
  rb.budget_bytes = opts.max_grammar_bytes;
  if (!rb.charge_scratch(json_tree_bytes(schema_json))) return finish(rb, 0, {}, "json-schema");
  JValue root;
  std::string perr;
  if (!parse_json(schema_json, root, perr)) {
    CompileResult r;
    r.errors.push_back({"", "", "schema is not valid JSON: " + perr});
    return r;
  }
  std::vector<CompileError> errors;
  uint32_t top = compile_schema_into(rb, root, opts, "", errors);
  return finish(rb, top, std::move(errors), "json-schema");
}

CompileResult compile_tool_list(std::string_view tools_json, const ToolListOptions& opts) {
  CompileResult bad;
  {
    RuleBuilder probe;
    probe.budget_bytes = opts.schema.max_grammar_bytes;
    if (!probe.charge_scratch(json_tree_bytes(tools_json) + json_tree_bytes(opts.answer_schema)))
      return finish(probe, 0, {}, "tools");
  }
  JValue tools;
  std::string perr;
  if (!parse_json(tools_json, tools, perr)) {
    bad.errors.push_back({"", "", "tools are not valid JSON: " + perr});
    return bad;
  }
  if (!tools.is_array() || tools.arr.empty()) {
    bad.errors.push_back({"", "", "tools must be a non-empty array"});
    return bad;
  }
  CompileOptions so = opts.schema;
  so.additional_properties_default = false;
  const bool xml = opts.format == ToolCallFormat::QwenXml;
  const bool python = opts.format == ToolCallFormat::PythonList;
  const bool gemma = opts.format == ToolCallFormat::Gemma4;
  if (python) so.python_literals = true;
  if (gemma) {
    so.gemma4_values = true;
    so.python_literals = false;
    so.whitespace = Whitespace::Compact;
  }
  const ArgumentSyntax syntax = xml ? ArgumentSyntax::XmlParameters
                                : python ? ArgumentSyntax::PythonKwargs
                                         : ArgumentSyntax::JsonObject;
  RuleBuilder rb;
  rb.budget_bytes = so.max_grammar_bytes;
  rb.charge_scratch(json_tree_bytes(tools_json) + json_tree_bytes(opts.answer_schema));  // fits: probed above
  std::vector<CompileError> errors;
  JsonSpacing sp(rb, so);
  uint32_t call = rb.new_rule();
  JValue empty_params;
  empty_params.kind = JValue::Kind::Object;
  {
    JValue t;
    t.kind = JValue::Kind::String;
    t.str = "object";
    empty_params.obj.push_back({"type", t});
  }
  bool forced_found = false;
  std::vector<std::string> seen;
  for (size_t i = 0; i < tools.arr.size(); ++i) {
    const JValue& t = tools.arr[i];
    std::string base = "/" + std::to_string(i);
    const JValue* fn = t.get("function");
    if (!fn) fn = &t;  // also accept bare {"name","parameters"} entries
    else base += "/function";
    const JValue* name = fn->get("name");
    if (!name || !name->is_string() || name->str.empty()) {
      errors.push_back({base + "/name", "name", "tool has no name"});
      continue;
    }
    if (std::find(seen.begin(), seen.end(), name->str) != seen.end()) {
      errors.push_back({base + "/name", "name", "duplicate tool name '" + name->str + "'"});
      continue;
    }
    seen.push_back(name->str);
    if (!opts.forced_tool.empty() && name->str != opts.forced_tool) continue;
    forced_found = true;
    const JValue* params = fn->get("parameters");
    if (!params) params = &empty_params;
    uint32_t p = compile_schema_into(rb, *params, so, base + "/parameters", errors, /*object_only=*/true, syntax);
    if (gemma) {
      // call:NAME{...}: the name is unquoted and ends at the '{' of the arguments object, whose
      // braces carry the key tags (schema_compiler.cpp, object_rule).
      if (!gemma4_name(name->str)) {
        errors.push_back({base + "/name", "name", "tool name '" + name->str + "' cannot be written in this call format"});
        continue;
      }
      std::vector<Elem> seq;
      rb.lit(seq, name->str);
      seq.push_back(RuleBuilder::ref(p));
      rb.add_alt(call, std::move(seq));
      continue;
    }
    if (xml || python) {
      // The name is written unquoted: it must not hold what ends it.
      if (xml ? name->str.find_first_of("<>\r\n") != std::string::npos : !python_identifier(name->str)) {
        errors.push_back({base + "/name", "name", "tool name '" + name->str + "' cannot be written in this call format"});
        continue;
      }
      // Key tags (unique keys): the arguments object opens with the "\n" after the function tag
      // or with the '(' (which also starts the first keyword), and closes with "</function>" /
      // ')'.
      std::vector<Elem> seq;
      rb.lit(seq, xml ? "<function=" + name->str + ">\n" : name->str + "(");
      seq.back() = tagged(seq.back(), xml ? kTagObjOpen : kTagObjOpen | kTagKeyOpen | kTagKeySkipWs);
      seq.push_back(RuleBuilder::ref(p));
      rb.lit(seq, xml ? "</function>" : ")");
      seq.back() = tagged(seq.back(), kTagObjClose);
      rb.add_alt(call, std::move(seq));
      continue;
    }
    std::vector<Elem> seq{rb.byte('{')};
    sp.after_open(seq);
    rb.lit(seq, "\"name\"");
    sp.after_value(seq);
    seq.push_back(rb.byte(':'));
    sp.after_colon(seq);
    rb.lit(seq, json_quote(name->str));
    sp.after_value(seq);
    seq.push_back(rb.byte(','));
    sp.after_comma(seq);
    rb.lit(seq, json_quote(opts.arguments_key));
    sp.after_value(seq);
    seq.push_back(rb.byte(':'));
    sp.after_colon(seq);
    seq.push_back(RuleBuilder::ref(p));
    sp.after_value(seq);
    sp.before_close(seq);
    seq.push_back(rb.byte('}'));
    rb.add_alt(call, std::move(seq));
  }
  if (!opts.forced_tool.empty() && !forced_found)
    errors.push_back({"", "tool_choice", "forced tool '" + opts.forced_tool + "' is not in the tool list"});

  // list ::= '[' call (',' call)* ']'  (exactly one call unless parallel)
  auto list_rule = [&]() {
    uint32_t r = rb.new_rule(), rest = rb.new_rule();
    std::vector<Elem> a{rb.byte('[')};
    sp.after_open(a);
    a.push_back(RuleBuilder::ref(call));
    sp.after_value(a);
    a.push_back(RuleBuilder::ref(rest));
    rb.add_alt(r, std::move(a));
    std::vector<Elem> close;
    sp.before_close(close);
    close.push_back(rb.byte(']'));
    rb.add_alt(rest, std::move(close));
    if (opts.parallel) {
      std::vector<Elem> b{rb.byte(',')};
      sp.after_comma(b);
      b.push_back(RuleBuilder::ref(call));
      sp.after_value(b);
      b.push_back(RuleBuilder::ref(rest));
      rb.add_alt(rest, std::move(b));
    }
    return r;
  };

  // The text answer beside the calls (ToolListOptions::answer_schema).
  std::optional<uint32_t> answer;
  if (!opts.answer_schema.empty()) {
    JValue as;
    std::string aerr;
    if (!parse_json(opts.answer_schema, as, aerr)) {
      errors.push_back({"/answer_schema", "", "answer schema is not valid JSON: " + aerr});
    } else if (opts.format == ToolCallFormat::TriggeredText && opts.allow_text) {
      errors.push_back({"/answer_schema", "", "an answer schema cannot follow free text before a trigger"});
    } else {
      answer = compile_schema_into(rb, as, opts.answer_options, "/answer_schema", errors);
    }
  }

  uint32_t root = rb.new_rule();
  std::string desc;
  switch (opts.format) {
    case ToolCallFormat::JsonObject:
      desc = "tools/json-object";
      rb.add_alt(root, {RuleBuilder::ref(call)});
      if (opts.parallel) rb.add_alt(root, {RuleBuilder::ref(list_rule())});
      break;
    case ToolCallFormat::JsonArray: {
      desc = "tools/json-array";
      std::vector<Elem> a;
      rb.lit(a, opts.array_open);
      a.push_back(RuleBuilder::ref(list_rule()));
      rb.lit(a, opts.array_close);
      rb.add_alt(root, std::move(a));
      break;
    }
    case ToolCallFormat::Hermes: {
      desc = "tools/hermes";
      uint32_t block = rb.new_rule(), rest = rb.new_rule();
      std::vector<Elem> b;
      rb.lit(b, "<tool_call>\n");
      b.push_back(RuleBuilder::ref(call));
      rb.lit(b, "\n</tool_call>");
      rb.add_alt(block, std::move(b));
      rb.add_alt(rest, {});
      if (opts.parallel) {
        std::vector<Elem> r2{rb.byte('\n'), RuleBuilder::ref(block), RuleBuilder::ref(rest)};
        rb.add_alt(rest, std::move(r2));
      }
      rb.add_alt(root, {RuleBuilder::ref(block), RuleBuilder::ref(rest)});
      break;
    }
    case ToolCallFormat::TriggeredText: {
      desc = "tools/triggered-text";
      if (opts.trigger.empty()) {
        errors.push_back({"", "trigger", "TriggeredText needs a non-empty trigger"});
        break;
      }
      if (opts.allow_text) {
        // text* (trigger call text*)*: calls are optional; after a call, more text and (when
        // parallel) more triggered calls.
        uint32_t call_then = rb.new_rule();
        uint32_t never = rb.new_rule();  // no alternatives: the trailing text never has a trigger
        uint32_t tail = free_text_rule(rb, opts.trigger, opts.parallel ? call_then : never, true);
        rb.add_alt(call_then, {RuleBuilder::ref(call), RuleBuilder::ref(tail)});
        rb.add_alt(root, {RuleBuilder::ref(free_text_rule(rb, opts.trigger, call_then, true))});
      } else {
        uint32_t one = rb.new_rule(), rest = rb.new_rule();
        std::vector<Elem> o;
        rb.lit(o, opts.trigger);
        o.push_back(RuleBuilder::ref(call));
        rb.add_alt(one, std::move(o));
        rb.add_alt(rest, {});
        if (opts.parallel) {
          rb.add_alt(rest, {RuleBuilder::ref(one), RuleBuilder::ref(rest)});
          rb.add_alt(rest, {rb.byte('\n'), RuleBuilder::ref(one), RuleBuilder::ref(rest)});
        }
        rb.add_alt(root, {RuleBuilder::ref(one), RuleBuilder::ref(rest)});
      }
      break;
    }
    case ToolCallFormat::QwenXml: {
      // block (\n block)*, as the template joins the calls of one turn.
      desc = "tools/qwen-xml";
      uint32_t block = rb.new_rule(), rest = rb.new_rule();
      std::vector<Elem> b;
      rb.lit(b, "<tool_call>\n");
      b.push_back(RuleBuilder::ref(call));
      rb.lit(b, "\n</tool_call>");
      rb.add_alt(block, std::move(b));
      rb.add_alt(rest, {});
      if (opts.parallel) rb.add_alt(rest, {rb.byte('\n'), RuleBuilder::ref(block), RuleBuilder::ref(rest)});
      rb.add_alt(root, {RuleBuilder::ref(block), RuleBuilder::ref(rest)});
      break;
    }
    case ToolCallFormat::PythonList: {
      // list_open '[' call (', ' call)* ']' list_close; the separator spaced as the schema's
      // whitespace allows after a comma.
      desc = "tools/python-list";
      uint32_t rest = rb.new_rule();
      std::vector<Elem> end{rb.byte(']')};
      rb.lit(end, opts.list_close);
      rb.add_alt(rest, std::move(end));
      if (opts.parallel) {
        std::vector<Elem> more{rb.byte(',')};
        sp.after_comma(more);
        more.push_back(RuleBuilder::ref(call));
        more.push_back(RuleBuilder::ref(rest));
        rb.add_alt(rest, std::move(more));
      }
      std::vector<Elem> a;
      rb.lit(a, opts.list_open);
      a.push_back(rb.byte('['));
      a.push_back(RuleBuilder::ref(call));
      a.push_back(RuleBuilder::ref(rest));
      rb.add_alt(root, std::move(a));
      break;
    }
    case ToolCallFormat::Gemma4: {
      // block block ... (parallel): the template writes the calls of a turn side by side.
      desc = "tools/gemma4";
      uint32_t block = rb.new_rule(), rest = rb.new_rule();
      std::vector<Elem> b;
      rb.lit(b, std::string(kGemma4CallOpen));
      b.push_back(RuleBuilder::ref(call));
      rb.lit(b, std::string(kGemma4CallClose));
      rb.add_alt(block, std::move(b));
      rb.add_alt(rest, {});
      if (opts.parallel) rb.add_alt(rest, {RuleBuilder::ref(block), RuleBuilder::ref(rest)});
      rb.add_alt(root, {RuleBuilder::ref(block), RuleBuilder::ref(rest)});
      break;
    }
    case ToolCallFormat::Envelope: {
      desc = "tools/envelope";
      std::vector<Elem> a{rb.byte('{')};
      sp.after_open(a);
      rb.lit(a, "\"tool_calls\"");
      sp.after_value(a);
      a.push_back(rb.byte(':'));
      sp.after_colon(a);
      a.push_back(RuleBuilder::ref(list_rule()));
      sp.after_value(a);
      sp.before_close(a);
      a.push_back(rb.byte('}'));
      rb.add_alt(root, std::move(a));
      if (opts.allow_text) {
        std::vector<Elem> b{rb.byte('{')};
        sp.after_open(b);
        rb.lit(b, "\"content\"");
        sp.after_value(b);
        b.push_back(rb.byte(':'));
        sp.after_colon(b);
        b.push_back(RuleBuilder::ref(answer ? *answer : plain_string_rule(rb)));
        sp.after_value(b);
        sp.before_close(b);
        b.push_back(rb.byte('}'));
        rb.add_alt(root, std::move(b));
      }
      break;
    }
  }
  if (answer && opts.format != ToolCallFormat::Envelope) {
    // calls | answer, decided by the reply's first bytes (or, for bare JSON calls against an
    // object schema, as late as the recognizer needs: both branches are followed at once).
    const uint32_t either = rb.new_rule();
    rb.add_alt(either, {RuleBuilder::ref(root)});
    rb.add_alt(either, {RuleBuilder::ref(*answer)});
    root = either;
    desc += "+answer";
  }
  return finish(rb, root, std::move(errors), desc);
}

// ---------------------------------------------------------------------------------------------

struct GrammarCache::Impl {
  size_t max_bytes = kDefaultMaxBytes;
  int max_parallel_compiles = 0;  // 0: no limit
  mutable std::mutex mu;
  std::condition_variable compile_turn;  // with mu: a compile finished
  int compiling = 0;                     // guarded by mu
  struct Entry {
    CompileResult result;
    size_t bytes = 0;
    std::list<std::string>::iterator pos;  // in lru
  };
  std::list<std::string> lru;  // least recently used first
  std::unordered_map<std::string, Entry> map;
  size_t total = 0;

  static size_t entry_bytes(const std::string& key, const CompileResult& r) {
    // Key stored twice (map and list) plus node overheads; errors are small.
    size_t n = 2 * key.capacity() + 128;
    if (r.grammar) n += r.grammar->memory_bytes();
    for (const auto& e : r.errors) n += e.pointer.size() + e.keyword.size() + e.message.size() + 96;
    return n;
  }
  // Caller holds mu.
  void evict_to_fit() {
    while (total > max_bytes && !lru.empty()) {
      auto it = map.find(lru.front());
      total -= it->second.bytes;
      map.erase(it);
      lru.pop_front();
    }
  }

  template <class F>
  CompileResult get(std::string key, F&& compile) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = map.find(key);
      if (it != map.end()) {
        Entry& e = it->second;
        lru.splice(lru.end(), lru, e.pos);
        // Its mask cache may have grown since it was measured.
        const size_t now = entry_bytes(it->first, e.result);
        total = total - e.bytes + now;
        e.bytes = now;
        CompileResult r = e.result;
        evict_to_fit();
        return r;
      }
    }
    CompileResult r;
    {
      // A turn among at most max_parallel_compiles, given back however compile() ends.
      struct Turn {
        Impl& c;
        explicit Turn(Impl& cache) : c(cache) {
          if (c.max_parallel_compiles <= 0) return;
          std::unique_lock<std::mutex> lock(c.mu);
          c.compile_turn.wait(lock, [&] { return c.compiling < c.max_parallel_compiles; });
          ++c.compiling;
        }
        ~Turn() {
          if (c.max_parallel_compiles <= 0) return;
          std::lock_guard<std::mutex> lock(c.mu);
          --c.compiling;
          c.compile_turn.notify_one();
        }
      } turn(*this);
      r = compile();  // outside the lock: compiles may run in parallel (up to the limit)
    }
    const size_t bytes = entry_bytes(key, r);
    std::lock_guard<std::mutex> lock(mu);
    if (bytes > max_bytes) return r;  // larger than the whole cache: returned, not kept
    if (map.count(key)) return r;     // another thread compiled it meanwhile
    lru.push_back(key);
    Entry e{r, bytes, std::prev(lru.end())};
    map.emplace(std::move(key), std::move(e));
    total += bytes;
    evict_to_fit();
    return r;
  }
};

namespace {
std::string options_key(const CompileOptions& o) {
  return std::to_string(o.additional_properties_default) + "," + std::to_string(int(o.whitespace)) + "," +
         std::to_string(o.max_whitespace_run) + "," + std::to_string(o.max_indent) + "," +
         std::to_string(o.max_grammar_bytes) + "," + std::to_string(o.python_literals) + "," +
         std::to_string(int(o.property_order)) + "," + std::to_string(o.gemma4_values);
}
}  // namespace

GrammarCache::GrammarCache(size_t max_bytes, int max_parallel_compiles) : impl_(std::make_unique<Impl>()) {
  impl_->max_bytes = max_bytes;
  impl_->max_parallel_compiles = std::max(0, max_parallel_compiles);
}
GrammarCache::~GrammarCache() = default;

size_t GrammarCache::bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->total;
}
size_t GrammarCache::entries() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->map.size();
}
size_t GrammarCache::max_bytes() const { return impl_->max_bytes; }

CompileResult GrammarCache::schema(std::string_view schema_json, const CompileOptions& opts) {
  // The key is the full text plus options (not only a hash): a collision can never return the
  // grammar of another schema.
  std::string key = "S" + options_key(opts) + "\n" + std::string(schema_json);
  return impl_->get(std::move(key), [&] { return compile_json_schema(schema_json, opts); });
}

CompileResult GrammarCache::tools(std::string_view tools_json, const ToolListOptions& opts) {
  std::string key = "T" + options_key(opts.schema) + "," + std::to_string(int(opts.format)) + "," +
                    std::to_string(opts.parallel) + "," + std::to_string(opts.allow_text) + "," +
                    std::to_string(opts.forced_tool.size()) + ":" + opts.forced_tool + "," +
                    std::to_string(opts.trigger.size()) + ":" + opts.trigger + "," +
                    std::to_string(opts.arguments_key.size()) + ":" + opts.arguments_key + "," +
                    std::to_string(opts.list_open.size()) + ":" + opts.list_open + "," +
                    std::to_string(opts.list_close.size()) + ":" + opts.list_close + "," +
                    std::to_string(opts.array_open.size()) + ":" + opts.array_open + "," +
                    std::to_string(opts.array_close.size()) + ":" + opts.array_close + "," +
                    options_key(opts.answer_options) + "," + std::to_string(opts.answer_schema.size()) + ":" +
                    opts.answer_schema + "\n" + std::string(tools_json);
  return impl_->get(std::move(key), [&] { return compile_tool_list(tools_json, opts); });
}

}  // namespace picolm::grammar
