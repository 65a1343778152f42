// The evaluator: statements, expressions, Python's operators, jinja2's filters and tests, the
// methods templates call on strings and dicts, and the globals Hugging Face defines.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>

#include "jinja.h"
#include "jinja_internal.h"
#include "jinja_parse.h"

namespace picolm::jinja {

using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

struct Callable {
  std::string name;
  std::function<Value(Args& args, Kwargs& kwargs)> call;
};

namespace detail {
namespace {

Value make_fn(std::string name, std::function<Value(Args&, Kwargs&)> f) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->call = std::move(f);
  return Value::callable(std::move(c));
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::Dict: return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::Callable: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.is_big_integer() || v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List: return v.is_generator() || !v.items().empty();
    case Value::Kind::Dict: return v.is_namespace() || !v.entries().empty();
    case Value::Kind::Callable: return true;
  }
  return false;
}

bool is_intlike(const Value& v) { return (v.kind() == Value::Kind::Int && !v.is_big_integer()) || v.kind() == Value::Kind::Bool; }
bool is_number(const Value& v) { return is_intlike(v) || v.kind() == Value::Kind::Float; }
int64_t int_of(const Value& v) { return v.kind() == Value::Kind::Bool ? (v.as_bool() ? 1 : 0) : v.as_int(); }
double float_of(const Value& v) { return v.kind() == Value::Kind::Float ? v.as_float() : static_cast<double>(int_of(v)); }

std::string str(const Value& v) { return to_python_str(v); }

bool equal(const Value& a, const Value& b, int depth = 0) {
  if (depth > 200) throw Error("value nested too deeply to compare");
  if (is_number(a) && is_number(b)) {
    if (is_intlike(a) && is_intlike(b)) return int_of(a) == int_of(b);
    return float_of(a) == float_of(b);
  }
  if (a.kind() != b.kind() || a.is_generator() || b.is_generator()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Int: return a.as_string() == b.as_string();  // big integers
    case Value::Kind::String: return a.as_string() == b.as_string();
    case Value::Kind::List: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [k, v] : a.entries()) {
        const Value* o = b.find(k);
        if (!o || !equal(v, *o, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Callable: return a.fn() == b.fn();
    default: return false;
  }
}

// Python's ordering: <0, 0, >0; throws for types Python cannot order.
int compare(const Value& a, const Value& b, const char* op) {
  if (is_number(a) && is_number(b)) {
    if (is_intlike(a) && is_intlike(b)) return int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b) ? 1 : 0;
    const double x = float_of(a), y = float_of(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const size_t n = std::min(a.items().size(), b.items().size());
    for (size_t i = 0; i < n; ++i) {
      if (equal(a.items()[i], b.items()[i])) continue;
      return compare(a.items()[i], b.items()[i], op);
    }
    return a.items().size() < b.items().size() ? -1 : a.items().size() > b.items().size() ? 1 : 0;
  }
  throw Error(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.items();
    case Value::Kind::Dict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      for (const auto& [k, x] : v.entries()) keys.push_back(key_value(k));
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        next_cp(s, i);
        chars.push_back(Value::string(s.substr(start, i - start)));
      }
      return chars;
    }
    default: break;
  }
  throw Error(std::string("'") + type_name(v) + "' object is not iterable");
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return cp_count(v.as_string());
    case Value::Kind::List:
      if (!v.is_generator()) return v.items().size();
      break;
    case Value::Kind::Dict:
      if (!v.is_namespace()) return v.entries().size();
      break;
    default: break;
  }
  throw Error(std::string("object of type '") + type_name(v) + "' has no len()");
}

// --- strings -------------------------------------------------------------------------------

std::string py_strip(const std::string& s, bool left, bool right, const Value* chars) {
  const std::u32string u = to_u32(s);
  std::u32string set;
  const bool by_set = chars && chars->is_string();
  if (chars && !chars->is_string() && !chars->is_none() && !chars->is_undefined()) throw Error("strip arg must be None or str");
  if (by_set) set = to_u32(chars->as_string());
  auto strip_it = [&](char32_t c) { return by_set ? set.find(c) != std::u32string::npos : py_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return from_u32(u.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep && sep->is_string()) {
    const std::string& d = sep->as_string();
    if (d.empty()) throw Error("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        const size_t f = s.find(d, pos);
        if (f == std::string::npos) break;
        out.push_back(s.substr(pos, f - pos));
        pos = f + d.size();
      }
      out.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < d.size()) break;
        const size_t f = s.rfind(d, end - d.size());
        if (f == std::string::npos) break;
        rev.push_back(s.substr(f + d.size(), end - f - d.size()));
        end = f;
      }
      rev.push_back(s.substr(0, end));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  if (sep && !sep->is_none() && !sep->is_undefined()) throw Error("must be str or None");
  // Runs of whitespace; no empty strings.
  const std::u32string u = to_u32(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < u.size() && py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = u.size();
        while (e > i && py_space(u[e - 1])) --e;
        out.push_back(from_u32(u.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !py_space(u[j])) ++j;
      out.push_back(from_u32(u.substr(i, j - i)));
      i = j;
    }
  } else {
    size_t e = u.size();
    std::vector<std::string> rev;
    while (true) {
      while (e > 0 && py_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_space(u[b])) ++b;
        rev.push_back(from_u32(u.substr(b, e - b)));
        break;
      }
      size_t j = e;
      while (j > 0 && !py_space(u[j - 1])) --j;
      rev.push_back(from_u32(u.substr(j, e - j)));
      e = j;
    }
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& a, const std::string& b, int64_t count) {
  std::string out;
  if (a.empty()) {
    // Python inserts b between every character (and at both ends).
    const std::u32string u = to_u32(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += b;
        ++n;
      }
      if (i < u.size()) out += from_u32(u.substr(i, 1));
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t f = s.find(a, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += b;
    pos = f + a.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

char32_t upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  return c;
}
char32_t lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  return c;
}
bool alpha_cp(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0x24F && c != 0xD7 && c != 0xF7); }

std::string map_cps(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = to_u32(s);
  for (auto& c : u) c = f(c);
  return from_u32(u);
}

std::string py_title(const std::string& s) {  // str.title()
  std::u32string u = to_u32(s);
  bool prev_alpha = false;
  for (auto& c : u) {
    const bool a = alpha_cp(c);
    c = a ? (prev_alpha ? lower_cp(c) : upper_cp(c)) : c;
    prev_alpha = a;
  }
  return from_u32(u);
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = to_u32(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? upper_cp(u[i]) : lower_cp(u[i]);
  return from_u32(u);
}

// jinja2's title filter: words start after spaces, '-', '(', '{', '[', '<'.
std::string jinja_title(const std::string& s) {
  std::u32string u = to_u32(s);
  bool start = true;
  for (auto& c : u) {
    const bool sep = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      start = true;
      continue;
    }
    c = start ? upper_cp(c) : lower_cp(c);
    start = false;
  }
  return from_u32(u);
}

// splitlines() boundaries.
std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> out;
  const std::u32string u = to_u32(s);
  size_t b = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 ||
        c == 0x2029) {
      out.push_back(from_u32(u.substr(b, i - b)));
      if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < u.size()) out.push_back(from_u32(u.substr(b)));
  return out;
}

// --- the renderer --------------------------------------------------------------------------

struct Frame {
  Value::Dict vars;
  Frame* parent = nullptr;
  const Value* find(const std::string& name) const {
    for (const Frame* f = this; f; f = f->parent)
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars)
      if (k == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow : uint8_t { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const Options& o, Frame* root) : opt_(o), root_(root) {}

  Flow exec_body(const Body& body, Frame& f) {
    for (const auto& s : body) {
      const Flow fl = exec(*s, f);
      if (fl != Flow::Normal) return fl;
    }
    return Flow::Normal;
  }

  std::string* out_ = nullptr;

 private:
  struct Depth {
    Depth(Renderer& r) : r_(r) {
      if (++r_.depth_ > r_.opt_.max_depth) throw Error("nesting deeper than " + std::to_string(r_.opt_.max_depth) + " (recursion?)", r_.line_);
    }
    ~Depth() { --r_.depth_; }
    Renderer& r_;
  };

  [[noreturn]] void fail(const std::string& m) const { throw Error(m, line_); }

  void step() {
    if (++steps_ > opt_.max_steps) fail("more than " + std::to_string(opt_.max_steps) + " steps (endless loop?)");
  }

  void emit(std::string_view s) {
    out_->append(s);
    if (out_->size() > opt_.max_output_bytes) fail("output larger than " + std::to_string(opt_.max_output_bytes) + " bytes");
  }

  std::string capture(const Body& body, Frame& f) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body, f);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  Flow exec(const Stmt& s, Frame& f) {
    step();
    line_ = s.line;
    try {
      return exec_unchecked(s, f);
    } catch (Error& e) {
      if (e.line == 0) throw Error(e.what(), line_ ? line_ : s.line);
      throw;
    }
  }

  Flow exec_unchecked(const Stmt& s, Frame& f) {
    switch (s.type) {
      case Stmt::Type::Text: emit(s.text); return Flow::Normal;
      case Stmt::Type::Output: {
        const Value v = eval(*s.expr, f);
        if (v.kind() == Value::Kind::Callable) fail("cannot print a function");
        emit(str(v));
        return Flow::Normal;
      }
      case Stmt::Type::If: {
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, f))) return exec_body(body, f);
        return exec_body(s.else_body, f);
      }
      case Stmt::Type::For: return exec_for(s, f);
      case Stmt::Type::Set: {
        Value v = eval(*s.expr, f);
        if (!s.attr.empty()) {
          const Value* ns = f.find(s.text);
          if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object '" + s.text + "'");
          check_nesting(v);
          Value target = *ns;  // shares the namespace's dict
          target.set(s.attr, std::move(v));
        } else {
          assign(s.names, std::move(v), f);
        }
        return Flow::Normal;
      }
      case Stmt::Type::SetBlock: {
        Frame inner;
        inner.parent = &f;
        Value v = Value::string(capture(s.body, inner));
        if (s.expr) v = apply_filter_chain(*s.expr, std::move(v), f);
        f.set(s.text, std::move(v));
        return Flow::Normal;
      }
      case Stmt::Type::Macro: f.set(s.text, make_macro(s)); return Flow::Normal;
      case Stmt::Type::CallBlock: {
        Frame* site = &f;
        const Stmt* st = &s;
        Value caller = make_fn("caller", [this, st, site](Args& args, Kwargs& kwargs) {
          Frame local;
          local.parent = site;
          bind_params(*st, args, kwargs, local, "caller");
          return Value::string(capture(st->body, local));
        });
        pending_caller_ = caller;  // the macro called next takes it as `caller`
        emit(str(eval(*s.expr, f)));
        pending_caller_ = Value();
        return Flow::Normal;
      }
      case Stmt::Type::FilterBlock: {
        Frame inner;
        inner.parent = &f;
        Value v = Value::string(capture(s.body, inner));
        emit(s.expr ? str(apply_filter_chain(*s.expr, std::move(v), f)) : v.as_string());  // no filter: {% generation %}
        return Flow::Normal;
      }
      case Stmt::Type::With: {
        Frame inner;
        inner.parent = &f;
        for (size_t i = 0; i < s.names.size(); ++i) inner.set(s.names[i], eval(*s.defaults[i], f));
        return exec_body(s.body, inner);
      }
      case Stmt::Type::Break: return Flow::Break;
      case Stmt::Type::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  // Values kept across iterations go through `set`; bounding their nesting there keeps
  // `{% set ns.x = [ns.x] %}` in a long loop from building a list so deep that freeing it
  // overflows the stack.
  static bool nested_deeper(const Value& v, int limit) {
    if (limit < 0) return true;
    if (v.is_list())
      for (const auto& x : v.items())
        if ((x.is_list() || x.is_dict()) && nested_deeper(x, limit - 1)) return true;
    if (v.is_dict())
      for (const auto& [k, x] : v.entries())
        if ((x.is_list() || x.is_dict()) && nested_deeper(x, limit - 1)) return true;
    return false;
  }
  void check_nesting(const Value& v) {
    if ((v.is_list() || v.is_dict()) && nested_deeper(v, opt_.max_depth)) fail("value nested deeper than " + std::to_string(opt_.max_depth));
  }

  void assign(const std::vector<std::string>& names, Value v, Frame& f) {
    check_nesting(v);
    if (names.size() == 1) {
      f.set(names[0], std::move(v));
      return;
    }
    const std::vector<Value> items = iterate(v);
    if (items.size() != names.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) + " names");
    for (size_t i = 0; i < names.size(); ++i) f.set(names[i], items[i]);
  }

  Flow exec_for(const Stmt& s, Frame& f) {
    std::vector<Value> items = iterate(eval(*s.expr, f));
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& it : items) {
        Frame probe;
        probe.parent = &f;
        assign(s.names, it, probe);
        if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, f);
    const int64_t n = static_cast<int64_t>(items.size());
    // loop.changed(*values): the values of its last call in this loop (undefined before the first);
    // one function for the whole loop, since that memory is the loop's.
    auto last_changed = std::make_shared<Value>();
    const Value changed = make_fn("changed", [last_changed](Args& args, Kwargs&) {
      Value now = Value::list(args, true);
      if (!last_changed->is_undefined() && equal(*last_changed, now)) return Value::boolean(false);
      *last_changed = std::move(now);
      return Value::boolean(true);
    });
    for (int64_t i = 0; i < n; ++i) {
      step();
      Frame iter;
      iter.parent = &f;
      // The loop object's keys are distinct: appended in jinja2's order without Value::set's search
      // (a template's nested loops build one per iteration; the search made that quadratic in keys).
      Value::Dict d;
      d.reserve(13);
      d.emplace_back("index", Value::integer(i + 1));
      d.emplace_back("index0", Value::integer(i));
      d.emplace_back("revindex", Value::integer(n - i));
      d.emplace_back("revindex0", Value::integer(n - i - 1));
      d.emplace_back("first", Value::boolean(i == 0));
      d.emplace_back("last", Value::boolean(i == n - 1));
      d.emplace_back("length", Value::integer(n));
      d.emplace_back("depth", Value::integer(1));
      d.emplace_back("depth0", Value::integer(0));
      if (i > 0) d.emplace_back("previtem", items[i - 1]);
      if (i + 1 < n) d.emplace_back("nextitem", items[i + 1]);
      d.emplace_back("cycle", make_fn("cycle", [i](Args& args, Kwargs&) {
                       if (args.empty()) throw Error("no items for cycling given");
                       return args[static_cast<size_t>(i) % args.size()];
                     }));
      d.emplace_back("changed", changed);
      Value loop = Value::dict(std::move(d));
      iter.set("loop", std::move(loop));
      assign(s.names, items[i], iter);
      const Flow fl = exec_body(s.body, iter);
      if (fl == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void bind_params(const Stmt& s, Args& args, Kwargs& kwargs, Frame& local, const std::string& what) {
    if (args.size() > s.names.size()) fail("macro '" + what + "' takes not more than " + std::to_string(s.names.size()) + " argument(s)");
    for (size_t i = 0; i < s.names.size(); ++i) {
      Value v;
      bool given = false;
      if (i < args.size()) {
        v = args[i];
        given = true;
      }
      for (auto& [k, x] : kwargs)
        if (k == s.names[i]) {
          if (given) fail("macro '" + what + "' got multiple values for argument '" + k + "'");
          v = x;
          given = true;
        }
      if (!given && s.defaults[i]) v = eval(*s.defaults[i], local);
      local.set(s.names[i], std::move(v));
    }
    for (auto& [k, x] : kwargs)
      if (std::find(s.names.begin(), s.names.end(), k) == s.names.end())
        fail("macro '" + what + "' takes no keyword argument '" + k + "'");
  }

  Value make_macro(const Stmt& s) {
    const Stmt* st = &s;
    return make_fn(s.text, [this, st](Args& args, Kwargs& kwargs) {
      Depth d(*this);
      Frame local;
      local.parent = root_;
      if (!pending_caller_.is_undefined()) {
        local.set("caller", pending_caller_);
        pending_caller_ = Value();
      }
      bind_params(*st, args, kwargs, local, st->text);
      return Value::string(capture(st->body, local));
    });
  }

  // --- expressions ----------------------------------------------------------------------

  Value lookup(const std::string& name, Frame& f) {
    if (const Value* v = f.find(name)) return *v;
    return global(name);
  }

  Value global(const std::string& name) {
    if (name == "range")
      return make_fn(name, [this](Args& a, Kwargs&) {
        int64_t start = 0, stop = 0, stepv = 1;
        for (const auto& x : a)
          if (!is_intlike(x)) fail("range() takes integers");
        if (a.size() == 1) stop = int_of(a[0]);
        else if (a.size() == 2 || a.size() == 3) {
          start = int_of(a[0]);
          stop = int_of(a[1]);
          if (a.size() == 3) stepv = int_of(a[2]);
        } else fail("range() takes 1 to 3 arguments");
        if (stepv == 0) fail("range() arg 3 must not be zero");
        Value out = Value::list();
        for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
          step();
          out.items().push_back(Value::integer(i));
        }
        return out;
      });
    if (name == "dict")
      return make_fn(name, [this](Args& a, Kwargs& kw) {
        Value out = Value::dict();
        if (a.size() > 1) fail("dict expected at most 1 argument");
        if (a.size() == 1) {
          if (!a[0].is_dict()) fail("dict() takes a mapping");
          for (const auto& [k, v] : a[0].entries()) out.set(k, v);
        }
        for (auto& [k, v] : kw) out.set(k, v);
        return out;
      });
    if (name == "namespace")
      return make_fn(name, [this](Args& a, Kwargs& kw) {
        Value out = Value::dict({}, true);
        for (const auto& x : a) {
          if (!x.is_dict()) fail("namespace() takes a mapping");
          for (const auto& [k, v] : x.entries()) out.set(k, v);
        }
        for (auto& [k, v] : kw) out.set(k, v);
        return out;
      });
    if (name == "raise_exception")
      return make_fn(name, [this](Args& a, Kwargs&) -> Value {
        fail("raise_exception: " + (a.empty() ? std::string() : str(a[0])));
      });
    if (name == "strftime_now")
      return make_fn(name, [this](Args& a, Kwargs&) -> Value {
        if (!opt_.strftime_now) fail("strftime_now is not available");
        if (a.size() != 1 || !a[0].is_string()) fail("strftime_now(format) takes one string");
        return Value::string(opt_.strftime_now(a[0].as_string()));
      });
    return Value();
  }

  static bool is_dict_method(const std::string& n) {
    static const char* const m[] = {"items", "keys", "values", "get", "pop", "update", "copy", "setdefault", "clear", "popitem", nullptr};
    for (const char* const* p = m; *p; ++p)
      if (n == *p) return true;
    return false;
  }
  static bool is_str_method(const std::string& n) {
    static const char* const m[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace", "find", "rfind",
                                    "count", "upper", "lower", "title", "capitalize", "join", "splitlines", "isdigit", "isalpha",
                                    "isspace", "isalnum", "islower", "isupper", "index", "format", "partition", "rpartition",
                                    "removeprefix", "removesuffix", "ljust", "rjust", "center", "zfill", "casefold", "swapcase",
                                    "isnumeric", "isdecimal", "istitle", "expandtabs", "rindex", nullptr};
    for (const char* const* p = m; *p; ++p)
      if (n == *p) return true;
    return false;
  }
  static bool is_list_method(const std::string& n) {
    static const char* const m[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", "index", "count", "copy", nullptr};
    for (const char* const* p = m; *p; ++p)
      if (n == *p) return true;
    return false;
  }

  Value bound(const Value& self, const std::string& name) {
    return make_fn(name, [this, self, name](Args& a, Kwargs& kw) { return call_method(self, name, a, kw); });
  }

  Value getattr(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
      case Value::Kind::Undefined: fail("'" + name + "': attribute of an undefined value");
      case Value::Kind::Dict:
        if (obj.is_namespace()) {
          const Value* v = obj.find(name);
          return v ? *v : Value();
        }
        if (is_dict_method(name)) return bound(obj, name);
        {
          const Value* v = obj.find(name);
          return v ? *v : Value();
        }
      case Value::Kind::String:
        if (is_str_method(name)) return bound(obj, name);
        return Value();
      case Value::Kind::List:
        // jinja2 3.1's immutable sandbox answers these with an undefined value (pop and clear it
        // lets through; calling them fails here, see call_method).
        if (name == "append" || name == "reverse" || name == "insert" || name == "sort" || name == "extend" || name == "remove") return Value();
        if (is_list_method(name)) return bound(obj, name);
        return Value();
      default: return Value();
    }
  }

  Value getitem(const Value& obj, const Value& key) {
    switch (obj.kind()) {
      case Value::Kind::Undefined: fail("subscript of an undefined value");
      case Value::Kind::Dict: {
        if (obj.is_namespace()) fail("'Namespace' object is not subscriptable");
        // jinja2 answers an unhashable key (a list, a dict) with Undefined, like a missing one.
        if (key.is_undefined() || key.is_dict() || (key.is_list() && !key.is_tuple())) return Value();
        if (const Value* v = find_key(obj, key)) return *v;
        if (key.is_string() && is_dict_method(key.as_string())) return bound(obj, key.as_string());
        return Value();
      }
      case Value::Kind::List:
        if (obj.is_generator()) fail("'generator' object is not subscriptable");
        if (is_intlike(key)) {
          int64_t i = int_of(key);
          const int64_t n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value();
          return obj.items()[static_cast<size_t>(i)];
        }
        if (key.is_string()) return getattr(obj, key.as_string());
        return Value();
      case Value::Kind::String:
        if (is_intlike(key)) {
          const std::u32string u = to_u32(obj.as_string());
          int64_t i = int_of(key);
          const int64_t n = static_cast<int64_t>(u.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value();
          return Value::string(from_u32(u.substr(static_cast<size_t>(i), 1)));
        }
        if (key.is_string()) return getattr(obj, key.as_string());
        return Value();
      default: return Value();
    }
  }

  Value slice(const Value& obj, const Value& a, const Value& b, const Value& c) {
    auto opt_int = [&](const Value& v, bool& given) -> int64_t {
      given = false;
      if (v.is_undefined() || v.is_none()) return 0;
      if (!is_intlike(v)) fail("slice indices must be integers or None");
      given = true;
      return int_of(v);
    };
    bool has_a, has_b, has_c;
    int64_t start = opt_int(a, has_a), stop = opt_int(b, has_b), stepv = opt_int(c, has_c);
    if (!has_c) stepv = 1;
    if (stepv == 0) fail("slice step cannot be zero");
    std::vector<Value> items;
    std::u32string u;
    const bool is_str = obj.is_string();
    int64_t n;
    if (is_str) {
      u = to_u32(obj.as_string());
      n = static_cast<int64_t>(u.size());
    } else if (obj.is_list() && !obj.is_generator()) {
      n = static_cast<int64_t>(obj.items().size());
    } else if (obj.is_undefined()) {
      fail("subscript of an undefined value");
    } else {
      fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
    }
    // Python's PySlice_AdjustIndices.
    auto adjust = [&](int64_t v, bool given, int64_t dflt) {
      if (!given) return dflt;
      if (v < 0) {
        v += n;
        if (v < 0) v = stepv < 0 ? -1 : 0;
      } else if (v >= n) {
        v = stepv < 0 ? n - 1 : n;
      }
      return v;
    };
    start = adjust(start, has_a, stepv < 0 ? n - 1 : 0);
    stop = adjust(stop, has_b, stepv < 0 ? -1 : n);
    std::u32string us;
    Value out = Value::list({}, obj.is_tuple());
    for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
      if (is_str) us += u[static_cast<size_t>(i)];
      else out.items().push_back(obj.items()[static_cast<size_t>(i)]);
    }
    if (is_str) return Value::string(from_u32(us));
    return out;
  }

  Value eval(const Expr& e, Frame& f) {
    Depth d(*this);
    line_ = e.line;
    switch (e.type) {
      case Expr::Type::Literal: return e.literal;
      case Expr::Type::Name: return lookup(e.name, f);
      case Expr::Type::GetAttr: {
        Value obj = eval(*e.target, f);
        line_ = e.line;
        return getattr(obj, e.name);
      }
      case Expr::Type::GetItem: {
        Value obj = eval(*e.target, f);
        Value key = eval(*e.args[0], f);
        line_ = e.line;
        return getitem(obj, key);
      }
      case Expr::Type::Slice: {
        Value obj = eval(*e.target, f);
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (e.args[k]) parts[k] = eval(*e.args[k], f);
        line_ = e.line;
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Type::Call: {
        Value fn = eval(*e.target, f);
        Args args;
        Kwargs kw;
        eval_args(e, f, args, kw);
        line_ = e.line;
        if (fn.kind() != Value::Kind::Callable) {
          if (fn.is_undefined()) fail("call of an undefined value" + (e.target->type == Expr::Type::Name ? " '" + e.target->name + "'" : std::string()));
          fail(std::string("'") + type_name(fn) + "' object is not callable");
        }
        Value r = fn.fn()->call(args, kw);
        return r;
      }
      case Expr::Type::Filter: {
        Value in = eval(*e.target, f);
        return apply_filter(e, std::move(in), f);
      }
      case Expr::Type::Test: {
        Value in = eval(*e.target, f);
        Args args;
        Kwargs kw;
        eval_args(e, f, args, kw);
        line_ = e.line;
        const bool r = apply_test(e.name, in, args);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Type::Neg:
      case Expr::Type::Pos: {
        Value v = eval(*e.args[0], f);
        line_ = e.line;
        if (!is_number(v)) fail(std::string("bad operand type for unary ") + (e.type == Expr::Type::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
        if (e.type == Expr::Type::Pos) return is_intlike(v) ? Value::integer(int_of(v)) : v;
        if (is_intlike(v)) {
          if (int_of(v) == INT64_MIN) fail("integer overflow");
          return Value::integer(-int_of(v));
        }
        return Value::number(-v.as_float());
      }
      case Expr::Type::Not: return Value::boolean(!truthy(eval(*e.args[0], f)));
      case Expr::Type::And: {
        Value l = eval(*e.args[0], f);
        if (!truthy(l)) return l;
        return eval(*e.args[1], f);
      }
      case Expr::Type::Or: {
        Value l = eval(*e.args[0], f);
        if (truthy(l)) return l;
        return eval(*e.args[1], f);
      }
      case Expr::Type::Cond: {
        if (truthy(eval(*e.args[0], f))) return eval(*e.args[1], f);
        if (e.args.size() > 2) return eval(*e.args[2], f);
        return Value();
      }
      case Expr::Type::ListLit:
      case Expr::Type::TupleLit: {
        Value out = Value::list({}, e.type == Expr::Type::TupleLit);
        for (const auto& a : e.args) out.items().push_back(eval(*a, f));
        return out;
      }
      case Expr::Type::DictLit: {
        Value out = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i], f);
          set_key(out, k, eval(*e.args[i + 1], f));
        }
        return out;
      }
      case Expr::Type::Binary: {
        Value l = eval(*e.args[0], f);
        Value r = eval(*e.args[1], f);
        line_ = e.line;
        return binary(e.name, l, r);
      }
    }
    return Value();
  }

  void eval_args(const Expr& e, Frame& f, Args& args, Kwargs& kw) {
    for (const auto& a : e.args) args.push_back(eval(*a, f));
    for (const auto& [k, v] : e.kwargs) kw.emplace_back(k, eval(*v, f));
  }

  Value binary(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return Value::boolean(equal(l, r));
    if (op == "!=") return Value::boolean(!equal(l, r));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) fail("'in <string>' requires string as left operand, not " + std::string(type_name(l)));
        found = r.as_string().find(l.as_string()) != std::string::npos;
      } else if (r.is_list()) {
        for (const auto& x : r.items())
          if (equal(l, x)) {
            found = true;
            break;
          }
      } else if (r.is_dict() && !r.is_namespace()) {
        found = !l.is_undefined() && find_key(r, l) != nullptr;
      } else if (!r.is_undefined()) {
        fail(std::string("argument of type '") + type_name(r) + "' is not iterable");
      }
      return Value::boolean(op == "in" ? found : !found);
    }
    if (op == "~") return Value::string(str(l) + str(r));
    // str % args formats an undefined argument as "" (Python's str.__mod__ runs first).
    if (op == "%" && l.is_string()) return Value::string(py_percent_format(l.as_string(), r));
    if (l.is_undefined() || r.is_undefined()) fail("operator '" + op + "' on an undefined value");
    if (op == "<") return Value::boolean(compare(l, r, "<") < 0);
    if (op == ">") return Value::boolean(compare(l, r, ">") > 0);
    if (op == "<=") return Value::boolean(compare(l, r, "<=") <= 0);
    if (op == ">=") return Value::boolean(compare(l, r, ">=") >= 0);
    if (is_number(l) && is_number(r)) {
      const bool ints = is_intlike(l) && is_intlike(r);
      const int64_t a = ints ? int_of(l) : 0, b = ints ? int_of(r) : 0;
      const double x = float_of(l), y = float_of(r);
      int64_t res = 0;
      if (op == "+") {
        if (!ints) return Value::number(x + y);
        if (__builtin_add_overflow(a, b, &res)) fail("integer overflow");
        return Value::integer(res);
      }
      if (op == "-") {
        if (!ints) return Value::number(x - y);
        if (__builtin_sub_overflow(a, b, &res)) fail("integer overflow");
        return Value::integer(res);
      }
      if (op == "*") {
        if (!ints) return Value::number(x * y);
        if (__builtin_mul_overflow(a, b, &res)) fail("integer overflow");
        return Value::integer(res);
      }
      if (op == "/") {
        if (y == 0) fail("division by zero");
        return Value::number(x / y);
      }
      if (op == "//" || op == "%") {
        if (y == 0) fail("integer division or modulo by zero");
        if (ints) {
          if (a == INT64_MIN && b == -1) fail("integer overflow");
          int64_t q = a / b, m = a % b;
          if (m != 0 && ((m < 0) != (b < 0))) {
            --q;
            m += b;
          }
          return Value::integer(op == "//" ? q : m);
        }
        const double m = std::fmod(x, y);
        const double mm = (m != 0 && ((m < 0) != (y < 0))) ? m + y : m;
        if (op == "%") return Value::number(mm);
        return Value::number(std::floor((x - mm) / y + 0.5 * 0) == 0 ? std::floor(x / y) : std::floor(x / y));
      }
      if (op == "**") {
        if (ints && b >= 0) {
          int64_t acc = 1;
          for (int64_t k = 0; k < b; ++k) {
            if (__builtin_mul_overflow(acc, a, &acc)) fail("integer overflow");
            if (acc == 0 || acc == 1) break;
          }
          return Value::integer(acc);
        }
        return Value::number(std::pow(x, y));
      }
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        if (l.is_markup() || r.is_markup())
          return Value::markup((l.is_markup() ? l.as_string() : html_escape(l.as_string())) + (r.is_markup() ? r.as_string() : html_escape(r.as_string())));
        return Value::string(l.as_string() + r.as_string());
      }
      if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple() && !l.is_generator() && !r.is_generator()) {
        Value out = Value::list(l.items(), l.is_tuple());
        for (const auto& x : r.items()) out.items().push_back(x);
        return out;
      }
      if (l.is_string()) fail(std::string("can only concatenate str (not \"") + type_name(r) + "\") to str");
    }
    if (op == "*") {
      const Value* seq = is_intlike(r) ? &l : &r;
      const Value* cnt = is_intlike(r) ? &r : &l;
      if (is_intlike(*cnt) && (seq->is_string() || (seq->is_list() && !seq->is_generator()))) {
        const int64_t n = int_of(*cnt);
        if (n > 0 && (seq->is_string() ? seq->as_string().size() : seq->items().size()) * static_cast<uint64_t>(n) > opt_.max_output_bytes)
          fail("repetition too large");
        if (seq->is_string()) {
          std::string out;
          for (int64_t k = 0; k < n; ++k) out += seq->as_string();
          return Value::string(out);
        }
        Value out = Value::list({}, seq->is_tuple());
        for (int64_t k = 0; k < n; ++k)
          for (const auto& x : seq->items()) out.items().push_back(x);
        return out;
      }
    }
    fail("unsupported operand type(s) for " + op + ": '" + type_name(l) + "' and '" + type_name(r) + "'");
  }

  // --- methods -----------------------------------------------------------------------------

  static const Value* arg(Args& a, Kwargs& kw, size_t i, const char* name) {
    if (i < a.size()) return &a[i];
    for (auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
  std::string str_arg(Args& a, Kwargs& kw, size_t i, const char* name, const char* what) {
    const Value* v = arg(a, kw, i, name);
    if (!v || !v->is_string()) fail(std::string(what) + ": argument '" + name + "' must be a string");
    return v->as_string();
  }
  int64_t int_arg(Args& a, Kwargs& kw, size_t i, const char* name, int64_t dflt) {
    const Value* v = arg(a, kw, i, name);
    if (!v || v->is_none()) return dflt;
    if (!is_intlike(*v)) fail(std::string("argument '") + name + "' must be an integer");
    return int_of(*v);
  }

  Value call_method(const Value& self, const std::string& name, Args& a, Kwargs& kw) {
    if (self.is_dict()) {
      if (name == "items") {
        Value out = Value::list();
        for (const auto& [k, v] : self.entries()) out.items().push_back(Value::list({key_value(k), v}, true));
        return out;
      }
      if (name == "keys") {
        Value out = Value::list();
        for (const auto& [k, v] : self.entries()) out.items().push_back(key_value(k));
        return out;
      }
      if (name == "values") {
        Value out = Value::list();
        for (const auto& [k, v] : self.entries()) out.items().push_back(v);
        return out;
      }
      if (name == "get") {
        if (a.empty()) fail("get expected at least 1 argument");
        const Value* v = a[0].is_undefined() ? nullptr : find_key(self, a[0]);
        if (v) return *v;
        return a.size() > 1 ? a[1] : Value::none();
      }
      if (name == "copy") return Value::dict(self.entries());
      fail("access to attribute '" + name + "' of 'dict' object is unsafe");
    }
    if (self.is_list()) {
      if (name == "index") {
        if (a.empty()) fail("index expected 1 argument");
        for (size_t i = 0; i < self.items().size(); ++i)
          if (equal(self.items()[i], a[0])) return Value::integer(static_cast<int64_t>(i));
        fail("value is not in list");
      }
      if (name == "count") {
        if (a.empty()) fail("count expected 1 argument");
        int64_t n = 0;
        for (const auto& x : self.items()) n += equal(x, a[0]);
        return Value::integer(n);
      }
      if (name == "copy") return Value::list(self.items());
      // pop and clear: jinja2 3.1 runs them, changing the list in place; lists here are shared
      // with the caller's context, which a render must not change, so they fail the render.
      fail("list." + name + "() changes the list in place, which this interpreter does not do");
    }
    const std::string& s = self.as_string();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::string(py_strip(s, name != "rstrip", name != "lstrip", arg(a, kw, 0, "chars")));
    if (name == "split" || name == "rsplit") {
      Value out = Value::list();
      for (auto& p : py_split(s, arg(a, kw, 0, "sep"), int_arg(a, kw, 1, "maxsplit", -1), name == "rsplit"))
        out.items().push_back(Value::string(std::move(p)));
      return out;
    }
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(a, kw, 0, "prefix");
      if (!p) fail(name + " takes at least 1 argument");
      std::vector<std::string> cands;
      if (p->is_string()) cands.push_back(p->as_string());
      else if (p->is_tuple()) {
        for (const auto& x : p->items()) {
          if (!x.is_string()) fail(name + " first arg must be str or a tuple of str");
          cands.push_back(x.as_string());
        }
      } else fail(name + " first arg must be str or a tuple of str");
      for (const auto& c : cands) {
        if (name == "startswith" ? s.starts_with(c) : s.ends_with(c)) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "replace")
      return Value::string(py_replace(s, str_arg(a, kw, 0, "old", "replace"), str_arg(a, kw, 1, "new", "replace"), int_arg(a, kw, 2, "count", -1)));
    if (name == "find" || name == "rfind" || name == "index") {
      const std::string sub = str_arg(a, kw, 0, "sub", name.c_str());
      const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") fail("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(cp_count(s.substr(0, p))));
    }
    if (name == "count") {
      const std::string sub = str_arg(a, kw, 0, "sub", "count");
      if (sub.empty()) return Value::integer(static_cast<int64_t>(cp_count(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    if (name == "upper") return Value::string(map_cps(s, upper_cp));
    if (name == "lower") return Value::string(map_cps(s, lower_cp));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(py_capitalize(s));
    if (name == "splitlines") {
      Value out = Value::list();
      for (auto& p : py_splitlines(s)) out.items().push_back(Value::string(std::move(p)));
      return out;
    }
    if (name == "join") {
      if (a.empty()) fail("join takes 1 argument");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(a[0])) {
        if (!x.is_string()) fail("sequence item: expected str instance");
        if (!first) out += s;
        first = false;
        out += x.as_string();
      }
      return Value::string(out);
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "islower" || name == "isupper") {
      const std::u32string u = to_u32(s);
      if (u.empty()) return Value::boolean(false);
      bool ok = true, cased = false;
      for (char32_t c : u) {
        const bool digit = c >= '0' && c <= '9';
        if (name == "isdigit") ok &= digit;
        else if (name == "isalpha") ok &= alpha_cp(c);
        else if (name == "isspace") ok &= py_space(c);
        else if (name == "isalnum") ok &= digit || alpha_cp(c);
        else if (name == "islower") {
          if (upper_cp(c) != c) cased = true;
          if (lower_cp(c) != c) ok = false;
        } else {
          if (lower_cp(c) != c) cased = true;
          if (upper_cp(c) != c) ok = false;
        }
      }
      if (name == "islower" || name == "isupper") ok = ok && cased;
      return Value::boolean(ok);
    }
    if (name == "format") return Value::string(py_format(s, a, kw));
    if (name == "partition" || name == "rpartition") {
      const std::string sep = str_arg(a, kw, 0, "sep", name.c_str());
      if (sep.empty()) fail("empty separator");
      const size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (p == std::string::npos)
        return name == "partition" ? Value::list({Value::string(s), Value::string(""), Value::string("")}, true)
                                   : Value::list({Value::string(""), Value::string(""), Value::string(s)}, true);
      return Value::list({Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))}, true);
    }
    if (name == "removeprefix" || name == "removesuffix") {
      const std::string x = str_arg(a, kw, 0, name == "removeprefix" ? "prefix" : "suffix", name.c_str());
      if (name == "removeprefix") return Value::string(s.starts_with(x) ? s.substr(x.size()) : s);
      return Value::string(!x.empty() && s.ends_with(x) ? s.substr(0, s.size() - x.size()) : s);
    }
    if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
      const int64_t width = int_arg(a, kw, 0, "width", -1);
      if (width < 0 && !arg(a, kw, 0, "width")) fail(name + " expected at least 1 argument");
      if (width > static_cast<int64_t>(opt_.max_output_bytes)) fail(name + ": width too large");
      std::string fill = " ";
      if (name != "zfill") {
        if (const Value* fc = arg(a, kw, 1, "fillchar")) {
          if (!fc->is_string() || cp_count(fc->as_string()) != 1) fail("The fill character must be exactly one character long");
          fill = fc->as_string();
        }
      }
      const int64_t len = static_cast<int64_t>(cp_count(s));
      if (width <= len) return Value::string(s);
      const int64_t n = width - len;
      auto fills = [&](int64_t k, const std::string& c) {
        std::string out;
        for (int64_t j = 0; j < k; ++j) out += c;
        return out;
      };
      if (name == "ljust") return Value::string(s + fills(n, fill));
      if (name == "rjust") return Value::string(fills(n, fill) + s);
      if (name == "zfill") {
        if (!s.empty() && (s[0] == '+' || s[0] == '-')) return Value::string(s.substr(0, 1) + fills(n, "0") + s.substr(1));
        return Value::string(fills(n, "0") + s);
      }
      // str.center puts the odd extra fill on the left when the width is odd (CPython's pad()).
      const int64_t left = n / 2 + (n & width & 1);
      return Value::string(fills(left, fill) + s + fills(n - left, fill));
    }
    if (name == "casefold") return Value::string(map_cps(s, lower_cp));
    if (name == "swapcase")
      return Value::string(map_cps(s, [](char32_t c) {
        const char32_t u = upper_cp(c);
        return u != c ? u : lower_cp(c);
      }));
    if (name == "isnumeric" || name == "isdecimal") {
      const std::u32string u = to_u32(s);
      return Value::boolean(!u.empty() && std::all_of(u.begin(), u.end(), [](char32_t c) { return c >= '0' && c <= '9'; }));
    }
    if (name == "istitle") {
      bool cased = false, prev_cased = false, ok = true;
      for (char32_t c : to_u32(s)) {
        const bool is_upper = lower_cp(c) != c, is_lower = upper_cp(c) != c;
        if (is_upper) {
          if (prev_cased) ok = false;
          prev_cased = cased = true;
        } else if (is_lower) {
          if (!prev_cased) ok = false;
          prev_cased = cased = true;
        } else prev_cased = false;
      }
      return Value::boolean(ok && cased);
    }
    if (name == "expandtabs") {
      const int64_t size = int_arg(a, kw, 0, "tabsize", 8);
      std::string out;
      int64_t col = 0;
      for (char32_t c : to_u32(s)) {
        if (c == '\t') {
          if (size > 0) {
            const int64_t k = size - col % size;
            out.append(static_cast<size_t>(k), ' ');
            col += k;
          }
        } else {
          append_utf8(out, c);
          col = c == '\n' || c == '\r' ? 0 : col + 1;
        }
      }
      return Value::string(out);
    }
    if (name == "rindex") {
      const std::string sub = str_arg(a, kw, 0, "sub", "rindex");
      const size_t p = s.rfind(sub);
      if (p == std::string::npos) fail("substring not found");
      return Value::integer(static_cast<int64_t>(cp_count(s.substr(0, p))));
    }
    fail("string method '" + name + "' is not supported");
  }

  // str.format with the fields templates use: "{}", "{0}", "{name}", "{{", "}}", an optional
  // "!s" / "!r" conversion, and no format spec (a spec fails the render rather than being ignored).
  std::string py_format(const std::string& s, const Args& a, const Kwargs& kw) {
    std::string out;
    size_t next_auto = 0;
    bool used_auto = false, used_manual = false;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '}') {
        if (i + 1 < s.size() && s[i + 1] == '}') {
          out += '}';
          ++i;
          continue;
        }
        fail("Single '}' encountered in format string");
      }
      if (c != '{') {
        out += c;
        continue;
      }
      if (i + 1 < s.size() && s[i + 1] == '{') {
        out += '{';
        ++i;
        continue;
      }
      const size_t end = s.find('}', i + 1);
      if (end == std::string::npos) fail("Single '{' encountered in format string");
      std::string field = s.substr(i + 1, end - i - 1);
      i = end;
      std::string spec;
      if (const size_t colon = field.find(':'); colon != std::string::npos) {
        spec = field.substr(colon + 1);
        field.resize(colon);
        if (spec.find_first_of("{}") != std::string::npos) fail("nested replacement fields are not supported in str.format");
      }
      char conversion = 0;
      if (const size_t bang = field.find('!'); bang != std::string::npos) {
        if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r')) fail("unsupported conversion in format string");
        conversion = field[bang + 1];
        field.resize(bang);
      }
      if (field.find_first_of(".[") != std::string::npos) fail("field attributes and indexes are not supported in str.format");
      const Value* v = nullptr;
      if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t index;
        if (field.empty()) {
          if (used_manual) fail("cannot switch from manual field specification to automatic field numbering");
          used_auto = true;
          index = next_auto++;
        } else {
          if (used_auto) fail("cannot switch from automatic field numbering to manual field specification");
          used_manual = true;
          index = field.size() > 9 ? a.size() : std::stoul(field);
        }
        if (index >= a.size()) fail("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
        v = &a[index];
      } else {
        for (const auto& [k, x] : kw)
          if (k == field) v = &x;
        if (!v) fail("KeyError: '" + field + "'");
      }
      if (v->is_undefined()) {
        if (!spec.empty()) fail("unsupported format string passed to Undefined.__format__");
        continue;  // jinja2's Undefined formats as ""
      }
      if (conversion == 'r') out += py_format_spec(Value::string(v->is_string() ? py_repr_string(v->as_string()) : str(*v)), spec);
      else if (conversion == 's') out += py_format_spec(Value::string(str(*v)), spec);
      else out += py_format_spec(*v, spec);
    }
    return out;
  }

  // --- filters -----------------------------------------------------------------------------

  Value apply_filter_chain(const Expr& chain, Value in, Frame& f) {
    // The chain's innermost filter has no target.
    if (chain.target) in = apply_filter_chain(*chain.target, std::move(in), f);
    return apply_filter(chain, std::move(in), f);
  }

  Value apply_filter(const Expr& e, Value in, Frame& f) {
    Args args;
    Kwargs kw;
    eval_args(e, f, args, kw);
    line_ = e.line;
    return filter(e.name, std::move(in), args, kw);
  }

  std::string soft_str(const Value& v) { return str(v); }

  Value attribute_of(const Value& item, const std::string& path) {
    Value cur = item;
    size_t pos = 0;
    while (true) {
      const size_t dot = path.find('.', pos);
      const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      cur = digits ? getitem(cur, Value::integer(std::stoll(part))) : getitem(cur, Value::string(part));
      if (dot == std::string::npos) return cur;
      pos = dot + 1;
    }
  }

  std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const std::string& attribute) {
    auto key = [&](const Value& v) {
      Value k = attribute.empty() ? v : attribute_of(v, attribute);
      if (!case_sensitive && k.is_string()) return Value::string(map_cps(k.as_string(), lower_cp));
      return k;
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& v : items) keyed.emplace_back(key(v), std::move(v));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? compare(y.first, x.first, "<") < 0 : compare(x.first, y.first, "<") < 0;
    });
    std::vector<Value> out;
    for (auto& [k, v] : keyed) out.push_back(std::move(v));
    return out;
  }

  bool kw_bool(Kwargs& kw, Args& a, size_t i, const char* name, bool dflt) {
    const Value* v = arg(a, kw, i, name);
    return v ? truthy(*v) : dflt;
  }

  Value filter(const std::string& name, Value in, Args& a, Kwargs& kw) {
    if (name == "safe") return in.is_markup() ? in : Value::markup(soft_str(in));
    if (name == "string") return in.is_markup() ? in : Value::string(soft_str(in));
    if (name == "trim") {
      std::string t = py_strip(soft_str(in), true, true, arg(a, kw, 0, "chars"));
      return in.is_markup() ? Value::markup(std::move(t)) : Value::string(std::move(t));
    }
    if (name == "tojson") {
      int indent = -1;
      std::string item_sep = ", ", key_sep = ": ";
      const Value* ind = arg(a, kw, 1, "indent");
      if (ind && is_intlike(*ind)) {
        indent = static_cast<int>(std::clamp<int64_t>(int_of(*ind), 0, 64));
        item_sep = ",";
      } else if (ind && !ind->is_none()) fail("tojson: indent must be an integer");
      if (const Value* sep = arg(a, kw, 2, "separators"); sep && !sep->is_none()) {
        if (!sep->is_list() || sep->items().size() != 2 || !sep->items()[0].is_string() || !sep->items()[1].is_string())
          fail("tojson: separators must be a pair of strings");
        item_sep = sep->items()[0].as_string();
        key_sep = sep->items()[1].as_string();
      }
      Value v = in;
      if (kw_bool(kw, a, 3, "sort_keys", false)) v = sort_keys(in, 0);
      std::string out = to_json(v, indent, item_sep, key_sep);
      if (kw_bool(kw, a, 0, "ensure_ascii", false)) out = ascii_escape(out);
      return Value::string(out);
    }
    if (name == "length" || name == "count") return Value::integer(static_cast<int64_t>(length(in)));
    if (name == "items") {
      if (in.is_undefined()) return Value::list();
      if (!in.is_dict()) fail("Can only get item pairs from a mapping.");
      Args none;
      return call_method(in, "items", none, kw);
    }
    if (name == "list") return Value::list(iterate(in));
    if (name == "first") {
      const auto items = iterate(in);
      return items.empty() ? Value() : items.front();
    }
    if (name == "last") {
      if (in.is_dict() || in.is_generator()) fail(std::string("'") + (in.is_dict() ? "dict" : "generator") + "' object is not reversible");
      const auto items = iterate(in);
      return items.empty() ? Value() : items.back();
    }
    if (name == "reverse") {
      if (in.is_string()) {
        std::u32string u = to_u32(in.as_string());
        std::reverse(u.begin(), u.end());
        return Value::string(from_u32(u));
      }
      auto items = iterate(in);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (name == "join") {
      const Value* sepv = arg(a, kw, 0, "d");
      const std::string sep = sepv ? soft_str(*sepv) : "";
      const Value* attr = arg(a, kw, 1, "attribute");
      std::string out;
      bool first = true;
      for (const auto& x : iterate(in)) {
        if (!first) out += sep;
        first = false;
        out += soft_str(attr && attr->is_string() ? attribute_of(x, attr->as_string()) : x);
      }
      return Value::string(out);
    }
    if (name == "replace") {
      const Value* old_v = arg(a, kw, 0, "old");
      const Value* new_v = arg(a, kw, 1, "new");
      if (!old_v || !new_v) fail("replace takes old and new");
      return Value::string(py_replace(soft_str(in), soft_str(*old_v), soft_str(*new_v), int_arg(a, kw, 2, "count", -1)));
    }
    if (name == "lower") return Value::string(map_cps(soft_str(in), lower_cp));
    if (name == "upper") return Value::string(map_cps(soft_str(in), upper_cp));
    if (name == "title") return Value::string(jinja_title(soft_str(in)));
    if (name == "capitalize") return Value::string(py_capitalize(soft_str(in)));
    if (name == "default" || name == "d") {
      const Value* dflt = arg(a, kw, 0, "default_value");
      const bool boolean = kw_bool(kw, a, 1, "boolean", false);
      if (in.is_undefined() || (boolean && !truthy(in))) return dflt ? *dflt : Value::string("");
      return in;
    }
    if (name == "int") {
      const int64_t dflt = int_arg(a, kw, 0, "default", 0);
      const int64_t base = int_arg(a, kw, 1, "base", 10);
      if (base != 10 && in.is_string()) {
        // int(s, base) after stripping; a 0x / 0o / 0b prefix is allowed for its base (or base 0).
        std::string t = py_strip(in.as_string(), true, true, nullptr);
        std::erase(t, '_');
        bool neg = false;
        if (!t.empty() && (t[0] == '-' || t[0] == '+')) {
          neg = t[0] == '-';
          t.erase(0, 1);
        }
        int b = static_cast<int>(base);
        auto prefixed = [&](char p) { return t.size() > 2 && t[0] == '0' && (t[1] == p || t[1] == p - 32); };
        if ((b == 16 || b == 0) && prefixed('x')) b = 16, t.erase(0, 2);
        else if ((b == 8 || b == 0) && prefixed('o')) b = 8, t.erase(0, 2);
        else if ((b == 2 || b == 0) && prefixed('b')) b = 2, t.erase(0, 2);
        if (b < 2 || b > 36) return Value::integer(dflt);
        int64_t v = 0;
        auto r = std::from_chars(t.data(), t.data() + t.size(), v, b);
        if (r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty()) return Value::integer(neg ? -v : v);
        return Value::integer(dflt);
      }
      if (is_intlike(in)) return Value::integer(int_of(in));
      if (in.kind() == Value::Kind::Float) {
        if (!std::isfinite(in.as_float())) return Value::integer(dflt);
        return Value::integer(static_cast<int64_t>(std::trunc(in.as_float())));
      }
      if (in.is_string()) {
        const std::string t = py_strip(in.as_string(), true, true, nullptr);
        int64_t v = 0;
        auto r = std::from_chars(t.data(), t.data() + t.size(), v);
        if (r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty()) return Value::integer(v);
        double d = 0;
        auto rd = std::from_chars(t.data(), t.data() + t.size(), d);
        if (rd.ec == std::errc() && rd.ptr == t.data() + t.size() && !t.empty() && std::isfinite(d))
          return Value::integer(static_cast<int64_t>(std::trunc(d)));
        return Value::integer(dflt);
      }
      if (in.is_undefined()) fail("int of an undefined value");
      return Value::integer(dflt);
    }
    if (name == "float") {
      const Value* dv = arg(a, kw, 0, "default");
      const double dflt = dv && is_number(*dv) ? float_of(*dv) : 0.0;
      if (is_number(in)) return Value::number(float_of(in));
      if (in.is_string()) {
        const std::string t = py_strip(in.as_string(), true, true, nullptr);
        double d = 0;
        auto rd = std::from_chars(t.data(), t.data() + t.size(), d);
        if (rd.ec == std::errc() && rd.ptr == t.data() + t.size() && !t.empty()) return Value::number(d);
        return Value::number(dflt);
      }
      if (in.is_undefined()) fail("float of an undefined value");
      return Value::number(dflt);
    }
    if (name == "abs") {
      if (!is_number(in)) fail(std::string("bad operand type for abs(): '") + type_name(in) + "'");
      if (is_intlike(in)) {
        if (int_of(in) == INT64_MIN) fail("integer overflow");
        return Value::integer(std::llabs(int_of(in)));
      }
      return Value::number(std::fabs(in.as_float()));
    }
    if (name == "round") {
      const int64_t prec = int_arg(a, kw, 0, "precision", 0);
      const Value* mv = arg(a, kw, 1, "method");
      const std::string method = mv && mv->is_string() ? mv->as_string() : "common";
      if (!is_number(in)) fail("round of a non-number");
      const double x = float_of(in), p = std::pow(10.0, static_cast<double>(prec));
      if (method == "ceil") return Value::number(std::ceil(x * p) / p);
      if (method == "floor") return Value::number(std::floor(x * p) / p);
      if (method != "common") fail("method must be 'common', 'ceil' or 'floor'");
      if (is_intlike(in)) return Value::integer(int_of(in));
      const double r = std::nearbyint(x * p) / p;  // banker's rounding, as Python's round
      return Value::number(r);
    }
    if (name == "indent") {
      const Value* w = arg(a, kw, 0, "width");
      std::string ind = w && w->is_string() ? w->as_string() : std::string(static_cast<size_t>(std::clamp<int64_t>(w ? int_of(*w) : 4, 0, 256)), ' ');
      const bool first = kw_bool(kw, a, 1, "first", false);
      const bool blank = kw_bool(kw, a, 2, "blank", false);
      const std::string s = soft_str(in) + "\n";
      std::vector<std::string> lines = py_splitlines(s);
      std::string rv;
      if (blank) {
        for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
      } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
      }
      if (first) rv = ind + rv;
      return Value::string(rv);
    }
    if (name == "map") {
      Value out = Value::generator({});
      if (!truthy(in)) return out;
      const Value* attr = nullptr;
      for (auto& [k, v] : kw)
        if (k == "attribute") attr = &v;
      if (attr) {
        const Value* dflt = nullptr;
        for (auto& [k, v] : kw)
          if (k == "default") dflt = &v;
        for (const auto& x : iterate(in)) {
          Value v = attribute_of(x, soft_str(*attr));
          out.items().push_back(v.is_undefined() && dflt ? *dflt : v);
        }
        return out;
      }
      if (a.empty() || !a[0].is_string()) fail("map requires a filter name or attribute=");
      const std::string fname = a[0].as_string();
      Args rest(a.begin() + 1, a.end());
      for (const auto& x : iterate(in)) {
        Args copy = rest;
        Kwargs kcopy = kw;
        out.items().push_back(filter(fname, x, copy, kcopy));
      }
      return out;
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name.ends_with("attr");
      const bool want = name.starts_with("select");
      size_t k = 0;
      std::string attr;
      if (by_attr) {
        if (a.empty() || !a[0].is_string()) fail(name + " requires an attribute name");
        attr = a[0].as_string();
        k = 1;
      }
      std::string test;
      if (k < a.size()) {
        if (!a[k].is_string()) fail(name + ": the test must be a name");
        test = a[k].as_string();
        ++k;
      }
      Args targs(a.begin() + static_cast<std::ptrdiff_t>(std::min(k, a.size())), a.end());
      Value out = Value::generator({});
      if (!truthy(in)) return out;
      for (const auto& x : iterate(in)) {
        const Value v = by_attr ? attribute_of(x, attr) : x;
        const bool r = test.empty() ? truthy(v) : apply_test(test, v, targs);
        if (r == want) out.items().push_back(x);
      }
      return out;
    }
    if (name == "unique") {
      const bool cs = kw_bool(kw, a, 0, "case_sensitive", false);
      const Value* attr = arg(a, kw, 1, "attribute");
      Value out = Value::generator({});
      std::vector<Value> seen;
      for (const auto& x : iterate(in)) {
        Value key = attr && attr->is_string() ? attribute_of(x, attr->as_string()) : x;
        if (!cs && key.is_string()) key = Value::string(map_cps(key.as_string(), lower_cp));
        bool dup = false;
        for (const auto& s : seen) dup = dup || equal(s, key);
        if (dup) continue;
        seen.push_back(key);
        out.items().push_back(x);
      }
      return out;
    }
    if (name == "sort") {
      const Value* attr = arg(a, kw, 2, "attribute");
      return Value::list(sorted(iterate(in), kw_bool(kw, a, 0, "reverse", false), kw_bool(kw, a, 1, "case_sensitive", false),
                                attr && attr->is_string() ? attr->as_string() : ""));
    }
    if (name == "dictsort") {
      if (!in.is_dict()) fail("dictsort of a non-mapping");
      const bool cs = kw_bool(kw, a, 0, "case_sensitive", false);
      const Value* by = arg(a, kw, 1, "by");
      const bool by_value = by && by->is_string() && by->as_string() == "value";
      const bool rev = kw_bool(kw, a, 2, "reverse", false);
      std::vector<Value> pairs;
      for (const auto& [k, v] : in.entries()) pairs.push_back(Value::list({key_value(k), v}, true));
      return Value::list(sorted(std::move(pairs), rev, cs, by_value ? "1" : "0"));
    }
    if (name == "min" || name == "max") {
      auto items = iterate(in);
      if (items.empty()) return Value();
      const Value* attr = arg(a, kw, 1, "attribute");
      items = sorted(std::move(items), false, kw_bool(kw, a, 0, "case_sensitive", false), attr && attr->is_string() ? attr->as_string() : "");
      return name == "min" ? items.front() : items.back();
    }
    if (name == "sum") {
      const Value* attr = arg(a, kw, 0, "attribute");
      const Value* start = arg(a, kw, 1, "start");
      Value acc = start ? *start : Value::integer(0);
      for (const auto& x : iterate(in)) acc = binary("+", acc, attr && attr->is_string() ? attribute_of(x, attr->as_string()) : x);
      return acc;
    }
    if (name == "attr") {
      if (a.empty() || !a[0].is_string()) fail("attr requires a name");
      return getattr(in, a[0].as_string());
    }
    if (name == "escape" || name == "e" || name == "forceescape") {
      if (in.is_markup() && name != "forceescape") return in;
      return Value::markup(html_escape(soft_str(in)));
    }
    if (name == "batch") {
      const int64_t n = int_arg(a, kw, 0, "linecount", 1);
      if (n <= 0) fail("batch size must be positive");
      Value out = Value::list();
      Value cur = Value::list();
      for (const auto& x : iterate(in)) {
        cur.items().push_back(x);
        if (static_cast<int64_t>(cur.items().size()) == n) {
          out.items().push_back(cur);
          cur = Value::list();
        }
      }
      if (!cur.items().empty()) {
        if (const Value* fill = arg(a, kw, 1, "fill_with"))
          while (static_cast<int64_t>(cur.items().size()) < n) cur.items().push_back(*fill);
        out.items().push_back(cur);
      }
      return out;
    }
    if (name == "wordcount") {
      // len(re.findall(r"\w+", s)): runs of letters, digits and '_' (non-ASCII: letters, roughly).
      auto word = [](char32_t c) {
        if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        return !py_space(c) && c != 0xA0 && c != 0xAD && !(c >= 0x80 && c < 0xC0 && c != 0xAA && c != 0xB5 && c != 0xBA) && c != 0xD7 &&
               c != 0xF7 && !(c >= 0x2000 && c <= 0x2BFF) && !(c >= 0x3000 && c <= 0x3003) && !(c >= 0x1F000 && c <= 0x1FAFF);
      };
      int64_t n = 0;
      bool in_word = false;
      for (char32_t c : to_u32(soft_str(in))) {
        const bool w = word(c);
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value::integer(n);
    }
    if (name == "format") {
      const std::string fmt = soft_str(in);
      if (!a.empty() && !kw.empty()) fail("can't handle positional and keyword arguments at the same time");
      Value args;
      if (!kw.empty()) {
        args = Value::dict();
        for (auto& [k, v] : kw) args.set(k, v);
      } else {
        args = Value::list(a, true);
      }
      return Value::string(py_percent_format(fmt, args));
    }
    if (name == "center") {
      const int64_t width = int_arg(a, kw, 0, "width", 80);
      Args ca{Value::integer(width)};
      Kwargs none;
      return call_method(Value::string(soft_str(in)), "center", ca, none);
    }
    if (name == "truncate") {
      // jinja2's do_truncate: length 255, killwords False, end '...', leeway 5.
      const std::string text = soft_str(in);
      const int64_t length = int_arg(a, kw, 0, "length", 255);
      const Value* kill = arg(a, kw, 1, "killwords");
      const Value* endv = arg(a, kw, 2, "end");
      const int64_t leeway = int_arg(a, kw, 3, "leeway", 5);
      const std::string end = endv && endv->is_string() ? endv->as_string() : "...";
      const std::u32string u = to_u32(text);
      const int64_t end_len = static_cast<int64_t>(cp_count(end));
      if (length < end_len) fail("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
      if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
      if (static_cast<int64_t>(u.size()) <= length + leeway) return Value::string(text);
      const std::u32string head = u.substr(0, static_cast<size_t>(length - end_len));
      if (kill && truthy(*kill)) return Value::string(from_u32(head) + end);
      const size_t sp = head.rfind(U' ');
      const std::u32string kept = sp == std::u32string::npos ? head : head.substr(0, sp);  // head.rsplit(" ", 1)[0]
      return Value::string(from_u32(kept) + end);
    }
    if (name == "slice") {
      const int64_t slices = int_arg(a, kw, 0, "slices", 1);
      if (slices <= 0) fail("slice count must be positive");
      const Value* fill = arg(a, kw, 1, "fill_with");
      const std::vector<Value> seq = iterate(in);
      const int64_t length = static_cast<int64_t>(seq.size());
      const int64_t per = length / slices, extra = length % slices;
      int64_t offset = 0;
      Value out = Value::list();
      for (int64_t k = 0; k < slices; ++k) {
        const int64_t start = offset + k * per;
        if (k < extra) ++offset;
        const int64_t stop = offset + (k + 1) * per;
        Value part = Value::list(std::vector<Value>(seq.begin() + start, seq.begin() + stop));
        if (fill && !fill->is_none() && k >= extra) part.items().push_back(*fill);
        out.items().push_back(std::move(part));
      }
      return Value::generator(std::move(out.items()));
    }
    if (name == "groupby") {
      const Value* attr = arg(a, kw, 0, "attribute");
      if (!attr || !(attr->is_string() || is_intlike(*attr))) fail("groupby needs an attribute");
      const Value* dflt = arg(a, kw, 1, "default");
      const bool cs = kw_bool(kw, a, 2, "case_sensitive", false);
      const std::string path = attr->is_string() ? attr->as_string() : std::to_string(int_of(*attr));
      auto key_of = [&](const Value& x) {
        Value k = attribute_of(x, path);
        if (k.is_undefined() && dflt) k = *dflt;
        return k;
      };
      std::vector<Value> items = sorted(iterate(in), false, cs, path);
      Value out = Value::list();
      for (size_t i = 0; i < items.size();) {
        const Value key = key_of(items[i]);
        auto fold = [&](const Value& k) { return !cs && k.is_string() ? Value::string(map_cps(k.as_string(), lower_cp)) : k; };
        Value group = Value::list();
        size_t j = i;
        while (j < items.size() && equal(fold(key_of(items[j])), fold(key))) group.items().push_back(items[j++]);
        // jinja2's _GroupTuple: a (grouper, list) tuple, printed as a plain tuple; the grouper is the
        // first item's own key, also when grouping ignored case.
        out.items().push_back(Value::list({key, group}, true));
        i = j;
      }
      return out;
    }
    fail("unknown filter '" + name + "'");
  }

  Value sort_keys(const Value& v, int depth) {
    if (depth > 200) fail("value nested too deeply");
    if (v.is_list()) {
      Value out = Value::list({}, v.is_tuple());
      for (const auto& x : v.items()) out.items().push_back(sort_keys(x, depth + 1));
      return out;
    }
    if (v.is_dict()) {
      Value::Dict d = v.entries();
      std::stable_sort(d.begin(), d.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      for (auto& [k, x] : d) x = sort_keys(x, depth + 1);
      return Value::dict(std::move(d));
    }
    return v;
  }

  static std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return out;
  }

  static std::string ascii_escape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      const uint32_t c = next_cp(s, i);
      if (c < 0x80) {
        out += static_cast<char>(c);
        continue;
      }
      char buf[16];
      if (c >= 0x10000) {
        const uint32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    }
    return out;
  }

  // --- tests -------------------------------------------------------------------------------

  bool apply_test(const std::string& name, const Value& v, Args& a) {
    auto need = [&](size_t n) {
      if (a.size() < n) fail("test '" + name + "' needs an argument");
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.is_namespace();
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
    if (name == "sequence") return v.is_string() || (v.is_list() && !v.is_generator()) || (v.is_dict() && !v.is_namespace());
    if (name == "number") return is_number(v) || v.is_big_integer();
    if (name == "integer") return v.kind() == Value::Kind::Int;
    if (name == "float") return v.kind() == Value::Kind::Float;
    if (name == "boolean") return v.kind() == Value::Kind::Bool;
    if (name == "true") return v.kind() == Value::Kind::Bool && v.as_bool();
    if (name == "false") return v.kind() == Value::Kind::Bool && !v.as_bool();
    if (name == "callable") return v.kind() == Value::Kind::Callable || v.is_undefined();  // jinja2's Undefined has __call__
    if (name == "escaped") return false;
    if (name == "equalto" || name == "eq" || name == "==") return need(1), equal(v, a[0]);
    if (name == "ne" || name == "!=") return need(1), !equal(v, a[0]);
    if (name == "lt" || name == "lessthan" || name == "<") return need(1), compare(v, a[0], "<") < 0;
    if (name == "le" || name == "<=") return need(1), compare(v, a[0], "<=") <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return need(1), compare(v, a[0], ">") > 0;
    if (name == "ge" || name == ">=") return need(1), compare(v, a[0], ">=") >= 0;
    if (name == "in") return need(1), truthy(binary("in", v, a[0]));
    if (name == "sameas") {
      need(1);
      if (v.kind() != a[0].kind()) return false;
      if (v.is_none() || v.is_undefined()) return true;
      if (v.kind() == Value::Kind::Bool) return v.as_bool() == a[0].as_bool();
      return equal(v, a[0]) && (v.is_list() || v.is_dict() ? &v.items() == &a[0].items() : true);
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (!is_intlike(v)) fail("test '" + name + "' needs an integer");
      if (name == "divisibleby") {
        need(1);
        if (!is_intlike(a[0]) || int_of(a[0]) == 0) fail("divisibleby needs a non-zero integer");
        return int_of(v) % int_of(a[0]) == 0;
      }
      return (int_of(v) % 2 != 0) == (name == "odd");
    }
    if (name == "lower" || name == "upper") {
      const std::string s = str(v);
      return name == "lower" ? map_cps(s, lower_cp) == s : map_cps(s, upper_cp) == s;
    }
    fail("unknown test '" + name + "'");
  }

  const Options& opt_;
  Frame* root_;
  Value pending_caller_;
  int line_ = 0;
  int depth_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace
}  // namespace detail

namespace {

RenderResult render_body(const detail::Body& body, const Value& context, const Options& options) {
  RenderResult r;
  try {
    detail::Frame root;
    if (context.is_dict())
      for (const auto& [k, v] : context.entries()) root.set(k, v);
    else if (!context.is_undefined() && !context.is_none()) {
      r.error = "the context must be a dict";
      return r;
    }
    detail::Renderer ren(options, &root);
    ren.out_ = &r.text;
    ren.exec_body(body, root);
    r.ok = true;
  } catch (const detail::Error& e) {
    r.ok = false;
    r.text.clear();
    r.error = "template line " + std::to_string(e.line) + ": " + e.what();
  } catch (const std::bad_alloc&) {
    r.ok = false;
    r.text.clear();
    r.error = "out of memory while rendering the template";
  }
  return r;
}

}  // namespace

RenderResult render(std::string_view template_text, const Value& context, const Options& options) {
  RenderResult r;
  try {
    const detail::Body body = detail::parse_template(template_text, options.max_depth);
    return render_body(body, context, options);
  } catch (const detail::Error& e) {
    r.error = "template line " + std::to_string(e.line) + ": " + e.what();
  } catch (const std::bad_alloc&) {
    r.error = "out of memory while rendering the template";
  }
  return r;
}

struct Template::Body {
  detail::Body statements;
};
Template::Template() = default;
Template::~Template() = default;
Template::Template(const Template&) = default;
Template& Template::operator=(const Template&) = default;

bool Template::parse(std::string_view text, Template* out, std::string* error, int max_depth) {
  try {
    auto body = std::make_shared<Body>();
    body->statements = detail::parse_template(text, max_depth);
    out->body_ = std::move(body);
    return true;
  } catch (const detail::Error& e) {
    if (error) *error = "template line " + std::to_string(e.line) + ": " + e.what();
  } catch (const std::bad_alloc&) {
    if (error) *error = "out of memory while parsing the template";
  }
  return false;
}

RenderResult Template::render(const Value& context, const Options& options) const {
  if (!body_) {
    RenderResult r;
    r.error = "no template";
    return r;
  }
  return render_body(body_->statements, context, options);
}

}  // namespace picolm::jinja
