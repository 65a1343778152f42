// JSON Schema -> byte-level grammar rules.
//
// Pipeline: (1) scan the whole document once and report every keyword we do not support, with its
// JSON pointer; (2) each schema is flattened into a disjunction of "flat" schemas (no $ref/allOf/
// anyOf/oneOf at the top: those are merged or distributed); (3) each flat schema becomes rules
// per allowed JSON type. Subschemas (properties, items) are compiled lazily and memoized by node,
// so recursive $refs become recursive rules.
//
// Soundness first: the grammar may generate a SUBSET of the valid instances (fixed property order,
// canonical numbers, no optional escapes in patterned strings), never a superset. When a keyword
// combination cannot be compiled exactly or conservatively, compilation fails with an error.
#include "grammar/schema_compiler.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "grammar/regex_dfa.h"

namespace picolm::grammar::detail {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Integer bounds beyond this are clamped toward the inside of the range (generation stays sound).
constexpr int64_t kIntLimit = 999999999999999;  // 10^15 - 1: exact in a double

enum TypeBit : uint8_t {
  kNull = 1, kBool = 2, kObj = 4, kArr = 8, kStr = 16, kNumFrac = 32, kInt = 64, kAllTypes = 127
};

// The TypeBits of a "type" value (a name or a list of names; unknown names give none). "number"
// is both bit kinds of numbers, "integer" only the integral one.
uint8_t type_bits(const JValue& t) {
  auto bit = [](const std::string& n) -> uint8_t {
    if (n == "null") return kNull;
    if (n == "boolean") return kBool;
    if (n == "object") return kObj;
    if (n == "array") return kArr;
    if (n == "string") return kStr;
    if (n == "number") return kNumFrac | kInt;
    if (n == "integer") return kInt;
    return 0;
  };
  if (t.is_string()) return bit(t.str);
  uint8_t bits = 0;
  for (const auto& x : t.arr)
    if (x.is_string()) bits |= bit(x.str);
  return bits;
}

const std::set<std::string, std::less<>>& annotation_keywords() {
  static const std::set<std::string, std::less<>> s = {
      "description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
      "writeOnly", "$schema", "$id", "contentMediaType", "contentEncoding", "contentSchema",
      "$anchor", "$vocabulary", "example", "nullable", "discriminator", "x-order"};
  return s;
}
const std::set<std::string, std::less<>>& unsupported_keywords() {
  static const std::set<std::string, std::less<>> s = {
      "if", "then", "else", "uniqueItems", "dependentRequired", "dependentSchemas",
      "dependencies", "patternProperties", "contains", "minContains", "maxContains",
      "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
      "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"};
  return s;
}
const std::set<std::string, std::less<>>& known_formats() {
  static const std::set<std::string, std::less<>> s = {"date-time", "date", "time", "uuid", "email",
                                                       "ipv4", "ipv6", "uri", "hostname"};
  return s;
}

std::string pointer_escape(std::string_view k) {
  std::string o;
  for (char c : k) {
    if (c == '~') o += "~0";
    else if (c == '/') o += "~1";
    else o += c;
  }
  return o;
}

struct Sub {
  std::vector<const JValue*> conj;  // all must hold; empty = true
};

struct Flat {
  std::string ptr;
  uint8_t types = kAllTypes;
  bool has_enum = false;
  std::vector<const JValue*> enum_vals;
  double lo = -kInf, hi = kInf;
  std::string lo_text, hi_text;  // source spelling of the bounds (exact decimal handling)
  bool lo_excl = false, hi_excl = false;
  double multiple_of = 0;  // 0: none; else the step is exactly step_m / 10^step_s
  int64_t step_m = 0;
  int step_s = 0;
  int64_t min_len = 0, max_len = -1;
  std::vector<std::string> patterns;
  std::vector<std::string> formats;
  std::vector<Sub> prefix;
  Sub items;
  int64_t min_items = 0, max_items = -1;
  std::vector<std::pair<std::string, Sub>> props;
  std::vector<std::string> required;
  bool additional_set = false;
  Sub additional;
  int64_t min_props = 0, max_props = -1;
  std::vector<const JValue*> property_names;  // propertyNames schemas (all must hold)
  std::vector<const JValue*> not_values;      // `not` of a const/enum: values excluded
  std::vector<std::vector<std::string>> not_required;  // `not` of a required set: not all present
  bool not_true = false, not_false = false;           // set by compile_flat from not_values
};

// A positive decimal step m = M / 10^S (M not a multiple of 10 unless S = 0), from the number's
// source spelling, so that 0.01 is exactly 1/100 and never the double 0.01000000000000000020816...
struct Step {
  bool ok = false;
  int64_t m = 0;
  int s = 0;
};
constexpr int64_t kMaxStepM = 1000000;
constexpr int kMaxStepS = 12;

int64_t pow10i(int e) {
  int64_t p = 1;
  while (e-- > 0) p *= 10;
  return p;
}

std::string format_regex(std::string_view f) {
  // Exactly the calendar dates of years 0001-9999 (the proleptic Gregorian calendar of RFC 3339;
  // year 0000 is left out, as Python's datetime does): 30 days in April, June, September and
  // November, and February 29 in leap years only: years divisible by 4 but not by 100 (YY
  // followed by 04, 08, 12, ..., 96), or by 400 (0400, 0800, 1200, 1600, 2000, 2400, ...: a
  // century YY itself divisible by 4). Compared with Python's datetime for every string
  // YYYY-MM-DD with MM 00-13 and DD 00-32 (no difference); the unit test `format date and
  // date-time: exactly the calendar dates` compares selected years with the Gregorian rule.
  const std::string date =
      "((000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|"
      "(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|"
      "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29)";
  const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  const std::string label = "[A-Za-z0-9]([A-Za-z0-9]|-[A-Za-z0-9]){0,20}";
  const std::string last_label = "[A-Za-z]([A-Za-z0-9]|-[A-Za-z0-9]){0,20}";
  const std::string pchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
  if (f == "date") return date;
  if (f == "time") return time;
  if (f == "date-time") return date + "T" + time;
  if (f == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (f == "email")
    return "[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@(" + label + "\\.){1,3}" + last_label;
  if (f == "ipv4") {
    const std::string oct = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    return oct + "\\." + oct + "\\." + oct + "\\." + oct;
  }
  if (f == "ipv6") return "([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}";
  if (f == "hostname") return "(" + label + "\\.){0,2}" + last_label;
  if (f == "uri")
    // RFC 3986 reg-name is permissive (unreserved / pct-encoded / sub-delims), so the host part
    // needs no label structure.
    return "[a-zA-Z][a-zA-Z0-9+.-]*://[A-Za-z0-9._~-]+(:[0-9]{1,5})?(/" + pchar + "*)*(\\?(" + pchar + "|[/?])*)?";
  return "";
}

// The format automata are fixed, so they are built once per process (immutable after the first
// use, like the StrChar table) instead of on every compile.
const Dfa* format_dfa(const std::string& name) {
  static const std::map<std::string, Dfa, std::less<>> table = [] {
    std::map<std::string, Dfa, std::less<>> m;
    for (const auto& f : known_formats()) {
      RegexOutcome r = compile_regex(format_regex(f), true, 20000);
      if (r.ok) m.emplace(f, std::move(r.dfa));
    }
    return m;
  }();
  auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

// An exact decimal from a JSON number's source text: sign, integer digits (no leading zeros),
// fraction digits (no trailing zeros). ok = false when it does not fit the exact path.
struct Decimal {
  bool ok = false;
  bool neg = false;
  int64_t ip = 0;
  std::string fp;
};

Decimal parse_decimal(const std::string& text) {
  Decimal d;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') { d.neg = true; ++i; }
  std::string digits;
  long point = -1;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') point = long(digits.size());
    else digits += text[i];
  }
  if (point < 0) point = long(digits.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    long e = std::strtol(text.c_str() + i + 1, nullptr, 10);
    if (e > 40 || e < -40) return d;
    point += e;
  }
  while (point < 0) { digits.insert(digits.begin(), '0'); ++point; }
  while (long(digits.size()) < point) digits += '0';
  std::string ip = digits.substr(0, size_t(point)), fp = digits.substr(size_t(point));
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  size_t nz = ip.find_first_not_of('0');
  ip = nz == std::string::npos ? "0" : ip.substr(nz);
  if (ip.size() > 15 || fp.size() > 40) return d;
  d.ip = std::stoll(ip);
  d.fp = fp;
  if (d.ip == 0 && d.fp.empty()) d.neg = false;
  d.ok = true;
  return d;
}

Step parse_step(const std::string& text) {
  Step st;
  Decimal d = parse_decimal(text);
  if (!d.ok || d.neg || d.fp.size() > size_t(kMaxStepS) || d.ip > kMaxStepM) return st;
  int64_t m = d.ip;
  for (char c : d.fp) {
    m = m * 10 + (c - '0');
    if (m > kMaxStepM * 1000) return st;
  }
  int s = int(d.fp.size());
  if (m == 0) return st;
  while (s > 0 && m % 10 == 0) { m /= 10; --s; }
  if (m > kMaxStepM) return st;
  st.ok = true;
  st.m = m;
  st.s = s;
  return st;
}

// Whether the decimal `d` is an exact multiple of the step: d * 10^s is an integer divisible by m
// (digit by digit, no floating point).
bool decimal_multiple_of(const Decimal& d, const Step& st) {
  if (d.fp.size() > size_t(st.s)) return false;
  int64_t rem = d.ip % st.m;
  for (int k = 0; k < st.s; ++k) {
    int digit = k < int(d.fp.size()) ? d.fp[size_t(k)] - '0' : 0;
    rem = (rem * 10 + digit) % st.m;
  }
  return rem == 0;
}

// Regex over fraction digit strings F (non-empty, last digit non-zero) with 0.F >= 0.D (or >),
// D non-empty without trailing zeros.
std::string frac_ge(const std::string& D, bool strict) {
  std::vector<std::string> alts;
  for (size_t i = 0; i < D.size(); ++i)
    if (D[i] < '9')
      alts.push_back(D.substr(0, i) + "[" + std::string(1, char(D[i] + 1)) + "-9]([0-9]*[1-9])?");
  if (!strict) alts.push_back(D);
  alts.push_back(D + "[0-9]*[1-9]");
  std::string out;
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? "|" : "") + std::string("(") + alts[k] + ")";
  return out;
}

// ... with 0.F <= 0.D (or <).
std::string frac_le(const std::string& D, bool strict) {
  std::vector<std::string> alts;
  for (size_t i = 0; i < D.size(); ++i) {
    if (D[i] > '0') {
      alts.push_back(D.substr(0, i) + "[0-" + std::string(1, char(D[i] - 1)) + "][0-9]*[1-9]");
      if (D[i] > '1') alts.push_back(D.substr(0, i) + "[1-" + std::string(1, char(D[i] - 1)) + "]");
    }
    if (i > 0 && D[i - 1] != '0') alts.push_back(D.substr(0, i));  // a proper prefix is smaller
  }
  if (!strict) alts.push_back(D);
  std::string out;
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? "|" : "") + std::string("(") + alts[k] + ")";
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(RuleBuilder& rb, const JValue& root, const CompileOptions& opts, std::string prefix,
                 std::vector<CompileError>& errors)
      : rb_(rb), root_(root), opts_(spelling(opts)), prefix_(std::move(prefix)), errors_(errors) {}
  SchemaCompiler(const SchemaCompiler&) = delete;
  SchemaCompiler& operator=(const SchemaCompiler&) = delete;

  uint32_t run() {
    scan(root_, "");
    if (has_ref_ && !nested_ids_.empty())
      for (const auto& p : nested_ids_)
        error(p, "$id", "embedded schema resources ($id below the root) are not supported together with $ref");
    if (!errors_.empty() && errors_.size() > errors_at_start_) return rb_.new_rule();
    if (!object_only_) return compile_schema(&root_);
    // Tool arguments: only the object instances of the schema (a subset, so still sound), even
    // when the parameters schema forgets "type":"object".
    uint32_t r = rb_.new_rule();
    for (Flat f : flatten(&root_)) {
      f.types &= kObj;
      if (!f.types) continue;
      if (args_syntax_ == ArgumentSyntax::JsonObject) {
        rb_.add_alt(r, {RuleBuilder::ref(compile_flat(f))});
      } else if (f.has_enum || !f.not_values.empty()) {
        error(f.ptr, f.has_enum ? "enum" : "not", "enum/const/not of the whole arguments object is not supported in this call format");
      } else {
        rb_.add_alt(r, {RuleBuilder::ref(object_rule(f, args_syntax_))});
      }
    }
    return r;
  }
  bool object_only_ = false;
  ArgumentSyntax args_syntax_ = ArgumentSyntax::JsonObject;

 private:
  // Gemma 4's values have no whitespace and spell null and booleans as JSON does.
  static CompileOptions spelling(CompileOptions o) {
    if (o.gemma4_values) {
      o.whitespace = Whitespace::Compact;
      o.python_literals = false;
    }
    return o;
  }

  void error(const std::string& ptr, const std::string& kw, const std::string& msg) {
    errors_.push_back({prefix_ + ptr, kw, msg});
  }

  const std::string& ptr_of(const JValue* v) {
    static const std::string unknown = "";
    auto it = ptrs_.find(v);
    return it == ptrs_.end() ? unknown : it->second;
  }

  // ---- pass 1: keyword scan ----
  static bool is_nonneg_int(const JValue& v) { return v.is_integer_valued() && v.number >= 0; }

  // Every schema location is scanned once, wherever it is reached from: the tree walk below or a
  // `$ref` to any pointer in the document (`#/x`, `#/$defs/g/inner`: locations the walk does not
  // visit as schemas), so the same supported/refused rules apply everywhere (issue 29).
  void scan(const JValue& s, const std::string& ptr) {
    ptrs_[&s] = ptr;
    if (!scanned_.insert(&s).second) return;
    if (s.is_bool()) return;
    if (!s.is_object()) {
      error(ptr, "", "a schema must be an object or a boolean");
      return;
    }
    for (const auto& [k, v] : s.obj) {
      std::string kp = ptr + "/" + pointer_escape(k);
      if (annotation_keywords().count(k)) {
        if (k == "$id" && !ptr.empty()) nested_ids_.push_back(kp);
        continue;
      }
      if (unsupported_keywords().count(k)) {
        error(kp, k, "keyword '" + k + "' is not supported");
        continue;
      }
      if (k == "properties" || k == "$defs" || k == "definitions") {
        if (!v.is_object()) { error(kp, k, "'" + k + "' must be an object"); continue; }
        for (const auto& [name, sub] : v.obj) scan(sub, kp + "/" + pointer_escape(name));
      } else if (k == "items") {
        if (v.is_array()) {
          for (size_t i = 0; i < v.arr.size(); ++i) scan(v.arr[i], kp + "/" + std::to_string(i));
        } else {
          scan(v, kp);
        }
      } else if (k == "prefixItems" || k == "allOf" || k == "anyOf" || k == "oneOf") {
        if (!v.is_array() || v.arr.empty()) { error(kp, k, "'" + k + "' must be a non-empty array"); continue; }
        for (size_t i = 0; i < v.arr.size(); ++i) scan(v.arr[i], kp + "/" + std::to_string(i));
      } else if (k == "additionalProperties") {
        scan(v, kp);
      } else if (k == "additionalItems") {
        const JValue* items = s.get("items");
        if (items && items->is_array()) scan(v, kp);  // else ignored, as 2020-12 does
      } else if (k == "type") {
        static const std::set<std::string, std::less<>> names = {"null", "boolean", "object", "array",
                                                                 "string", "number", "integer"};
        bool ok = v.is_string() ? names.count(v.str) > 0 : v.is_array();
        if (v.is_array())
          for (const auto& t : v.arr) ok = ok && t.is_string() && names.count(t.str);
        if (!ok) error(kp, k, "'type' must be a type name or an array of type names");
      } else if (k == "enum") {
        if (!v.is_array()) error(kp, k, "'enum' must be an array");
      } else if (k == "const") {
      } else if (k == "required") {
        bool ok = v.is_array();
        if (ok)
          for (const auto& r : v.arr) ok = ok && r.is_string();
        if (!ok) error(kp, k, "'required' must be an array of strings");
      } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems") {
        if (!is_nonneg_int(v)) error(kp, k, "'" + k + "' must be a non-negative integer");
        else if (v.number > 100000) error(kp, k, "'" + k + "' is larger than supported (100000)");
      } else if (k == "minimum" || k == "maximum") {
        if (!v.is_number()) error(kp, k, "'" + k + "' must be a number");
      } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (!v.is_number() && !v.is_bool()) error(kp, k, "'" + k + "' must be a number");
      } else if (k == "multipleOf") {
        if (!v.is_number() || !(v.number > 0)) error(kp, k, "'multipleOf' must be a positive number");
        else if (!parse_step(v.str).ok)
          error(kp, k, "'multipleOf' is only supported as a decimal with at most 12 fraction digits and at most "
                       "1000000 units of its last digit (e.g. 5, 0.01, 0.25)");
      } else if (k == "minProperties" || k == "maxProperties") {
        if (!is_nonneg_int(v)) error(kp, k, "'" + k + "' must be a non-negative integer");
        else if (v.number > 10000) error(kp, k, "'" + k + "' is larger than supported (10000)");
      } else if (k == "propertyNames") {
        scan_property_names(v, kp);
      } else if (k == "not") {
        scan_not(v, kp);
      } else if (k == "pattern") {
        if (!v.is_string()) {
          error(kp, k, "'pattern' must be a string");
        } else {
          auto r = regex_cache(v.str, false);
          if (!r) error(kp, k, "pattern not supported: " + regex_errors_[v.str]);
        }
      } else if (k == "format") {
        // `format` only constrains strings: on a schema whose type excludes strings an unknown
        // format (OpenAPI's int32, double...) cannot change validity.
        const JValue* ty = s.get("type");
        bool strings_possible = !ty || (ty->is_string() && ty->str == "string");
        if (ty && ty->is_array())
          for (const auto& t : ty->arr) strings_possible = strings_possible || (t.is_string() && t.str == "string");
        if (!strings_possible) continue;
        if (!v.is_string() || !known_formats().count(v.str))
          error(kp, k, "format '" + (v.is_string() ? v.str : std::string("?")) +
                           "' is not supported (supported: date-time, date, time, uuid, email, ipv4, ipv6, uri, hostname)");
      } else if (k == "$ref") {
        has_ref_ = true;
        if (!v.is_string()) { error(kp, k, "'$ref' must be a string"); continue; }
        std::string why, target_ptr;
        const JValue* t = resolve(v.str, why, &target_ptr);
        if (!t) error(kp, k, "cannot resolve $ref '" + v.str + "': " + why);
        else if (!scanned_.count(t)) scan(*t, target_ptr);
      }
      // Any other keyword is unknown to JSON Schema and therefore an annotation.
    }
  }

  // propertyNames: names are strings, so only string keywords can be compiled into the key
  // automaton (type string, pattern, enum/const, minLength/maxLength).
  void scan_property_names(const JValue& v, const std::string& kp) {
    ptrs_[&v] = kp;
    if (v.is_bool()) return;
    if (!v.is_object()) {
      error(kp, "propertyNames", "'propertyNames' must be a schema");
      return;
    }
    for (const auto& [k, x] : v.obj) {
      if (annotation_keywords().count(k)) continue;
      if (k == "type" || k == "pattern" || k == "enum" || k == "const" || k == "minLength" || k == "maxLength") continue;
      error(kp + "/" + pointer_escape(k), "propertyNames",
            "'propertyNames' supports only type, pattern, enum, const, minLength and maxLength (found '" + k + "')");
      return;
    }
    scan(v, kp);
  }

  // not: only a negated type, const, enum or required set (each compiles to removing
  // alternatives, so the grammar stays a subset of the valid instances).
  void scan_not(const JValue& v, const std::string& kp) {
    ptrs_[&v] = kp;
    const char* why = nullptr;
    int n = 0;
    if (!v.is_object()) why = "'not' is only supported on an object schema";
    else
      for (const auto& [k, x] : v.obj) {
        if (annotation_keywords().count(k)) continue;
        ++n;
        if (k != "type" && k != "const" && k != "enum" && k != "required") {
          why = "'not' is only supported when the negated schema is a single type, const, enum or required";
          break;
        }
      }
    if (!why && n != 1) why = "'not' is only supported when the negated schema is a single type, const, enum or required";
    if (why) {
      error(kp, "not", why);
      return;
    }
    scan(v, kp);
  }

  // The schema a local `$ref` points to; *target_ptr (when given) receives its location as a
  // canonical JSON pointer (percent-decoded, tokens re-escaped), the prefix of error pointers there.
  const JValue* resolve(const std::string& ref, std::string& why, std::string* target_ptr = nullptr) {
    if (ref.empty() || ref[0] != '#') {
      why = "only local references ('#...') are supported";
      return nullptr;
    }
    std::string frag = ref.substr(1);
    // percent-decoding
    std::string dec;
    for (size_t i = 0; i < frag.size(); ++i) {
      if (frag[i] == '%' && i + 2 < frag.size() + 0 && i + 2 <= frag.size() - 1) {
        auto hv = [](char c) { return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1; };
        int a = hv(frag[i + 1]), b = hv(frag[i + 2]);
        if (a >= 0 && b >= 0) { dec += char(a * 16 + b); i += 2; continue; }
      }
      dec += frag[i];
    }
    if (!dec.empty() && dec[0] != '/') {
      why = "anchors are not supported";
      return nullptr;
    }
    const JValue* cur = &root_;
    std::string canon;
    size_t i = 0;
    while (i < dec.size()) {
      size_t j = dec.find('/', i + 1);
      if (j == std::string::npos) j = dec.size();
      std::string tok;
      for (size_t k = i + 1; k < j; ++k) {
        if (dec[k] == '~' && k + 1 < j && dec[k + 1] == '1') { tok += '/'; ++k; }
        else if (dec[k] == '~' && k + 1 < j && dec[k + 1] == '0') { tok += '~'; ++k; }
        else tok += dec[k];
      }
      canon += "/" + pointer_escape(tok);
      if (cur->is_object()) {
        cur = cur->get(tok);
      } else if (cur->is_array()) {
        char* end = nullptr;
        long idx = std::strtol(tok.c_str(), &end, 10);
        cur = (end && *end == 0 && !tok.empty() && idx >= 0 && size_t(idx) < cur->arr.size()) ? &cur->arr[idx] : nullptr;
      } else {
        cur = nullptr;
      }
      if (!cur) {
        why = "no such location";
        return nullptr;
      }
      i = j;
    }
    if (!cur->is_object() && !cur->is_bool()) {
      why = "target is not a schema";
      return nullptr;
    }
    if (target_ptr) *target_ptr = canon;
    return cur;
  }

  const Dfa* regex_cache(const std::string& pattern, bool full) {
    std::string key = (full ? "F" : "S") + pattern;
    auto it = dfas_.find(key);
    if (it != dfas_.end()) return it->second.get();
    RegexOutcome r = compile_regex(pattern, full);
    if (!r.ok) {
      regex_errors_[pattern] = r.error;
      dfas_[key] = nullptr;
      return nullptr;
    }
    auto p = std::make_shared<Dfa>(std::move(r.dfa));
    dfas_[key] = p;
    return p.get();
  }

  // ---- pass 2: flattening ----
  Flat from_keywords(const JValue& s, const std::string& ptr) {
    Flat f;
    f.ptr = ptr;
    if (const JValue* t = s.get("type")) f.types = type_bits(*t);
    if (const JValue* e = s.get("enum")) {
      f.has_enum = true;
      for (const auto& x : e->arr) f.enum_vals.push_back(&x);
    }
    if (const JValue* c = s.get("const")) {
      if (f.has_enum) {
        std::vector<const JValue*> keep;
        for (auto* x : f.enum_vals)
          if (json_equal(*x, *c)) keep.push_back(x);
        f.enum_vals = keep;
      } else {
        f.has_enum = true;
        f.enum_vals = {c};
      }
    }
    auto num = [&](const char* k) -> const JValue* {
      const JValue* v = s.get(k);
      return v && v->is_number() ? v : nullptr;
    };
    if (auto* v = num("minimum")) { f.lo = v->number; f.lo_text = v->str; }
    if (auto* v = num("maximum")) { f.hi = v->number; f.hi_text = v->str; }
    if (auto* v = num("exclusiveMinimum")) {
      if (v->number >= f.lo) { f.lo = v->number; f.lo_text = v->str; f.lo_excl = true; }
    }
    if (auto* v = num("exclusiveMaximum")) {
      if (v->number <= f.hi) { f.hi = v->number; f.hi_text = v->str; f.hi_excl = true; }
    }
    if (const JValue* v = s.get("exclusiveMinimum"); v && v->is_bool() && v->boolean) f.lo_excl = true;  // draft 4
    if (const JValue* v = s.get("exclusiveMaximum"); v && v->is_bool() && v->boolean) f.hi_excl = true;
    if (auto* v = num("multipleOf")) {
      Step st = parse_step(v->str);
      if (st.ok) {
        f.multiple_of = v->number;
        f.step_m = st.m;
        f.step_s = st.s;
      }
    }
    if (auto* v = num("minProperties")) f.min_props = int64_t(v->number);
    if (auto* v = num("maxProperties")) f.max_props = int64_t(v->number);
    if (const JValue* v = s.get("propertyNames")) f.property_names.push_back(v);
    if (const JValue* n = s.get("not"); n && n->is_object()) {
      if (const JValue* t = n->get("type")) {
        // not {type: T}: remove T's bits. "integer" removes integers only, so "number" minus
        // "integer" leaves the non-integral numbers (kNumFrac alone).
        f.types &= uint8_t(~type_bits(*t));
      }
      if (const JValue* c = n->get("const")) f.not_values.push_back(c);
      if (const JValue* e = n->get("enum"); e && e->is_array())
        for (const auto& x : e->arr) f.not_values.push_back(&x);
      if (const JValue* r = n->get("required"); r && r->is_array()) {
        std::vector<std::string> set;
        for (const auto& x : r->arr)
          if (x.is_string()) set.push_back(x.str);
        f.not_required.push_back(std::move(set));
      }
    }
    if (auto* v = num("minLength")) f.min_len = int64_t(v->number);
    if (auto* v = num("maxLength")) f.max_len = int64_t(v->number);
    if (const JValue* v = s.get("pattern"); v && v->is_string()) f.patterns.push_back(v->str);
    if (const JValue* v = s.get("format"); v && v->is_string()) f.formats.push_back(v->str);
    if (auto* v = num("minItems")) f.min_items = int64_t(v->number);
    if (auto* v = num("maxItems")) f.max_items = int64_t(v->number);
    const JValue* items = s.get("items");
    if (const JValue* p = s.get("prefixItems"); p && p->is_array()) {
      for (const auto& x : p->arr) f.prefix.push_back({{&x}});
      if (items) f.items = {{items}};
    } else if (items && items->is_array()) {  // draft 7 tuple form
      for (const auto& x : items->arr) f.prefix.push_back({{&x}});
      if (const JValue* a = s.get("additionalItems")) f.items = {{a}};
    } else if (items) {
      f.items = {{items}};
    }
    if (const JValue* p = s.get("properties"); p && p->is_object())
      for (const auto& [name, sub] : p->obj) f.props.push_back({name, {{&sub}}});
    if (const JValue* r = s.get("required"); r && r->is_array())
      for (const auto& x : r->arr)
        if (x.is_string() && std::find(f.required.begin(), f.required.end(), x.str) == f.required.end())
          f.required.push_back(x.str);
    if (const JValue* a = s.get("additionalProperties")) {
      f.additional_set = true;
      f.additional = {{a}};
    }
    return f;
  }

  static Sub conj(const Sub& a, const Sub& b) {
    Sub r = a;
    r.conj.insert(r.conj.end(), b.conj.begin(), b.conj.end());
    return r;
  }

  // allOf of two flat schemas. Returns false when obviously unsatisfiable.
  bool merge(const Flat& a, const Flat& b, Flat& m) {
    m = a;
    m.types = a.types & b.types;
    if (!m.types) return false;
    if (b.has_enum) {
      if (a.has_enum) {
        m.enum_vals.clear();
        for (auto* x : a.enum_vals)
          for (auto* y : b.enum_vals)
            if (json_equal(*x, *y)) { m.enum_vals.push_back(x); break; }
      } else {
        m.has_enum = true;
        m.enum_vals = b.enum_vals;
      }
    }
    if (b.lo > m.lo || (b.lo == m.lo && b.lo_excl)) { m.lo = b.lo; m.lo_text = b.lo_text; m.lo_excl = b.lo_excl; }
    if (b.hi < m.hi || (b.hi == m.hi && b.hi_excl)) { m.hi = b.hi; m.hi_text = b.hi_text; m.hi_excl = b.hi_excl; }
    if (b.multiple_of > 0) {
      if (m.multiple_of > 0) {
        // lcm of M1/10^S1 and M2/10^S2 = lcm(M1*10^(S-S1), M2*10^(S-S2)) / 10^S, S = max(S1, S2).
        int s = std::max(m.step_s, b.step_s);
        int64_t x = m.step_m * pow10i(s - m.step_s), y = b.step_m * pow10i(s - b.step_s);
        int64_t g = std::gcd(x, y);
        if (x / g > kMaxStepM * pow10i(kMaxStepS) / y) {
          error(a.ptr, "multipleOf", "combined multipleOf too large");
          return false;
        }
        int64_t l = x / g * y;
        while (s > 0 && l % 10 == 0) { l /= 10; --s; }
        if (l > kMaxStepM) {
          error(a.ptr, "multipleOf", "combined multipleOf too large");
          return false;
        }
        m.step_m = l;
        m.step_s = s;
        m.multiple_of = double(l) / double(pow10i(s));
      } else {
        m.multiple_of = b.multiple_of;
        m.step_m = b.step_m;
        m.step_s = b.step_s;
      }
    }
    m.min_len = std::max(a.min_len, b.min_len);
    m.max_len = a.max_len < 0 ? b.max_len : (b.max_len < 0 ? a.max_len : std::min(a.max_len, b.max_len));
    m.patterns.insert(m.patterns.end(), b.patterns.begin(), b.patterns.end());
    m.formats.insert(m.formats.end(), b.formats.begin(), b.formats.end());
    size_t np = std::max(a.prefix.size(), b.prefix.size());
    m.prefix.clear();
    for (size_t i = 0; i < np; ++i) {
      const Sub& x = i < a.prefix.size() ? a.prefix[i] : a.items;
      const Sub& y = i < b.prefix.size() ? b.prefix[i] : b.items;
      m.prefix.push_back(conj(x, y));
    }
    m.items = conj(a.items, b.items);
    m.min_items = std::max(a.min_items, b.min_items);
    m.max_items = a.max_items < 0 ? b.max_items : (b.max_items < 0 ? a.max_items : std::min(a.max_items, b.max_items));
    m.props.clear();
    auto find = [](const Flat& f, const std::string& k) -> const Sub* {
      for (const auto& p : f.props)
        if (p.first == k) return &p.second;
      return nullptr;
    };
    auto side = [&](const Flat& f, const std::string& k) -> Sub {
      if (const Sub* s = find(f, k)) return *s;
      return f.additional_set ? f.additional : Sub{};
    };
    for (const auto& p : a.props) m.props.push_back({p.first, conj(p.second, side(b, p.first))});
    for (const auto& p : b.props)
      if (!find(a, p.first)) m.props.push_back({p.first, conj(side(a, p.first), p.second)});
    for (const auto& r : b.required)
      if (std::find(m.required.begin(), m.required.end(), r) == m.required.end()) m.required.push_back(r);
    m.additional_set = a.additional_set || b.additional_set;
    m.additional = conj(a.additional, b.additional);
    m.min_props = std::max(a.min_props, b.min_props);
    m.max_props = a.max_props < 0 ? b.max_props : (b.max_props < 0 ? a.max_props : std::min(a.max_props, b.max_props));
    m.property_names.insert(m.property_names.end(), b.property_names.begin(), b.property_names.end());
    m.not_values.insert(m.not_values.end(), b.not_values.begin(), b.not_values.end());
    m.not_required.insert(m.not_required.end(), b.not_required.begin(), b.not_required.end());
    return true;
  }

  std::vector<Flat> cross(const std::vector<Flat>& A, const std::vector<Flat>& B, const std::string& ptr) {
    std::vector<Flat> out;
    for (const auto& a : A)
      for (const auto& b : B) {
        Flat m;
        if (merge(a, b, m)) out.push_back(std::move(m));
        if (out.size() > 256) {
          error(ptr, "anyOf", "too many alternatives after distributing allOf/anyOf (limit 256)");
          return out;
        }
      }
    return out;
  }

  // Which JSON types a flat schema can match (for the oneOf disjointness proof).
  static uint8_t possible_types(const Flat& f) {
    if (!f.has_enum) return f.types;
    uint8_t t = 0;
    for (auto* v : f.enum_vals) {
      switch (v->kind) {
        case JValue::Kind::Null: t |= kNull; break;
        case JValue::Kind::Bool: t |= kBool; break;
        case JValue::Kind::Object: t |= kObj; break;
        case JValue::Kind::Array: t |= kArr; break;
        case JValue::Kind::String: t |= kStr; break;
        case JValue::Kind::Number: t |= v->is_integer_valued() ? kInt : kNumFrac; break;
      }
    }
    return t & (f.types | ((f.types & kInt) ? kInt : 0));
  }

  // Values a flat schema forces for property `key` (a required const/enum), or null.
  const std::vector<const JValue*>* discriminator(const Flat& f, const std::string& key,
                                                  std::vector<const JValue*>& store) {
    if (f.types != kObj) return nullptr;
    if (std::find(f.required.begin(), f.required.end(), key) == f.required.end()) return nullptr;
    for (const auto& p : f.props) {
      if (p.first != key) continue;
      store.clear();
      bool found = false;
      for (const JValue* s : p.second.conj) {
        if (!s->is_object()) continue;
        if (const JValue* c = s->get("const")) { store = {c}; found = true; }
        else if (const JValue* e = s->get("enum"); e && e->is_array()) {
          store.clear();
          for (const auto& x : e->arr) store.push_back(&x);
          found = true;
        }
        if (found) break;
      }
      return found ? &store : nullptr;
    }
    return nullptr;
  }

  bool provably_disjoint(const std::vector<std::vector<Flat>>& branches) {
    // Every pair of flats from different branches must be disjoint: by type, or by a required
    // property whose const/enum values do not overlap.
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = i + 1; j < branches.size(); ++j)
        for (const auto& a : branches[i])
          for (const auto& b : branches[j]) {
            uint8_t ta = possible_types(a), tb = possible_types(b);
            if ((ta & tb) == 0) continue;
            bool ok = false;
            if (a.has_enum && b.has_enum) {
              ok = true;
              for (auto* x : a.enum_vals)
                for (auto* y : b.enum_vals)
                  if (json_equal(*x, *y)) ok = false;
            }
            if (!ok && ta == kObj && tb == kObj) {
              std::vector<const JValue*> sa, sb;
              for (const auto& p : a.props) {
                auto* da = discriminator(a, p.first, sa);
                auto* db = da ? discriminator(b, p.first, sb) : nullptr;
                if (!da || !db) continue;
                bool overlap = false;
                for (auto* x : *da)
                  for (auto* y : *db)
                    if (json_equal(*x, *y)) overlap = true;
                if (!overlap) { ok = true; break; }
              }
            }
            if (!ok) return false;
          }
    return true;
  }

  std::vector<Flat> flatten(const JValue* s) {
    const std::string& ptr = ptr_of(s);
    if (s->is_bool()) {
      if (!s->boolean) return {};
      Flat f;
      f.ptr = ptr;
      return {f};
    }
    if (!s->is_object()) return {};
    if (std::find(flatten_stack_.begin(), flatten_stack_.end(), s) != flatten_stack_.end()) {
      error(ptr, "$ref", "recursion through $ref/allOf/anyOf/oneOf without consuming input is not supported");
      return {};
    }
    flatten_stack_.push_back(s);
    std::vector<Flat> alts{from_keywords(*s, ptr)};
    if (const JValue* r = s->get("$ref"); r && r->is_string()) {
      std::string why;
      if (const JValue* t = resolve(r->str, why)) alts = cross(alts, flatten(t), ptr);
      else alts.clear();
    }
    if (const JValue* a = s->get("allOf"); a && a->is_array())
      for (const auto& b : a->arr) alts = cross(alts, flatten(&b), ptr);
    if (const JValue* a = s->get("anyOf"); a && a->is_array()) {
      std::vector<Flat> u;
      for (const auto& b : a->arr) {
        auto f = flatten(&b);
        u.insert(u.end(), f.begin(), f.end());
      }
      alts = cross(alts, u, ptr);
    }
    if (const JValue* a = s->get("oneOf"); a && a->is_array()) {
      std::vector<std::vector<Flat>> branches;
      for (const auto& b : a->arr) {
        // Branches are compared after applying the sibling keywords, which may make them disjoint.
        branches.push_back(cross(alts, flatten(&b), ptr));
      }
      if (!provably_disjoint(branches)) {
        error(ptr + "/oneOf", "oneOf",
              "oneOf is only supported when its branches are provably disjoint (different types or a "
              "required property with different const/enum values)");
      }
      std::vector<Flat> u;
      for (auto& br : branches) u.insert(u.end(), br.begin(), br.end());
      alts = u;
    }
    flatten_stack_.pop_back();
    return alts;
  }

  // ---- pass 3: rules ----
  static bool is_pure_ref(const JValue& s) {
    if (!s.is_object() || !s.get("$ref")) return false;
    for (const auto& kv : s.obj)
      if (kv.first != "$ref" && !annotation_keywords().count(kv.first)) return false;
    return true;
  }

  uint32_t compile_schema(const JValue* s) {
    auto it = memo_.find(s);
    if (it != memo_.end()) return it->second;
    if (is_pure_ref(*s)) {
      // Memoize before recursing so recursive structures close into recursive rules. A cycle of
      // pure $refs yields rules without terminals, which the productivity pass removes (refused).
      uint32_t r = rb_.new_rule();
      memo_[s] = r;
      std::string why;
      if (const JValue* t = resolve(s->get("$ref")->str, why)) rb_.add_alt(r, {RuleBuilder::ref(compile_schema(t))});
      return r;
    }
    uint32_t r = rb_.new_rule();
    memo_[s] = r;
    for (const Flat& f : flatten(s)) rb_.add_alt(r, {RuleBuilder::ref(compile_flat(f))});
    return r;
  }

  uint32_t compile_sub(const Sub& sub) {
    if (rb_.over_budget) return 0;  // refused for size anyway (new_rule hands out rule 0 too)
    if (sub.conj.empty()) return any_rule();
    if (sub.conj.size() == 1) return compile_schema(sub.conj[0]);
    std::vector<Flat> alts{Flat{}};
    alts[0].ptr = ptr_of(sub.conj[0]);
    for (const JValue* s : sub.conj) alts = cross(alts, flatten(s), ptr_of(s));
    uint32_t r = rb_.new_rule();
    for (const Flat& f : alts) rb_.add_alt(r, {RuleBuilder::ref(compile_flat(f))});
    return r;
  }


  // Literal JSON text of a value (enum/const): matches exactly that spelling.
  // With Flexible whitespace, arrays and objects get whitespace at their structural positions.
  // Python literals (CompileOptions::python_literals) spell null and booleans their way.
  std::string null_text() const { return opts_.python_literals ? "None" : "null"; }
  std::string bool_text(bool b) const {
    if (opts_.python_literals) return b ? "True" : "False";
    return b ? "true" : "false";
  }
  std::string scalar_text(const JValue& v) const {
    if (v.kind == JValue::Kind::Null) return null_text();
    if (v.kind == JValue::Kind::Bool) return bool_text(v.boolean);
    if (v.is_string() && opts_.gemma4_values) return std::string(kGemma4Quote) + v.str + std::string(kGemma4Quote);
    return to_json(v);
  }

  // Whether Gemma 4's spelling can write a value: a string holds no quote token and no NUL (raw
  // text has no escapes), a key is unquoted (gemma4_key).
  static bool gemma4_writable(const JValue& v) {
    if (v.is_string()) return v.str.find(kGemma4Quote) == std::string::npos && v.str.find('\0') == std::string::npos;
    for (const auto& e : v.arr)
      if (!gemma4_writable(e)) return false;
    for (const auto& [k, e] : v.obj)
      if (!gemma4_key(k) || !gemma4_writable(e)) return false;
    return true;
  }

  uint32_t literal(const JValue& v) {
    if (opts_.gemma4_values && !gemma4_writable(v)) return rb_.new_rule();  // no alternative: never written
    if (!v.is_array() && !v.is_object()) return rb_.literal_rule(scalar_text(v));
    // Objects go element by element even when compact, so their braces carry the key-uniqueness
    // tags as every other object's do (the tracking stays balanced in an anyOf of a literal and a
    // schema object). Their keys are fixed, and not tracked.
    auto has_object = [](const JValue& x, auto&& self) -> bool {
      if (x.is_object()) return true;
      for (const auto& e : x.arr)
        if (self(e, self)) return true;
      return false;
    };
    if (opts_.whitespace == Whitespace::Compact && !opts_.python_literals && !opts_.gemma4_values &&
        !has_object(v, has_object))
      return rb_.literal_rule(to_json(v));
    std::vector<Elem> seq;
    seq.push_back(v.is_array() ? rb_.byte('[') : tagged(rb_.byte('{'), kTagObjOpen));
    sp_.after_open(seq);
    size_t n = v.is_array() ? v.arr.size() : v.obj.size();
    for (size_t k = 0; k < n; ++k) {
      if (k) {
        seq.push_back(rb_.byte(','));
        sp_.after_comma(seq);
      }
      if (v.is_object()) {
        rb_.lit(seq, opts_.gemma4_values ? v.obj[k].first : json_quote(v.obj[k].first));
        sp_.after_value(seq);
        seq.push_back(rb_.byte(':'));
        sp_.after_colon(seq);
      }
      seq.push_back(RuleBuilder::ref(literal(v.is_array() ? v.arr[k] : v.obj[k].second)));
      sp_.after_value(seq);
    }
    if (n) sp_.before_close(seq);
    seq.push_back(v.is_array() ? rb_.byte(']') : tagged(rb_.byte('}'), kTagObjClose));
    uint32_t r = rb_.new_rule();
    rb_.add_alt(r, std::move(seq));
    return r;
  }

  enum class Tri { No, Yes, Unknown };

  // How many strings `d` accepts, or cap + 1 when more (or infinitely many).
  static int64_t dfa_count(const Dfa& in, int64_t cap) {
    Dfa d = in;
    dfa_prune(d);
    if (d.next.empty() || d.empty_language()) return 0;
    const size_t n = d.next.size();
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<int64_t> count(n, 0);
    std::vector<std::pair<int32_t, int>> stack{{d.start, 0}};  // (state, next byte to look at)
    color[size_t(d.start)] = 1;
    while (!stack.empty()) {
      auto& [q, b] = stack.back();
      if (b < 256) {
        const int32_t t = d.next[size_t(q)][size_t(b++)];
        if (t < 0) continue;
        if (color[size_t(t)] == 1) return cap + 1;  // a cycle that can reach an accepting state
        if (color[size_t(t)] == 0) {
          color[size_t(t)] = 1;
          stack.push_back({t, 0});
        }
        continue;
      }
      int64_t c = d.accept[size_t(q)] ? 1 : 0;
      for (int x = 0; x < 256; ++x)
        if (const int32_t t = d.next[size_t(q)][size_t(x)]; t >= 0) c = std::min(cap + 1, c + count[size_t(t)]);
      count[size_t(q)] = c;
      color[size_t(q)] = 2;
      stack.pop_back();
    }
    return count[size_t(d.start)];
  }

  static int64_t count_code_points(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  Tri value_ok(const Flat& f, const JValue& v) {
    auto has = [&](uint8_t b) { return (f.types & b) != 0; };
    switch (v.kind) {
      case JValue::Kind::Null: return has(kNull) ? Tri::Yes : Tri::No;
      case JValue::Kind::Bool: return has(kBool) ? Tri::Yes : Tri::No;
      case JValue::Kind::String: {
        if (!has(kStr)) return Tri::No;
        int64_t n = count_code_points(v.str);
        if (n < f.min_len || (f.max_len >= 0 && n > f.max_len)) return Tri::No;
        for (const auto& p : f.patterns) {
          const Dfa* d = regex_cache(p, false);
          if (!d) return Tri::Unknown;
          if (!dfa_matches(*d, v.str)) return Tri::No;
        }
        for (const auto& fm : f.formats) {
          const Dfa* d = format_dfa(fm);
          if (!d) return Tri::Unknown;
          if (!dfa_matches(*d, v.str)) return Tri::No;  // stricter than the spec: sound
        }
        return Tri::Yes;
      }
      case JValue::Kind::Number: {
        bool integral = v.is_integer_valued();
        if (integral ? !has(kInt) : !has(kNumFrac)) return Tri::No;
        double x = v.number;
        if (x < f.lo || (f.lo_excl && x == f.lo) || x > f.hi || (f.hi_excl && x == f.hi)) return Tri::No;
        if (f.multiple_of > 0) {
          Decimal d = parse_decimal(v.str);
          if (!d.ok) return Tri::Unknown;
          Step st;
          st.m = f.step_m;
          st.s = f.step_s;
          if (!decimal_multiple_of(d, st)) return Tri::No;
        }
        return Tri::Yes;
      }
      case JValue::Kind::Array:
        if (!has(kArr)) return Tri::No;
        if (!f.prefix.empty() || !f.items.conj.empty() || f.min_items || f.max_items >= 0) return Tri::Unknown;
        return Tri::Yes;
      case JValue::Kind::Object:
        if (!has(kObj)) return Tri::No;
        if (!f.props.empty() || !f.required.empty() || !f.additional.conj.empty() || f.min_props > 0 ||
            f.max_props >= 0 || !f.property_names.empty() || !f.not_required.empty())
          return Tri::Unknown;
        if (!opts_.additional_properties_default && !f.additional_set && !v.obj.empty()) return Tri::No;
        return Tri::Yes;
    }
    return Tri::Unknown;
  }

  bool excluded_by_not(const Flat& f, const JValue& v) {
    for (const JValue* x : f.not_values)
      if (json_equal(*x, v)) return true;
    return false;
  }

  uint32_t compile_flat(const Flat& f_in) {
    uint32_t r = rb_.new_rule();
    Flat f = f_in;
    if (!f.has_enum && !f.not_values.empty()) {
      // not {const/enum}: null and booleans drop their literal, strings take the excluded values
      // out of their automaton (string_rule); numbers, arrays and objects have several spellings
      // of one value, so excluding one exactly is refused unless the type excludes them anyway.
      for (const JValue* x : f.not_values) {
        switch (x->kind) {
          case JValue::Kind::Null: f.types &= uint8_t(~kNull); break;
          case JValue::Kind::Bool: (x->boolean ? f.not_true : f.not_false) = true; break;
          case JValue::Kind::String: break;
          case JValue::Kind::Number:
            if (f.types & (kInt | kNumFrac)) error(f.ptr + "/not", "not", "'not' of a numeric const/enum value is not supported");
            break;
          case JValue::Kind::Array:
            if (f.types & kArr) error(f.ptr + "/not", "not", "'not' of an array const/enum value is not supported");
            break;
          case JValue::Kind::Object:
            if (f.types & kObj) error(f.ptr + "/not", "not", "'not' of an object const/enum value is not supported");
            break;
        }
      }
    }
    if (f.has_enum) {
      for (const JValue* v : f.enum_vals) {
        if (excluded_by_not(f, *v)) continue;
        Tri t = value_ok(f, *v);
        if (t == Tri::Yes) rb_.add_alt(r, {RuleBuilder::ref(literal(*v))});
        if (t == Tri::Yes && v->kind == JValue::Kind::Null && opts_.gemma4_values)
          rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule("None"))});
        if (t == Tri::Unknown)
          error(f.ptr, "enum", "enum/const combined with array/object keywords is not supported");
      }
      return r;
    }
    if (f.types & kNull) rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule(null_text()))});
    // Gemma 4's template prints a null argument as Jinja prints Python's None.
    if ((f.types & kNull) && opts_.gemma4_values) rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule("None"))});
    if (f.types & kBool) {
      if (!f.not_true) rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule(bool_text(true)))});
      if (!f.not_false) rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule(bool_text(false)))});
    }
    if (f.types & (kInt | kNumFrac)) {
      uint32_t n = number_rule(f);
      rb_.add_alt(r, {RuleBuilder::ref(n)});
    }
    if (f.types & kStr) rb_.add_alt(r, {RuleBuilder::ref(string_rule(f))});
    if (f.types & kArr) rb_.add_alt(r, {RuleBuilder::ref(array_rule(f))});
    if (f.types & kObj) rb_.add_alt(r, {RuleBuilder::ref(object_rule(f))});
    return r;
  }

  // ---- numbers ----
  uint32_t dfa_raw_rules(const Dfa& d) {
    std::vector<int32_t> ids(d.next.size(), -1);
    std::vector<int32_t> work{d.start};
    ids[d.start] = int32_t(rb_.new_rule());
    for (size_t k = 0; k < work.size(); ++k) {
      int32_t q = work[k];
      uint32_t r = uint32_t(ids[q]);
      if (d.accept[q]) rb_.add_alt(r, {});
      std::map<int32_t, ByteSet> by_target;
      for (int b = 0; b < 256; ++b) {
        int32_t t = d.next[q][b];
        if (t < 0) continue;
        byteset_add(by_target[t], uint8_t(b));
      }
      for (auto& [t, set] : by_target) {
        if (ids[t] < 0) {
          ids[t] = int32_t(rb_.new_rule());
          work.push_back(t);
        }
        rb_.add_alt(r, {rb_.cls(set), RuleBuilder::ref(uint32_t(ids[t]))});
      }
    }
    return uint32_t(ids[d.start]);
  }

  uint32_t regex_rule(const std::string& re) {
    auto it = regex_rules_.find(re);
    if (it != regex_rules_.end()) return it->second;
    const Dfa* d = regex_cache(re, true);
    uint32_t r = d ? dfa_raw_rules(*d) : rb_.new_rule();
    regex_rules_[re] = r;
    return r;
  }

  struct IntBounds {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    bool ok = true;
  };

  // Integer interval [ceil-ish(lo), floor-ish(hi)] of the flat's bounds, clamped soundly.
  IntBounds int_bounds(double lo, bool lo_excl, double hi, bool hi_excl, const std::string& ptr) {
    IntBounds b;
    if (lo > -kInf) {
      double v = lo_excl ? std::floor(lo) + 1 : std::ceil(lo);
      if (v > double(kIntLimit)) {
        error(ptr + "/minimum", "minimum", "lower bound too large (limit 1e15)");
        b.ok = false;
      }
      b.has_lo = true;
      b.lo = v < -double(kIntLimit) ? -kIntLimit : int64_t(v);
    }
    if (hi < kInf) {
      double v = hi_excl ? std::ceil(hi) - 1 : std::floor(hi);
      if (v < -double(kIntLimit)) {
        error(ptr + "/maximum", "maximum", "upper bound too small (limit -1e15)");
        b.ok = false;
      }
      b.has_hi = true;
      b.hi = v > double(kIntLimit) ? kIntLimit : int64_t(v);
    }
    return b;
  }

  static std::string int_regex(const IntBounds& b) {
    std::vector<std::string> parts;
    if (b.has_lo && b.has_hi && b.lo > b.hi) return "";
    if (!b.has_lo || b.lo < 0) {
      int64_t mlo = b.has_hi ? std::max<int64_t>(1, -b.hi) : 1;
      int64_t mhi = b.has_lo ? -b.lo : -1;
      if (mhi < 0 || mlo <= mhi) {
        std::string r = nonneg_range_regex(mlo, mhi);
        if (!r.empty()) parts.push_back("-(" + r + ")");
      }
    }
    if (!b.has_hi || b.hi >= 0) {
      std::string r = nonneg_range_regex(b.has_lo ? std::max<int64_t>(0, b.lo) : 0, b.has_hi ? b.hi : -1);
      if (!r.empty()) parts.push_back(r);
    }
    std::string out;
    for (size_t k = 0; k < parts.size(); ++k) out += (k ? "|" : "") + std::string("(") + parts[k] + ")";
    return out;
  }

  // Numbers a client reads back as written (see docs/GRAMMAR.md "Numbers"): at most 15
  // significant digits counted from the first digit (a lone leading "0" of "0.x" not counted), so
  // every generated number converts to a double and back to the same decimal (DBL_DIG = 15), and
  // exponents of at most two digits, so the value stays far inside the double range (no 1e+666
  // parsing to Infinity). Integers of at most 15 digits are below 2^53: exact in JavaScript. The
  // number regexes only write negative exponents: 9e50 is an integer no JavaScript client holds.
  static const Dfa& readable_numbers() {
    static const Dfa d = [] {
      // States: 0 start, 1 after '-', 2 int "0", 3..17 int digits k=1..15 (3+k-1),
      // 18..33 after '.' with k=0..15 digits so far (18+k), 34..48 fraction with k=1..15 (34+k-1),
      // 49 after e, 50 after e sign, 51 one exponent digit, 52 two exponent digits.
      Dfa m;
      m.next.assign(53, {});
      for (auto& row : m.next) row.fill(-1);
      m.accept.assign(53, 0);
      auto digits = [&](int from, int lo, int hi, int to) {
        for (int c = lo; c <= hi; ++c) m.next[size_t(from)][size_t('0' + c)] = to;
      };
      auto exp_from = [&](int q) {
        m.next[size_t(q)]['e'] = m.next[size_t(q)]['E'] = 49;
      };
      m.next[0]['-'] = 1;
      for (int q : {0, 1}) {
        m.next[size_t(q)]['0'] = 2;
        digits(q, 1, 9, 3);
      }
      m.accept[2] = 1;
      m.next[2]['.'] = 18;
      exp_from(2);
      for (int k = 1; k <= 15; ++k) {
        int q = 3 + k - 1;
        m.accept[size_t(q)] = 1;
        if (k < 15) digits(q, 0, 9, q + 1);
        m.next[size_t(q)]['.'] = 18 + k;
        exp_from(q);
      }
      for (int k = 0; k <= 15; ++k)
        if (k < 15) digits(18 + k, 0, 9, 34 + k);
      for (int k = 1; k <= 15; ++k) {
        int q = 34 + k - 1;
        m.accept[size_t(q)] = 1;
        if (k < 15) digits(q, 0, 9, q + 1);
        exp_from(q);
      }
      m.next[49]['+'] = m.next[49]['-'] = 50;
      digits(49, 0, 9, 51);
      digits(50, 0, 9, 51);
      digits(51, 0, 9, 52);
      m.accept[51] = m.accept[52] = 1;
      return m;
    }();
    return d;
  }

  // Strings "-"? int ("." frac)? (no exponent) whose value is a multiple of st = M / 10^S, with
  // at most S fraction digits and no trailing fraction zero (the canonical spelling).
  static Dfa step_dfa(const Step& st) {
    const int64_t M = st.m;
    const int S = st.s;
    // 0 start, 1 '-', 2 int "0", 3+r int rem r, then after '.' D_r = 3+M+r, then fraction
    // F(r, k, z) = 3+2M + ((r*S + (k-1))*2 + z), k = 1..S, z = last digit is zero.
    const size_t n = size_t(3 + 2 * M + 2 * M * S);
    Dfa d;
    d.next.assign(n, {});
    for (auto& row : d.next) row.fill(-1);
    d.accept.assign(n, 0);
    const int64_t scale = pow10i(S) % M;
    auto I = [&](int64_t r) { return int32_t(3 + r); };
    auto D = [&](int64_t r) { return int32_t(3 + M + r); };
    auto F = [&](int64_t r, int k, int z) { return int32_t(3 + 2 * M + (r * S + (k - 1)) * 2 + z); };
    d.next[0]['-'] = 1;
    d.next[0]['0'] = d.next[1]['0'] = 2;
    d.accept[2] = 1;  // 0 is a multiple of everything
    if (S > 0) d.next[2]['.'] = D(0);
    for (int c = 1; c <= 9; ++c) d.next[0][size_t('0' + c)] = d.next[1][size_t('0' + c)] = I(c % M);
    for (int64_t r = 0; r < M; ++r) {
      for (int c = 0; c <= 9; ++c) d.next[size_t(I(r))][size_t('0' + c)] = I((r * 10 + c) % M);
      d.accept[size_t(I(r))] = (r * scale) % M == 0;
      if (S > 0) {
        d.next[size_t(I(r))]['.'] = D(r);
        for (int c = 0; c <= 9; ++c) d.next[size_t(D(r))][size_t('0' + c)] = F((r * 10 + c) % M, 1, c == 0);
      }
      for (int k = 1; k <= S; ++k)
        for (int z = 0; z < 2; ++z) {
          const int32_t q = F(r, k, z);
          d.accept[size_t(q)] = !z && (r * (pow10i(S - k) % M)) % M == 0;
          if (k < S)
            for (int c = 0; c <= 9; ++c) d.next[size_t(q)][size_t('0' + c)] = F((r * 10 + c) % M, k + 1, c == 0);
        }
    }
    return d;
  }

  // L(d) plus, for each accepted number written without an exponent, the same number followed by
  // fraction zeros: "20" -> "20.0", "20.00"; "1.5" -> "1.50" (at most max_zeros of them; the
  // readable-number cap still bounds the digits). Same values, so exactly as valid (issue 29:
  // a model that has written "20.0" under a `number` schema may stop there instead of being
  // pushed to "20.01"). A state reached both before and after '.' (or after an exponent) gets no
  // tail; beyond max_states the automaton is returned unchanged (a subset, still sound).
  static Dfa zero_tail(const Dfa& d, int max_zeros = 15, size_t max_states = 100000) {
    enum : uint8_t { kIntPart = 1, kFracPart = 2, kExpPart = 4 };
    std::vector<uint8_t> label(d.next.size(), 0);
    std::vector<int32_t> work = {d.start};
    label[size_t(d.start)] = kIntPart;
    while (!work.empty()) {
      const int32_t q = work.back();
      work.pop_back();
      for (int c = 0; c < 256; ++c) {
        const int32_t to = d.next[size_t(q)][size_t(c)];
        if (to < 0) continue;
        const uint8_t l = c == 'e' || c == 'E' ? uint8_t(kExpPart)
                          : c == '.'           ? uint8_t(kFracPart)
                                               : label[size_t(q)];
        if ((label[size_t(to)] | l) == label[size_t(to)]) continue;
        label[size_t(to)] |= l;
        work.push_back(to);
      }
    }
    // Product states (q, t): q a state of d or -1; t = 0 no tail, 1 after the tail's '.', 1 + j
    // after j tail zeros (accepting). Of two tails the one with fewer zeros allows more.
    std::map<std::pair<int32_t, int>, int32_t> id;
    std::vector<std::pair<int32_t, int>> states;
    Dfa out;
    auto intern = [&](int32_t q, int t) -> int32_t {
      if (q < 0 && t == 0) return -1;
      auto [it, fresh] = id.emplace(std::pair{q, t}, int32_t(states.size()));
      if (fresh) {
        states.push_back({q, t});
        out.next.emplace_back();
        out.next.back().fill(-1);
        out.accept.push_back((q >= 0 && d.accept[size_t(q)]) || t >= 2);
      }
      return it->second;
    };
    out.start = intern(d.start, 0);
    for (size_t i = 0; i < states.size(); ++i) {
      if (states.size() > max_states) return d;
      const auto [q, t] = states[i];
      for (int c = 0; c < 256; ++c) {
        const int32_t q2 = q >= 0 ? d.next[size_t(q)][size_t(c)] : -1;
        int t2 = 0;
        if (c == '0' && t >= 1 && t < 1 + max_zeros) t2 = t + 1;
        if (q >= 0 && d.accept[size_t(q)]) {
          if (c == '.' && label[size_t(q)] == kIntPart) t2 = 1;
          if (c == '0' && label[size_t(q)] == kFracPart) t2 = 2;
        }
        const int32_t to = intern(q2, t2);
        out.next[i][size_t(c)] = to;
      }
    }
    return out;
  }

  // A number rule from a full-match regex, narrowed to readable numbers (memoized per regex and
  // zero-tail mode).
  uint32_t num_regex_rule(const std::string& re) {
    const std::string key = (zero_tail_ ? "Z" : "P") + re;
    auto it = num_rules_.find(key);
    if (it != num_rules_.end()) return it->second;
    const Dfa* d = regex_cache(re, true);
    uint32_t r = d ? num_dfa_rule(*d) : rb_.new_rule();
    num_rules_[key] = r;
    return r;
  }
  uint32_t num_dfa_rule(const Dfa& d_in) {
    const Dfa d = zero_tail_ ? zero_tail(d_in) : d_in;
    Dfa both = dfa_intersect(d, readable_numbers());
    if (both.next.empty()) return dfa_raw_rules(d);  // too large to intersect: its own digits are capped
    return dfa_raw_rules(both);
  }

  uint32_t number_rule(const Flat& f) {
    // `number` values may end in fraction zeros (20.0, 1.50: see zero_tail); `integer` values are
    // plain digits, so a client reading them (Python's json: 1.0 is a float) gets an integer.
    zero_tail_ = (f.types & kNumFrac) != 0;
    bool bounded = f.lo > -kInf || f.hi < kInf;
    const bool ints = (f.types & kInt) != 0;
    const bool step_frac = f.multiple_of > 0 && f.step_s > 0;
    bool frac = (f.types & kNumFrac) && f.multiple_of == 0;
    // Without bounds the digits are still capped, so a small model cannot loop on digits until it
    // runs out of tokens (and the client reads back what was written, see readable_numbers).
    if (!bounded && f.multiple_of == 0) {
      if (!ints) return num_regex_rule("-?(0|[1-9][0-9]{0,14})\\.[0-9]{0,14}[1-9]");
      return num_regex_rule(frac ? "-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,15})?([eE]-[0-9]{1,2})?" : "(0|-?[1-9][0-9]{0,14})");
    }
    IntBounds ib = int_bounds(f.lo, f.lo_excl, f.hi, f.hi_excl, f.ptr);
    if (!ib.ok) return rb_.new_rule();
    std::string ire = bounded ? int_regex(ib) : "(0|-?[1-9][0-9]{0,14})";
    uint32_t r = rb_.new_rule();
    if (step_frac) {
      // Decimal steps (0.01, 0.25): each piece of the range language (integers, fraction
      // intervals) intersected with the exact step automaton.
      // The remainder automaton has 3 + 2M(1 + S) states of 1 KB each: bounded before building.
      if (f.step_m * 2 * (1 + f.step_s) > 100000) {
        error(f.ptr, "multipleOf", "a fractional multipleOf with this many units of its last digit is not supported");
        return r;
      }
      const Dfa step = step_dfa(Step{true, f.step_m, f.step_s});
      auto emit = [&](const Dfa& piece) {
        Dfa both = dfa_intersect(piece, step);
        if (both.next.empty()) {
          error(f.ptr, "multipleOf", "multipleOf with these bounds is too complex");
          return;
        }
        if (!both.empty_language()) rb_.add_alt(r, {RuleBuilder::ref(num_dfa_rule(both))});
      };
      if (ints && !ire.empty())
        if (const Dfa* d = regex_cache(ire, true)) emit(*d);
      if (!(f.types & kNumFrac)) return r;
      if (!bounded) {
        if (const Dfa* d = regex_cache("-?(0|[1-9][0-9]{0,14})\\.[0-9]*[1-9]", true)) emit(*d);
        return r;
      }
      Decimal L, H;
      bool exact = true;
      if (f.lo > -kInf) exact = exact && (L = parse_decimal(f.lo_text)).ok;
      if (f.hi < kInf) exact = exact && (H = parse_decimal(f.hi_text)).ok;
      if (!exact) {
        error(f.ptr, "multipleOf", "a fractional multipleOf needs bounds written as plain decimals");
        return r;
      }
      frac_pieces(f, L, H, emit);
      return r;
    }
    if (f.multiple_of > 0) {
      if (ire.empty() || !ints) return r;
      const Dfa* range = regex_cache(ire, true);
      if (!range) return r;
      int64_t k = f.step_m;
      // States: 0 start, 1 after '-', 2 "0", 3 + rem: after a nonzero leading digit.
      Dfa m;
      m.next.assign(size_t(3 + k), {});
      for (auto& row : m.next) row.fill(-1);
      m.accept.assign(size_t(3 + k), 0);
      m.accept[2] = 1;
      m.accept[3] = 1;
      m.next[0]['-'] = 1;
      m.next[0]['0'] = 2;
      for (int d = 1; d <= 9; ++d) m.next[0]['0' + d] = m.next[1]['0' + d] = int32_t(3 + d % k);
      for (int64_t rem = 0; rem < k; ++rem)
        for (int d = 0; d <= 9; ++d) m.next[size_t(3 + rem)]['0' + d] = int32_t(3 + (rem * 10 + d) % k);
      Dfa both = dfa_intersect(*range, m);
      if (both.next.empty()) {
        error(f.ptr, "multipleOf", "multipleOf with these bounds is too complex");
        return r;
      }
      if (!both.empty_language()) rb_.add_alt(r, {RuleBuilder::ref(num_dfa_rule(both))});
      return r;
    }
    if (ints && !ire.empty()) rb_.add_alt(r, {RuleBuilder::ref(num_regex_rule(ire))});
    if (frac) {
      Decimal L, H;
      bool exact = true;
      if (f.lo > -kInf) exact = exact && (L = parse_decimal(f.lo_text)).ok;
      if (f.hi < kInf) exact = exact && (H = parse_decimal(f.hi_text)).ok;
      if (exact) {
        frac_pieces(f, L, H, [&](const Dfa& d) { rb_.add_alt(r, {RuleBuilder::ref(num_dfa_rule(d))}); });
        return r;
      }
      // Fallback (bounds with huge exponents or long fractions): I < x < I+1 strictly (x > 0) or
      // -(I+1) < x < -I (x < 0) for whole unit intervals inside the range: conservative.
      IntBounds pos;  // I in [ceil(lo), floor(hi) - 1], I >= 0
      pos.has_lo = true;
      pos.lo = 0;
      if (f.lo > -kInf) {
        IntBounds t = int_bounds(f.lo, false, kInf, false, f.ptr);
        pos.lo = std::max<int64_t>(0, t.lo);
      }
      if (f.hi < kInf) {
        IntBounds t = int_bounds(-kInf, false, f.hi, false, f.ptr);
        pos.has_hi = true;
        pos.hi = t.hi - 1;
      }
      IntBounds neg;  // I in [ceil(-hi), floor(-lo) - 1], I >= 0
      neg.has_lo = true;
      neg.lo = 0;
      if (f.hi < kInf) {
        IntBounds t = int_bounds(-f.hi, false, kInf, false, f.ptr);
        neg.lo = std::max<int64_t>(0, t.lo);
      }
      if (f.lo > -kInf) {
        IntBounds t = int_bounds(-kInf, false, -f.lo, false, f.ptr);
        neg.has_hi = true;
        neg.hi = t.hi - 1;
      }
      const std::string fr = "\\.[0-9]*[1-9]";
      if (!(pos.has_hi && pos.hi < pos.lo)) {
        std::string p = nonneg_range_regex(pos.lo, pos.has_hi ? pos.hi : -1);
        if (!p.empty()) rb_.add_alt(r, {RuleBuilder::ref(num_regex_rule("(" + p + ")" + fr))});
      }
      if (!(neg.has_hi && neg.hi < neg.lo)) {
        std::string p = nonneg_range_regex(neg.lo, neg.has_hi ? neg.hi : -1);
        if (!p.empty()) rb_.add_alt(r, {RuleBuilder::ref(num_regex_rule("-(" + p + ")" + fr))});
      }
    }
    return r;
  }

  // Non-integers in the flat's bounds (exact decimals L, H), as automata handed to `emit`.
  // Non-integers are written I.F with F not ending in 0. Positive side: y = x; negative side:
  // y = -x with the bounds negated and swapped. Exact (digit automata) at the bounds.
  void frac_pieces(const Flat& f, const Decimal& L, const Decimal& H, const std::function<void(const Dfa&)>& emit) {
    auto negate = [](Decimal d) {
      if (d.ip != 0 || !d.fp.empty()) d.neg = !d.neg;
      return d;
    };
    const Decimal* lp = f.lo > -kInf ? &L : nullptr;
    const Decimal* hp = f.hi < kInf ? &H : nullptr;
    Decimal nl = negate(H), nh = negate(L);
    frac_side(emit, lp, f.lo_excl, hp, f.hi_excl, "");
    frac_side(emit, hp ? &nl : nullptr, f.hi_excl, lp ? &nh : nullptr, f.lo_excl, "-");
  }

  // Fractions y = I.F > 0 (F not ending in 0) with L <= y <= H (exclusive flags), L/H may be null
  // (unbounded) or on the other side of zero; emits automata, each prefixed by `sign`.
  void frac_side(const std::function<void(const Dfa&)>& emit, const Decimal* L, bool Lex, const Decimal* H, bool Hex,
                 const std::string& sign) {
    if (H && (H->neg || (H->ip == 0 && H->fp.empty()))) return;  // H <= 0 < y
    bool lpos = L && !L->neg;  // a negative lower bound does not constrain y > 0
    const std::string fr = "\\.[0-9]*[1-9]";
    // Whole unit intervals (I, I+1) inside the range.
    int64_t a = lpos ? (L->fp.empty() ? L->ip : L->ip + 1) : 0;
    int64_t b = H ? H->ip - 1 : -1;
    if (!H || a <= b) {
      std::string p = nonneg_range_regex(a, H ? b : -1);
      if (!p.empty())
        if (const Dfa* d = regex_cache(sign + "(" + p + ")" + fr, true)) emit(*d);
    }
    // The unit intervals holding a fractional bound.
    std::vector<int64_t> special;
    if (lpos && !L->fp.empty()) special.push_back(L->ip);
    if (H && !H->fp.empty() && (special.empty() || special[0] != H->ip)) special.push_back(H->ip);
    for (int64_t I : special) {
      bool at_l = lpos && !L->fp.empty() && L->ip == I;
      bool at_h = H && !H->fp.empty() && H->ip == I;
      if (!at_l && lpos && L->ip > I) continue;   // whole interval below L
      if (!at_h && H && H->ip < I + 1) continue;  // whole interval above H
      std::string prefix = sign + std::to_string(I) + "\\.";
      if (at_l && at_h) {
        const Dfa* d1 = regex_cache(prefix + "(" + frac_ge(L->fp, Lex) + ")", true);
        const Dfa* d2 = regex_cache(prefix + "(" + frac_le(H->fp, Hex) + ")", true);
        if (!d1 || !d2) continue;
        Dfa both = dfa_intersect(*d1, *d2);
        if (!both.next.empty() && !both.empty_language()) emit(both);
      } else {
        std::string body = at_l ? frac_ge(L->fp, Lex) : frac_le(H->fp, Hex);
        if (!body.empty())
          if (const Dfa* d = regex_cache(prefix + "(" + body + ")", true)) emit(*d);
      }
    }
  }

  // ---- strings ----
  // Rules for the JSON-encoded content of strings whose decoded UTF-8 bytes are accepted by `d`,
  // with code-point count in [min_len, max_len]; the rule includes the closing quote.
  // close_tag: KeyTag bits for the closing quote (kTagKeyClose when the string is a key).
  uint32_t dfa_string_rules(const Dfa& d, int64_t min_len, int64_t max_len, const std::string& ptr,
                            uint8_t close_tag = 0) {
    std::map<std::pair<int32_t, int64_t>, uint32_t> ids;
    std::vector<std::pair<int32_t, int64_t>> work;
    int64_t cap = max_len >= 0 ? max_len : min_len;
    auto get = [&](int32_t q, int64_t c) {
      auto key = std::make_pair(q, c);
      auto it = ids.find(key);
      if (it != ids.end()) return it->second;
      uint32_t r = rb_.new_rule();
      ids.emplace(key, r);
      work.push_back(key);
      return r;
    };
    uint32_t start = get(d.start, 0);
    std::map<int32_t, int32_t> any_memo;
    std::map<std::array<int32_t, 0xF5 - 0xC2>, int32_t> nonascii_memo;
    for (size_t k = 0; k < work.size() && !rb_.over_budget; ++k) {
      if (work.size() > 200000) {
        error(ptr, "maxLength", "string constraints too large to compile");
        break;
      }
      auto [q, c] = work[k];
      uint32_t r = ids[{q, c}];
      if (d.accept[q] && c >= min_len) rb_.add_alt(r, {tagged(rb_.byte('"'), close_tag)});
      // A state where every character leads to the same state ([\s\S], or after a prefix of a
      // pattern like ^ab[\s\S]*) is written with the StrChar terminal, as plain strings are: the
      // mask then takes the string fast paths (safe-token bitset, counted-chain runs) instead of
      // walking the whole vocabulary trie for each of up to thousands of distinct states.
      auto memo_it = any_memo.find(q);
      if (memo_it == any_memo.end()) memo_it = any_memo.emplace(q, any_char_target(d, q)).first;
      if (int32_t t = memo_it->second; t >= 0) {
        int64_t c2 = c + 1;
        if (max_len >= 0 && c2 > max_len) continue;
        if (max_len < 0) c2 = std::min(c2, cap);
        if (t == q && c2 == c) rb_.add_alt(r, {{ElemKind::StrCharLoop, 0}, RuleBuilder::ref(r)});
        else rb_.add_alt(r, {{ElemKind::StrChar, 0}, RuleBuilder::ref(get(t, c2))});
        continue;
      }
      // Every non-ASCII character to one state t, with some printable ASCII bytes ([^<>], [^x]):
      // one StrCharRaw terminal for all of them, so counted chains get the string-run fast path.
      ByteSet raw_class{};
      int64_t raw_c2 = -1;
      int32_t raw_t = -1;
      {
        // The answer depends only on where the lead bytes go: states that agree there share it
        // (all states of a key set minus 150,000 names send them to one state).
        std::array<int32_t, 0xF5 - 0xC2> leads;
        std::copy(d.next[size_t(q)].begin() + 0xC2, d.next[size_t(q)].begin() + 0xF5, leads.begin());
        auto na_it = nonascii_memo.find(leads);
        if (na_it == nonascii_memo.end()) na_it = nonascii_memo.emplace(leads, nonascii_target(d, q)).first;
        raw_t = na_it->second;
        if (raw_t >= 0) {
          for (int b = 0x20; b < 0x80; ++b)
            if (b != '"' && b != '\\' && d.next[q][size_t(b)] == raw_t) byteset_add(raw_class, uint8_t(b));
          raw_c2 = c + 1;
          if (max_len >= 0 && raw_c2 > max_len) raw_c2 = -1;
          else if (max_len < 0) raw_c2 = std::min(raw_c2, cap);
          if (raw_class == ByteSet{} || raw_c2 < 0) raw_t = -1;
        }
        if (raw_t >= 0) {
          ByteSet cls = raw_class;
          for (int b = 0x80; b < 0x100; ++b) byteset_add(cls, uint8_t(b));
          rb_.add_alt(r, {{ElemKind::StrCharRaw, rb_.cls(cls).arg}, RuleBuilder::ref(get(raw_t, raw_c2))});
        }
      }
      std::map<std::pair<int32_t, int64_t>, ByteSet> raw, escaped;
      for (int b = 0; b < 256; ++b) {
        if (raw_t >= 0 && (b >= 0x80 || byteset_has(raw_class, uint8_t(b)))) continue;  // StrCharRaw's
        int32_t t = d.next[q][b];
        if (t < 0) continue;
        int64_t c2 = c + (((b & 0xC0) != 0x80) ? 1 : 0);
        if (max_len >= 0 && c2 > max_len) continue;
        if (max_len < 0) c2 = std::min(c2, cap);
        byteset_add(b >= 0x20 && b != '"' && b != '\\' ? raw[{t, c2}] : escaped[{t, c2}], uint8_t(b));
      }
      // Escapes share one rule per set of escaped bytes and target: a state then has one stack
      // for them instead of one per control character (30+), which made every advance, and so
      // every mask, of a long patterned string several times slower.
      for (auto& [key, set] : escaped)
        rb_.add_alt(r, {rb_.byte('\\'), RuleBuilder::ref(escape_rule(set)), RuleBuilder::ref(get(key.first, key.second))});
      for (auto& [key, set] : raw) rb_.add_alt(r, {rb_.cls(set), RuleBuilder::ref(get(key.first, key.second))});
    }
    return start;
  }

  // What follows the backslash of the JSON escapes of the bytes in `set` (short forms where JSON
  // has them, else u00XX). Memoized per set.
  uint32_t escape_rule(const ByteSet& set) {
    auto it = escape_rules_.find(set);
    if (it != escape_rules_.end()) return it->second;
    static const char* hex = "0123456789abcdef";
    uint32_t r = rb_.new_rule();
    for (int b = 0; b < 256; ++b) {
      if (!byteset_has(set, uint8_t(b))) continue;
      std::string esc;
      switch (b) {
        case '"': esc = "\""; break;
        case '\\': esc = "\\"; break;
        case '\n': esc = "n"; break;
        case '\r': esc = "r"; break;
        case '\t': esc = "t"; break;
        case '\b': esc = "b"; break;
        case '\f': esc = "f"; break;
        default: esc = std::string("u00") + hex[b >> 4] + hex[b & 15];
      }
      std::vector<Elem> seq;
      rb_.lit(seq, esc);
      rb_.add_alt(r, std::move(seq));
    }
    escape_rules_.emplace(set, r);
    return r;
  }

  // The state every valid UTF-8 character leads to from q, or -1 when characters differ (or some
  // character is refused). Checked along the UTF-8 structure: lead byte, then continuation ranges.
  static int32_t any_char_target(const Dfa& d, int32_t q) {
    const int32_t t = nonascii_target(d, q);
    if (t < 0) return -1;
    for (int b = 0; b < 0x80; ++b)
      if (d.next[size_t(q)][size_t(b)] != t) return -1;
    return t;
  }

  // The state every valid multi-byte UTF-8 character leads to from q, or -1.
  static int32_t nonascii_target(const Dfa& d, int32_t q) {
    const int32_t s0 = d.next[size_t(q)][0xC2];
    const int32_t t = s0 < 0 ? -1 : d.next[size_t(s0)][0x80];
    if (t < 0) return -1;
    std::map<std::pair<int32_t, int>, bool> memo;
    // All `k` more continuation bytes (80-BF) from s end in t.
    std::function<bool(int32_t, int)> conts = [&](int32_t s, int k) -> bool {
      if (s < 0) return false;
      if (k == 0) return s == t;
      auto key = std::make_pair(s, k);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      bool ok = true;
      for (int b = 0x80; b <= 0xBF && ok; ++b) ok = conts(d.next[size_t(s)][size_t(b)], k - 1);
      memo[key] = ok;
      return ok;
    };
    // lead byte range, first continuation range, continuation bytes after it
    struct Seq { int lead_lo, lead_hi, lo, hi, rest; };
    static const Seq seqs[] = {{0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1}, {0xE1, 0xEC, 0x80, 0xBF, 1},
                               {0xED, 0xED, 0x80, 0x9F, 1}, {0xEE, 0xEF, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2},
                               {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2}};
    for (const Seq& sq : seqs)
      for (int lead = sq.lead_lo; lead <= sq.lead_hi; ++lead) {
        int32_t s1 = d.next[size_t(q)][size_t(lead)];
        if (s1 < 0) return -1;
        for (int b = sq.lo; b <= sq.hi; ++b)
          if (!conts(d.next[size_t(s1)][size_t(b)], sq.rest)) return -1;
      }
    return t;
  }

  uint32_t string_rule(const Flat& f) {
    if (opts_.gemma4_values) {
      std::vector<Elem> seq;
      rb_.lit(seq, std::string(kGemma4Quote));
      seq.push_back(RuleBuilder::ref(raw_string_rule(f, RawSyntax::Gemma4)));
      const uint32_t g = rb_.new_rule();
      rb_.add_alt(g, std::move(seq));
      return g;
    }
    uint32_t r = rb_.new_rule();
    std::vector<std::string> excluded;  // not {const/enum} strings
    if (!f.has_enum)
      for (const JValue* x : f.not_values)
        if (x->is_string()) excluded.push_back(x->str);
    if (f.patterns.empty() && f.formats.empty() && excluded.empty()) {
      if (f.min_len == 0 && f.max_len < 0) return plain_string_rule(rb_);
      if (f.max_len >= 0 && f.max_len < f.min_len) return r;
      // Counted chain: body_i = chars so far i.
      int64_t top = f.max_len >= 0 ? f.max_len : f.min_len;
      std::vector<uint32_t> body(size_t(top + 1));
      for (auto& b : body) b = rb_.new_rule();
      for (int64_t i = 0; i <= top; ++i) {
        uint32_t b = body[size_t(i)];
        if (i >= f.min_len) rb_.add_alt(b, {rb_.byte('"')});
        if (i < top) rb_.add_alt(b, {{ElemKind::StrChar, 0}, RuleBuilder::ref(body[size_t(i + 1)])});
        else if (f.max_len < 0) rb_.add_alt(b, {{ElemKind::StrCharLoop, 0}, RuleBuilder::ref(b)});
      }
      rb_.add_alt(r, {rb_.byte('"'), RuleBuilder::ref(body[0])});
      return r;
    }
    const Dfa* acc = nullptr;
    Dfa tmp;
    for (const auto& p : f.patterns) {
      const Dfa* d = regex_cache(p, false);
      if (!d) return r;  // error already reported by the scan
      if (!acc) { acc = d; continue; }
      tmp = dfa_intersect(*acc, *d);
      if (tmp.next.empty()) { error(f.ptr, "pattern", "patterns too complex to intersect"); return r; }
      acc = &tmp;
    }
    Dfa tmp2;
    for (const auto& fm : f.formats) {
      const Dfa* d = format_dfa(fm);
      if (!d) return r;
      if (!acc) { acc = d; continue; }
      tmp2 = dfa_intersect(*acc, *d);
      if (tmp2.next.empty()) { error(f.ptr, "format", "format and pattern too complex to intersect"); return r; }
      tmp = std::move(tmp2);
      acc = &tmp;
    }
    Dfa tmp3;
    if (!excluded.empty()) {
      // Strings other than the excluded ones; without a pattern, unescaped strings of any
      // characters (a subset: no quotes, backslashes or controls).
      if (!acc) acc = regex_cache("[^\"\\\\\\x00-\\x1f]*", true);
      if (!acc) return r;
      if (!charge_literals(excluded)) return r;
      tmp3 = dfa_minus(*acc, dfa_literals(excluded));
      if (tmp3.next.empty()) { error(f.ptr, "not", "'not' with these strings is too complex"); return r; }
      acc = &tmp3;
    }
    if (acc->empty_language()) return r;
    rb_.add_alt(r, {rb_.byte('"'), RuleBuilder::ref(dfa_string_rules(*acc, f.min_len, f.max_len, f.ptr))});
    return r;
  }

  // ---- arrays ----
  uint32_t array_rule(const Flat& f) {
    uint32_t r = rb_.new_rule();
    int64_t k = int64_t(f.prefix.size());
    bool items_false = false;
    for (const JValue* s : f.items.conj)
      if (s->is_bool() && !s->boolean) items_false = true;
    int64_t max = f.max_items;
    if (items_false) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && max < f.min_items) return r;
    std::vector<uint32_t> elem_rules;
    for (const auto& p : f.prefix) elem_rules.push_back(compile_sub(p));
    uint32_t item_rule = items_false ? 0 : compile_sub(f.items);
    int64_t loop_at = std::max<int64_t>({k, f.min_items, 1});
    int64_t chain = max >= 0 ? max : loop_at;
    if (chain > 100000) {
      error(f.ptr, "maxItems", "array bounds too large");
      return r;
    }
    std::vector<uint32_t> a(size_t(chain + 1));
    for (auto& x : a) x = rb_.new_rule();
    for (int64_t i = 0; i <= chain; ++i) {
      uint32_t ai = a[size_t(i)];
      if (i >= f.min_items) {
        std::vector<Elem> close;
        if (i > 0) sp_.before_close(close);
        close.push_back(rb_.byte(']'));
        rb_.add_alt(ai, std::move(close));
      }
      bool can_add = max < 0 || i < max;
      if (!can_add) continue;
      uint32_t er = i < k ? elem_rules[size_t(i)] : item_rule;
      if (i >= k && items_false) continue;
      std::vector<Elem> seq;
      if (i > 0) {
        seq.push_back(rb_.byte(','));
        sp_.after_comma(seq);
      }
      seq.push_back(RuleBuilder::ref(er));
      sp_.after_value(seq);
      uint32_t next = (i < chain) ? a[size_t(i + 1)] : ai;  // the last one loops when unbounded
      seq.push_back(RuleBuilder::ref(next));
      rb_.add_alt(ai, std::move(seq));
    }
    std::vector<Elem> open{rb_.byte('[')};
    sp_.after_open(open);
    open.push_back(RuleBuilder::ref(a[0]));
    rb_.add_alt(r, std::move(open));
    return r;
  }

  // ---- objects ----
  // The key language of propertyNames (all of f.property_names): an automaton over the decoded
  // name (null = any) and code-point bounds; none = no name at all is valid.
  struct NameRule {
    bool none = false;
    std::shared_ptr<Dfa> dfa;
    int64_t min_len = 0, max_len = -1;
    bool ok(const std::string& name) const {
      if (none) return false;
      int64_t n = count_code_points(name);
      if (n < min_len || (max_len >= 0 && n > max_len)) return false;
      return !dfa || dfa_matches(*dfa, name);
    }
  };

  NameRule name_rule(const Flat& f) {
    NameRule nr;
    auto narrow = [&](const Dfa& d) {
      if (!nr.dfa) {
        nr.dfa = std::make_shared<Dfa>(d);
        return;
      }
      Dfa both = dfa_intersect(*nr.dfa, d);
      if (both.next.empty()) {
        error(f.ptr + "/propertyNames", "propertyNames", "propertyNames constraints too complex to intersect");
        nr.none = true;
        return;
      }
      *nr.dfa = std::move(both);
    };
    for (const JValue* s : f.property_names) {
      if (s->is_bool()) {
        if (!s->boolean) nr.none = true;
        continue;
      }
      if (!s->is_object()) continue;
      if (const JValue* t = s->get("type")) {
        bool str = t->is_string() && t->str == "string";
        if (t->is_array())
          for (const auto& x : t->arr) str = str || (x.is_string() && x.str == "string");
        if (!str) nr.none = true;
      }
      std::vector<std::string> lits;
      bool has_lits = false;
      if (const JValue* e = s->get("enum"); e && e->is_array()) {
        has_lits = true;
        for (const auto& x : e->arr)
          if (x.is_string()) lits.push_back(x.str);
      }
      if (const JValue* c = s->get("const")) {
        if (has_lits) {
          std::vector<std::string> keep;
          for (const auto& l : lits)
            if (c->is_string() && c->str == l) keep.push_back(l);
          lits = keep;
        } else {
          has_lits = true;
          if (c->is_string()) lits.push_back(c->str);
        }
      }
      if (has_lits) {
        if (lits.empty()) nr.none = true;
        else if (charge_literals(lits)) narrow(dfa_literals(lits));
      }
      if (const JValue* p = s->get("pattern"); p && p->is_string()) {
        const Dfa* d = regex_cache(p->str, false);
        if (!d) nr.none = true;  // error already reported by the scan
        else narrow(*d);
      }
      if (const JValue* v = s->get("minLength"); v && v->is_number()) nr.min_len = std::max(nr.min_len, int64_t(v->number));
      if (const JValue* v = s->get("maxLength"); v && v->is_number())
        nr.max_len = nr.max_len < 0 ? int64_t(v->number) : std::min(nr.max_len, int64_t(v->number));
    }
    return nr;
  }

  // Charges the automata that `dfa_minus(X, dfa_literals(words))` builds to the compile's scratch
  // (RuleBuilder::charge_scratch): the literal trie's nodes (distinct prefixes), once for the
  // literal automaton and once for the difference; false (and the compile is over budget) when
  // they would not fit.
  bool charge_literals(const std::vector<std::string>& words) {
    std::vector<std::string_view> sorted(words.begin(), words.end());
    std::sort(sorted.begin(), sorted.end());
    size_t nodes = 1;
    for (size_t i = 0; i < sorted.size(); ++i) {
      size_t lcp = 0;
      if (i > 0)
        while (lcp < sorted[i].size() && lcp < sorted[i - 1].size() && sorted[i][lcp] == sorted[i - 1][lcp]) ++lcp;
      nodes += sorted[i].size() - lcp;
    }
    return rb_.charge_scratch(2 * nodes * sizeof(std::array<int32_t, 256>));
  }

  static constexpr int64_t kMaxCountedFreeKeys = 64;
  // PropertyOrder::Any: the most object states (see object_rule) before an object keeps schema order.
  static constexpr double kMaxAnyOrderStates = 4096;
  int64_t free_key_cap(const Dfa& keys) {
    const int64_t n = dfa_count(keys, kMaxCountedFreeKeys);
    return n > kMaxCountedFreeKeys ? -1 : n;
  }

  // Whether a property name can be written in the argument syntax at all (a Python keyword or
  // an XML parameter name is not quoted, so it cannot hold the characters that end it).
  static bool name_writable(const std::string& name, ArgumentSyntax syn) {
    if (syn == ArgumentSyntax::JsonObject) return true;
    if (syn == ArgumentSyntax::Gemma4Object) return gemma4_key(name);
    if (syn == ArgumentSyntax::XmlParameters) return !name.empty() && name.find_first_of("<>\r\n") == std::string::npos;
    return python_identifier(name);
  }

  uint32_t object_rule(const Flat& f, ArgumentSyntax syn = ArgumentSyntax::JsonObject) {
    if (opts_.gemma4_values) syn = ArgumentSyntax::Gemma4Object;  // every object, nested ones too
    const bool json = syn == ArgumentSyntax::JsonObject;
    const bool xml = syn == ArgumentSyntax::XmlParameters;
    const bool gemma = syn == ArgumentSyntax::Gemma4Object;
    uint32_t r = rb_.new_rule();
    struct P {
      std::string name;
      bool required;
      uint32_t rule;
    };
    const NameRule nr = name_rule(f);
    // not {required: S}: one member of S is left out (one that is not required; none -> the
    // object is unsatisfiable). Leaving out more than needed only narrows the grammar.
    std::vector<std::string> forbidden;
    for (const auto& set : f.not_required) {
      bool done = false;
      for (const auto& k : set)
        if (std::find(forbidden.begin(), forbidden.end(), k) != forbidden.end()) done = true;
      if (done) continue;
      const std::string* pick = nullptr;  // the last one: earlier (usually more important) keys stay
      for (const auto& k : set)
        if (std::find(f.required.begin(), f.required.end(), k) == f.required.end()) pick = &k;
      if (!pick) return r;
      forbidden.push_back(*pick);
    }
    auto is_forbidden = [&](const std::string& k) {
      return std::find(forbidden.begin(), forbidden.end(), k) != forbidden.end() || !nr.ok(k);
    };
    std::vector<P> props;
    std::vector<std::string> names;  // listed (or required) names: never written as extra keys
    for (const auto& [name, sub] : f.props) {
      if (rb_.over_budget) return r;  // refused for size anyway: stop spending time and memory
      bool req = std::find(f.required.begin(), f.required.end(), name) != f.required.end();
      names.push_back(name);
      if (is_forbidden(name)) {
        if (req) return r;  // required but its name is invalid: unsatisfiable
        continue;
      }
      if (!name_writable(name, syn)) {
        if (req) error(f.ptr + "/properties/" + pointer_escape(name), "properties",
                       "property name '" + name + "' cannot be written in this call format");
        continue;  // optional: never written
      }
      props.push_back({name, req, xml ? xml_value_rule(sub) : compile_sub(sub)});
    }
    // Additional properties: explicit schema, or the default (true per spec, false for tools).
    bool add_allowed;
    Sub add_sub;
    if (f.additional_set) {
      add_sub = f.additional;
      add_allowed = true;
      for (const JValue* s : add_sub.conj)
        if (s->is_bool() && !s->boolean) add_allowed = false;
    } else {
      add_allowed = opts_.additional_properties_default;
    }
    for (const auto& req : f.required) {
      if (std::find(names.begin(), names.end(), req) != names.end()) continue;
      // Required but not listed: governed by additionalProperties.
      if (!add_allowed || is_forbidden(req)) return r;  // unsatisfiable
      if (!name_writable(req, syn)) {
        error(f.ptr + "/required", "required", "property name '" + req + "' cannot be written in this call format");
        return r;
      }
      props.push_back({req, true, xml ? xml_value_rule(add_sub) : compile_sub(add_sub)});
      names.push_back(req);
    }
    if (gemma) {
      // The template writes members with dictsort: by name, case-insensitively (stable for names
      // that differ only in case).
      auto lower = [](std::string k) {
        for (char& ch : k) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        return k;
      };
      std::stable_sort(props.begin(), props.end(), [&](const P& a, const P& b) { return lower(a.name) < lower(b.name); });
    }
    if (nr.none) add_allowed = false;
    uint32_t add_key = 0, add_val = 0;
    // Keys are unique (the matcher refuses a repeated one): when the free keys' language is small,
    // at most that many free members can be written, so the grammar stops offering another one
    // there (a ',' with only repeated keys after it would be a dead end); -1: no such bound.
    int64_t max_free = -1;
    if (add_allowed && !json) {
      // Extra names unquoted: identifiers (what both formats can write), other than the listed names.
      add_val = xml ? xml_value_rule(add_sub) : compile_sub(add_sub);
      const Dfa* ident = regex_cache("[A-Za-z_][A-Za-z0-9_]*", true);
      std::vector<std::string> lits(names.begin(), names.end());
      lits.insert(lits.end(), forbidden.begin(), forbidden.end());
      if (!charge_literals(lits)) return r;
      Dfa keys = !ident ? Dfa{} : lits.empty() ? *ident : dfa_minus(*ident, dfa_literals(lits));
      if (nr.dfa && !keys.next.empty()) keys = dfa_intersect(keys, *nr.dfa);
      if (!keys.next.empty() && (nr.min_len > 0 || nr.max_len >= 0)) {
        const std::string len = "[\\s\\S]{" + std::to_string(nr.min_len) + "," +
                                (nr.max_len >= 0 ? std::to_string(nr.max_len) : std::string()) + "}";
        if (const Dfa* d = regex_cache(len, true)) keys = dfa_intersect(keys, *d);
        else keys = Dfa{};
      }
      if (keys.next.empty() || keys.empty_language()) add_allowed = false;
      else add_key = dfa_raw_rules(keys);
      if (add_allowed) max_free = free_key_cap(keys);
    } else if (add_allowed) {
      add_val = compile_sub(add_sub);
      if (names.empty() && forbidden.empty() && f.property_names.empty()) {
        add_key = key_string_rule(rb_);
      } else {
        // Extra keys: raw (unescaped) strings that differ from every listed name, so a duplicate
        // of a listed key can never sneak in through an escape spelling; within propertyNames.
        const Dfa* any = regex_cache("[^\"\\\\\\x00-\\x1f]*", true);
        std::vector<std::string> lits(names.begin(), names.end());
        lits.insert(lits.end(), forbidden.begin(), forbidden.end());
        if (!charge_literals(lits)) return r;
        Dfa keys = lits.empty() ? *any : dfa_minus(*any, dfa_literals(lits));
        if (nr.dfa && !keys.next.empty()) keys = dfa_intersect(keys, *nr.dfa);
        add_key = rb_.new_rule();
        if (keys.next.empty() || keys.empty_language()) {
          add_allowed = false;
        } else {
          Dfa counted = keys;
          if (nr.min_len > 0 || nr.max_len >= 0) {
            const std::string len = "[\\s\\S]{" + std::to_string(nr.min_len) + "," +
                                    (nr.max_len >= 0 ? std::to_string(nr.max_len) : std::string()) + "}";
            if (const Dfa* d = regex_cache(len, true)) counted = dfa_intersect(counted, *d);
          }
          if (!counted.next.empty()) max_free = free_key_cap(counted);
          rb_.add_alt(add_key, {tagged(rb_.byte('"'), kTagKeyOpen | kTagKeyJson),
                                RuleBuilder::ref(dfa_string_rules(keys, nr.min_len, nr.max_len, f.ptr, kTagKeyClose))});
        }
      }
    }
    size_t n = props.size();
    // rest[i][c]: properties i.. remain, c written so far (c = 0: nothing yet, no comma). c counts
    // up to C and saturates there when there is no maxProperties.
    const int64_t maxp = f.max_props;
    const int64_t C = maxp >= 0 ? maxp : std::max<int64_t>(1, f.min_props);
    if (maxp >= 0 && maxp < f.min_props) return r;
    const int64_t F = std::max<int64_t>(max_free, 0);  // free-member counts tracked: 0..F
    if (double(n + 1) * double(C + 1) + double(C + 1) * double(F) > 400000) {
      error(f.ptr, f.max_props >= 0 ? "maxProperties" : "minProperties",
            "minProperties/maxProperties with this many properties is too large to compile");
      return r;
    }
    auto next_c = [&](int64_t c) { return std::min(c + 1, C); };
    // Listed JSON keys are tracked (tagged) only in any order, where nothing else keeps them unique.
    bool track_listed = false;
    // One member: separator (c > 0), name, value, in the syntax's spelling.
    auto member = [&](std::vector<Elem>& seq, int64_t c, const std::string* name, uint32_t key_rule, uint32_t value) {
      // Key tags (unique keys): a free JSON key is opened and closed by its quotes (key_rule); a
      // listed JSON key is not tracked, since it is unique by construction (each listed name is
      // written at most once, in schema order, and free keys exclude the listed names). An XML
      // name is opened by the '=' of "<parameter=" and closed by the '>' after it, a Python
      // keyword by the ',' before it (or the call's '(', tagged by the tool-list compiler) and the
      // '=' after it, listed or not, since those delimiters are shared; a Gemma 4 key likewise by
      // the '{' or ',' before it and the ':' after it.
      if (c > 0 && !xml) {
        seq.push_back(json ? rb_.byte(',') : tagged(rb_.byte(','), kTagKeyOpen | kTagKeySkipWs));
        sp_.after_comma(seq);
      }
      if (json) {
        if (name) {
          const size_t open_at = seq.size();
          rb_.lit(seq, json_quote(*name));
          if (track_listed) {
            seq[open_at] = tagged(seq[open_at], kTagKeyOpen | kTagKeyJson);
            seq.back() = tagged(seq.back(), kTagKeyClose);
          }
        } else {
          seq.push_back(RuleBuilder::ref(key_rule));
        }
        sp_.after_value(seq);
        seq.push_back(rb_.byte(':'));
        sp_.after_colon(seq);
        seq.push_back(RuleBuilder::ref(value));
        sp_.after_value(seq);
        return;
      }
      if (xml) {
        rb_.lit(seq, "<parameter=");
        seq.back() = tagged(seq.back(), kTagKeyOpen);
      }
      if (name) rb_.lit(seq, *name);
      else seq.push_back(RuleBuilder::ref(key_rule));
      const size_t close_at = seq.size();
      rb_.lit(seq, xml ? ">\n" : gemma ? ":" : "=");
      seq[close_at] = tagged(seq[close_at], kTagKeyClose);
      seq.push_back(RuleBuilder::ref(value));  // XML: the value rule ends with "\n</parameter>"
      if (xml) seq.push_back(rb_.byte('\n'));
    };
    if (opts_.property_order == PropertyOrder::Any && (n >= 2 || (n == 1 && add_allowed))) {
      // Any order (docs/GRAMMAR.md "Property order"). A state is (R: the required properties
      // written, o: optional ones written, c: members written (saturating at C), k: free ones).
      // Required keys leave the offer once written (so the object closes only with all of them);
      // an optional listed key or a free key that repeats one is refused by the matcher's key
      // sets. o is counted only when no unbounded free key can follow a ',', so that a ',' is
      // offered only while some key is left to write (a dead end otherwise).
      std::vector<size_t> req_idx, opt_idx;
      for (size_t i = 0; i < n; ++i) (props[i].required ? req_idx : opt_idx).push_back(i);
      const bool count_opt = !(add_allowed && max_free < 0);
      const size_t n_req = req_idx.size(), n_opt = opt_idx.size();
      const double states = std::ldexp(1.0, int(std::min<size_t>(n_req, 60))) *
                            double(count_opt ? n_opt + 1 : 1) * double(C + 1) * double(F + 1);
      if (n_req < 24 && states <= double(kMaxAnyOrderStates)) {
        track_listed = true;
        // Shared member rules, with (1) and without (0) the separator before them.
        auto member_rule = [&](int64_t c, const std::string* name, uint32_t key_rule, uint32_t value) {
          uint32_t m = rb_.new_rule();
          std::vector<Elem> seq;
          member(seq, c, name, key_rule, value);
          rb_.add_alt(m, std::move(seq));
          return m;
        };
        std::array<uint32_t, 2> m_opt{}, m_free{};
        std::vector<std::array<uint32_t, 2>> m_req(n_req);
        for (int64_t c = 0; c < 2; ++c) {
          if (n_opt > 0) {
            m_opt[size_t(c)] = rb_.new_rule();
            for (size_t i : opt_idx) {
              std::vector<Elem> seq;
              member(seq, c, &props[i].name, 0, props[i].rule);
              rb_.add_alt(m_opt[size_t(c)], std::move(seq));
            }
          }
          for (size_t j = 0; j < n_req; ++j)
            m_req[j][size_t(c)] = member_rule(c, &props[req_idx[j]].name, 0, props[req_idx[j]].rule);
          if (add_allowed) m_free[size_t(c)] = member_rule(c, nullptr, add_key, add_val);
        }
        struct State {
          uint64_t req;
          int64_t o, c, k;
          bool operator<(const State& b) const { return std::tie(req, o, c, k) < std::tie(b.req, b.o, b.c, b.k); }
        };
        std::map<State, uint32_t> rule_of;
        std::vector<State> todo;
        auto rule_for = [&](State st) {
          auto [it, fresh] = rule_of.emplace(st, 0);
          if (fresh) {
            it->second = rb_.new_rule();
            todo.push_back(st);
          }
          return it->second;
        };
        const uint64_t all_req = n_req == 0 ? 0 : (uint64_t(1) << n_req) - 1;
        std::vector<Elem> open;
        if (json) {
          open.push_back(tagged(rb_.byte('{'), kTagObjOpen));
          sp_.after_open(open);
        }
        open.push_back(RuleBuilder::ref(rule_for({0, 0, 0, 0})));
        rb_.add_alt(r, std::move(open));
        while (!todo.empty() && !rb_.over_budget) {
          const State st = todo.back();
          todo.pop_back();
          const uint32_t sr = rule_of[st];
          const size_t sep = st.c > 0 ? 1 : 0;
          if (st.req == all_req && st.c >= f.min_props) {
            std::vector<Elem> close;
            if (json) {
              if (st.c > 0) sp_.before_close(close);
              close.push_back(tagged(rb_.byte('}'), kTagObjClose));
            }
            rb_.add_alt(sr, std::move(close));
          }
          if (maxp >= 0 && st.c >= maxp) continue;
          const int64_t c2 = next_c(st.c);
          for (size_t j = 0; j < n_req; ++j) {
            if (st.req >> j & 1) continue;
            rb_.add_alt(sr, {RuleBuilder::ref(m_req[j][sep]), RuleBuilder::ref(rule_for({st.req | uint64_t(1) << j, st.o, c2, st.k}))});
          }
          if (n_opt > 0 && (!count_opt || st.o < int64_t(n_opt)))
            rb_.add_alt(sr, {RuleBuilder::ref(m_opt[sep]), RuleBuilder::ref(rule_for({st.req, count_opt ? st.o + 1 : 0, c2, st.k}))});
          if (add_allowed && (max_free < 0 || st.k < max_free))
            rb_.add_alt(sr, {RuleBuilder::ref(m_free[sep]), RuleBuilder::ref(rule_for({st.req, st.o, c2, max_free < 0 ? 0 : st.k + 1}))});
        }
        return r;
      }
    }
    std::vector<std::vector<uint32_t>> rest(n + 1, std::vector<uint32_t>(size_t(C + 1)));
    for (auto& row : rest)
      for (auto& x : row) x = rb_.new_rule();
    // The free members: tails[c][k] after c members, k of them free (k counted when max_free >= 0).
    std::vector<std::vector<uint32_t>> tails(size_t(C + 1));
    for (int64_t c = 0; c <= C; ++c) {
      tails[size_t(c)].push_back(rest[n][size_t(c)]);
      for (int64_t k = 1; k <= F; ++k) tails[size_t(c)].push_back(rb_.new_rule());
    }
    for (int64_t c = 0; c <= C; ++c) {
      for (int64_t k = 0; k <= F; ++k) {
        uint32_t tail = tails[size_t(c)][size_t(k)];
        if (c >= f.min_props) {
          std::vector<Elem> close;
          if (json) {
            if (c > 0) sp_.before_close(close);
            close.push_back(tagged(rb_.byte('}'), kTagObjClose));
          }
          if (gemma) close.push_back(tagged(rb_.byte('}'), kTagObjClose));
          rb_.add_alt(tail, std::move(close));
        }
        if (add_allowed && (maxp < 0 || c < maxp) && (max_free < 0 || k < max_free)) {
          std::vector<Elem> seq;
          member(seq, c, nullptr, add_key, add_val);
          seq.push_back(RuleBuilder::ref(tails[size_t(next_c(c))][size_t(max_free < 0 ? 0 : k + 1)]));
          rb_.add_alt(tail, std::move(seq));
        }
      }
    }
    for (size_t i = n; i-- > 0;) {
      for (int64_t c = 0; c <= C; ++c) {
        uint32_t ri = rest[i][size_t(c)];
        if (maxp < 0 || c < maxp) {
          std::vector<Elem> seq;
          member(seq, c, &props[i].name, 0, props[i].rule);
          seq.push_back(RuleBuilder::ref(rest[i + 1][size_t(next_c(c))]));
          rb_.add_alt(ri, std::move(seq));
        }
        if (!props[i].required) rb_.add_alt(ri, {RuleBuilder::ref(rest[i + 1][size_t(c)])});
      }
    }
    std::vector<Elem> open;
    if (json) {
      open.push_back(tagged(rb_.byte('{'), kTagObjOpen));
      sp_.after_open(open);
    }
    if (gemma) open.push_back(tagged(rb_.byte('{'), kTagObjOpen | kTagKeyOpen));
    open.push_back(RuleBuilder::ref(rest[0][0]));
    rb_.add_alt(r, std::move(open));
    return r;
  }

  // ---- Qwen3.5 XML parameter values ----
  // VALUE "\n</parameter>" for one parameter: strings as raw text, every other type as JSON; a
  // boolean or null may also be written as the template's str() writes it (True, False, None).
  uint32_t xml_value_rule(const Sub& sub) {
    std::vector<Flat> alts;
    if (sub.conj.empty()) {
      alts.push_back(Flat{});
    } else {
      alts = {Flat{}};
      alts[0].ptr = ptr_of(sub.conj[0]);
      for (const JValue* s : sub.conj) alts = cross(alts, flatten(s), ptr_of(s));
    }
    uint32_t r = rb_.new_rule();
    const uint32_t close = xml_close_rule();
    for (const Flat& f : alts) {
      auto excluded = [&](const JValue& v) { return excluded_by_not(f, v); };
      if (f.has_enum) {
        for (const JValue* v : f.enum_vals) {
          if (excluded(*v)) continue;
          const Tri t = value_ok(f, *v);
          if (t == Tri::Unknown) error(f.ptr, "enum", "enum/const combined with array/object keywords is not supported");
          if (t != Tri::Yes) continue;
          if (v->is_string()) {
            if (v->str.find(kXmlClose) != std::string::npos) continue;  // cannot be written
            std::vector<Elem> seq;
            rb_.lit(seq, v->str);
            seq.push_back(RuleBuilder::ref(close));
            rb_.add_alt(r, std::move(seq));
            continue;
          }
          rb_.add_alt(r, {RuleBuilder::ref(literal(*v)), RuleBuilder::ref(close)});
          if (v->kind == JValue::Kind::Null || v->kind == JValue::Kind::Bool)
            rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule(v->kind == JValue::Kind::Null ? "None" : v->boolean ? "True" : "False")),
                            RuleBuilder::ref(close)});
        }
        continue;
      }
      Flat other = f;
      other.types &= uint8_t(~kStr);
      if (other.types) rb_.add_alt(r, {RuleBuilder::ref(compile_flat(other)), RuleBuilder::ref(close)});
      auto not_value = [&](JValue::Kind k, bool b) {
        for (const JValue* x : f.not_values)
          if (x->kind == k && (k != JValue::Kind::Bool || x->boolean == b)) return true;
        return false;
      };
      if ((f.types & kBool) && !not_value(JValue::Kind::Bool, true))
        rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule("True")), RuleBuilder::ref(close)});
      if ((f.types & kBool) && !not_value(JValue::Kind::Bool, false))
        rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule("False")), RuleBuilder::ref(close)});
      if ((f.types & kNull) && !not_value(JValue::Kind::Null, false))
        rb_.add_alt(r, {RuleBuilder::ref(rb_.literal_rule("None")), RuleBuilder::ref(close)});
      if (f.types & kStr) rb_.add_alt(r, {RuleBuilder::ref(raw_string_rule(f, RawSyntax::Xml))});
    }
    return r;
  }

  static constexpr std::string_view kXmlClose = "</parameter>";

  uint32_t xml_close_rule() {
    if (!xml_close_) xml_close_ = rb_.literal_rule("\n" + std::string(kXmlClose));
    return *xml_close_;
  }

  // Raw text: a string's decoded value itself, no escapes, then its close: a Qwen3.5 XML parameter
  // (close "\n</parameter>") or a Gemma 4 string (after the caller's opening <|"|>, close <|"|>).
  // The value never contains the close's tag, so the first one a reader finds closes it. (<|"|>
  // has no proper prefix that is also its suffix, so raw text followed by it cannot hold it
  // earlier either.)
  enum class RawSyntax { Xml, Gemma4 };

  uint32_t raw_close_rule(RawSyntax syn) {
    if (syn == RawSyntax::Xml) return xml_close_rule();
    if (!gemma_close_) gemma_close_ = rb_.literal_rule(std::string(kGemma4Quote));
    return *gemma_close_;
  }

  uint32_t raw_string_rule(const Flat& f, RawSyntax syn) {
    const bool xml = syn == RawSyntax::Xml;
    std::vector<std::string> excluded;
    for (const JValue* x : f.not_values)
      if (x->is_string()) excluded.push_back(x->str);
    const bool free = f.patterns.empty() && f.formats.empty() && excluded.empty() && f.min_len == 0 && f.max_len < 0;
    if (free) return xml ? xml_free_text_rule() : gemma_free_text_rule();
    uint32_t r = rb_.new_rule();
    Dfa acc;
    bool have = false;
    auto narrow = [&](const Dfa* d, const char* kw) {
      if (!d) return false;
      if (!have) {
        acc = *d;
        have = true;
        return true;
      }
      Dfa both = dfa_intersect(acc, *d);
      if (both.next.empty()) {
        error(f.ptr, kw, "string constraints too complex to intersect");
        return false;
      }
      acc = std::move(both);
      return true;
    };
    for (const auto& p : f.patterns)
      if (!narrow(regex_cache(p, false), "pattern")) return r;
    for (const auto& fm : f.formats)
      if (!narrow(format_dfa(fm), "format")) return r;
    // Valid UTF-8 only. Not [\s\S]: the regex compiler keeps \S to ASCII (where Python and ECMA
    // agree), which would leave out every other character.
    if (!narrow(regex_cache("[^\\x00]*", true), "pattern")) return r;
    if (!excluded.empty() && !charge_literals(excluded)) return r;
    Dfa without = excluded.empty() ? acc : dfa_minus(acc, dfa_literals(excluded));
    // The close's tag as a regex ("<|\"|>" needs its '|' escaped).
    const std::string tag = xml ? std::string(kXmlClose) : "<\\|\"\\|>";
    const Dfa* contains = regex_cache("[^\\x00]*" + tag + "[^\\x00]*", true);
    const char* what = xml ? "string constraints too complex for an XML parameter"
                           : "string constraints too complex for a Gemma 4 string";
    if (without.next.empty() || !contains) {
      error(f.ptr, "pattern", what);
      return r;
    }
    Dfa d = dfa_minus(without, *contains);
    if (d.next.empty()) {
      error(f.ptr, "pattern", what);
      return r;
    }
    if (d.empty_language()) return r;
    return dfa_raw_text_rules(d, f.min_len, f.max_len, f.ptr, raw_close_rule(syn));
  }

  // dfa_string_rules for raw text: the decoded bytes themselves (any byte but NUL), multi-byte
  // characters through StrCharRaw where they all lead to one state; the close after acceptance.
  uint32_t dfa_raw_text_rules(const Dfa& d, int64_t min_len, int64_t max_len, const std::string& ptr, uint32_t close) {
    std::map<std::pair<int32_t, int64_t>, uint32_t> ids;
    std::vector<std::pair<int32_t, int64_t>> work;
    const int64_t cap = max_len >= 0 ? max_len : min_len;
    auto get = [&](int32_t q, int64_t c) {
      auto key = std::make_pair(q, c);
      auto it = ids.find(key);
      if (it != ids.end()) return it->second;
      uint32_t r = rb_.new_rule();
      ids.emplace(key, r);
      work.push_back(key);
      return r;
    };
    auto next_count = [&](int64_t c) -> int64_t {
      int64_t c2 = c + 1;
      if (max_len >= 0 && c2 > max_len) return -1;
      return max_len < 0 ? std::min(c2, cap) : c2;
    };
    const uint32_t start = get(d.start, 0);
    for (size_t k = 0; k < work.size(); ++k) {
      if (work.size() > 200000) {
        error(ptr, "maxLength", "string constraints too large to compile");
        break;
      }
      auto [q, c] = work[k];
      const uint32_t r = ids[{q, c}];
      if (d.accept[size_t(q)] && c >= min_len) rb_.add_alt(r, {RuleBuilder::ref(close)});
      const int32_t raw_t = nonascii_target(d, q);
      const int64_t c_char = next_count(c);
      ByteSet raw_class{};
      if (raw_t >= 0 && c_char >= 0) {
        for (int b = 1; b < 0x80; ++b)
          if (d.next[size_t(q)][size_t(b)] == raw_t) byteset_add(raw_class, uint8_t(b));
        for (int b = 0x80; b < 0x100; ++b) byteset_add(raw_class, uint8_t(b));
        rb_.add_alt(r, {{ElemKind::StrCharRaw, rb_.cls(raw_class).arg}, RuleBuilder::ref(get(raw_t, c_char))});
      }
      std::map<std::pair<int32_t, int64_t>, ByteSet> by_target;
      for (int b = 1; b < 256; ++b) {
        if (byteset_has(raw_class, uint8_t(b))) continue;
        const int32_t t = d.next[size_t(q)][size_t(b)];
        if (t < 0) continue;
        int64_t c2 = c;
        if ((b & 0xC0) != 0x80) {
          c2 = next_count(c);
          if (c2 < 0) continue;
        }
        byteset_add(by_target[{t, c2}], uint8_t(b));
      }
      for (auto& [key, set] : by_target) rb_.add_alt(r, {rb_.cls(set), RuleBuilder::ref(get(key.first, key.second))});
    }
    return start;
  }

  // Unconstrained raw text: any characters (no NUL) up to the first "</parameter>", which must
  // follow a newline (that newline is the close's, not the value's). States: A0 / A1 = no partial
  // match, last byte not / a newline; P[j][nl] = the first j bytes of the close matched, with nl =
  // a newline before them. The close's first byte '<' does not recur in it, so a mismatch inside a
  // partial match restarts from the byte itself.
  uint32_t xml_free_text_rule() {
    if (xml_free_text_) return *xml_free_text_;
    const std::string_view close = kXmlClose;
    const size_t m = close.size();
    const uint32_t a0 = rb_.new_rule(), a1 = rb_.new_rule();
    std::vector<std::array<uint32_t, 2>> p(m);
    for (size_t j = 1; j < m; ++j) p[j] = {rb_.new_rule(), rb_.new_rule()};
    auto other_class = [&](int except) {
      ByteSet s{};
      for (int b = 1; b < 256; ++b)
        if (b != '\n' && b != '<' && b != except) byteset_add(s, uint8_t(b));
      return s;
    };
    // Every byte that does not continue a match: back to A0, A1 or P[1].
    auto restart = [&](uint32_t from, int except) {
      rb_.add_alt(from, {{ElemKind::StrCharRaw, rb_.cls(other_class(except)).arg}, RuleBuilder::ref(a0)});
      if (except != '\n') rb_.add_alt(from, {rb_.byte('\n'), RuleBuilder::ref(a1)});
    };
    restart(a0, -1);
    rb_.add_alt(a0, {rb_.byte('<'), RuleBuilder::ref(p[1][0])});
    restart(a1, -1);
    rb_.add_alt(a1, {rb_.byte('<'), RuleBuilder::ref(p[1][1])});
    for (size_t j = 1; j < m; ++j) {
      const auto want = static_cast<unsigned char>(close[j]);
      for (int nl = 0; nl < 2; ++nl) {
        const uint32_t pj = p[j][size_t(nl)];
        restart(pj, want);
        if (want != '<') rb_.add_alt(pj, {rb_.byte('<'), RuleBuilder::ref(p[1][0])});
        if (j + 1 < m) rb_.add_alt(pj, {rb_.byte(want), RuleBuilder::ref(p[j + 1][size_t(nl)])});
        else if (nl) rb_.add_alt(pj, {rb_.byte(want)});  // the close, after a newline: done
      }
    }
    xml_free_text_ = a0;
    return a0;
  }

  // Unconstrained Gemma 4 string text: any characters (no NUL) up to the first <|"|>, which
  // closes it. States: A = no partial match, P[j] = the first j bytes of the quote matched. The
  // quote's first byte '<' does not recur in it, so a mismatch restarts from the byte itself.
  uint32_t gemma_free_text_rule() {
    if (gemma_free_text_) return *gemma_free_text_;
    const std::string_view quote = kGemma4Quote;
    const size_t m = quote.size();
    std::vector<uint32_t> p(m);
    for (auto& r : p) r = rb_.new_rule();  // p[0] = A
    for (size_t j = 0; j < m; ++j) {
      const int want = j == 0 ? '<' : static_cast<unsigned char>(quote[j]);
      ByteSet other{};
      for (int b = 1; b < 256; ++b)
        if (b != '<' && b != want) byteset_add(other, uint8_t(b));
      rb_.add_alt(p[j], {{ElemKind::StrCharRaw, rb_.cls(other).arg}, RuleBuilder::ref(p[0])});
      if (j > 0) rb_.add_alt(p[j], {rb_.byte('<'), RuleBuilder::ref(p[1])});
      if (j + 1 < m) rb_.add_alt(p[j], {rb_.byte(uint8_t(want)), RuleBuilder::ref(p[j + 1])});
      else rb_.add_alt(p[j], {rb_.byte(uint8_t(want))});  // the closing quote: done
    }
    gemma_free_text_ = p[0];
    return p[0];
  }

  // Any JSON value (the `true` schema).
  uint32_t any_rule() {
    if (any_rule_) return *any_rule_;
    uint32_t v = rb_.new_rule();
    any_rule_ = v;
    if (opts_.gemma4_values) return gemma4_any_rule(v);
    uint32_t str = plain_string_rule(rb_);
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule(null_text()))});
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule(bool_text(true)))});
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule(bool_text(false)))});
    rb_.add_alt(v, {RuleBuilder::ref(num_regex_rule("-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,15})?([eE]-[0-9]{1,2})?"))});
    rb_.add_alt(v, {RuleBuilder::ref(str)});
    // array
    uint32_t arr = rb_.new_rule(), arr_rest = rb_.new_rule();
    {
      std::vector<Elem> a{rb_.byte('[')};
      sp_.after_open(a);
      a.push_back(rb_.byte(']'));
      rb_.add_alt(arr, std::move(a));
      std::vector<Elem> b{rb_.byte('[')};
      sp_.after_open(b);
      b.push_back(RuleBuilder::ref(v));
      sp_.after_value(b);
      b.push_back(RuleBuilder::ref(arr_rest));
      rb_.add_alt(arr, std::move(b));
      std::vector<Elem> close;
      sp_.before_close(close);
      close.push_back(rb_.byte(']'));
      rb_.add_alt(arr_rest, std::move(close));
      std::vector<Elem> c{rb_.byte(',')};
      sp_.after_comma(c);
      c.push_back(RuleBuilder::ref(v));
      sp_.after_value(c);
      c.push_back(RuleBuilder::ref(arr_rest));
      rb_.add_alt(arr_rest, std::move(c));
    }
    uint32_t obj = rb_.new_rule(), obj_rest = rb_.new_rule();
    {
      const uint32_t key = key_string_rule(rb_);
      auto member = [&](std::vector<Elem>& s) {
        s.push_back(RuleBuilder::ref(key));
        sp_.after_value(s);
        s.push_back(rb_.byte(':'));
        sp_.after_colon(s);
        s.push_back(RuleBuilder::ref(v));
        sp_.after_value(s);
      };
      std::vector<Elem> a{tagged(rb_.byte('{'), kTagObjOpen)};
      sp_.after_open(a);
      a.push_back(tagged(rb_.byte('}'), kTagObjClose));
      rb_.add_alt(obj, std::move(a));
      std::vector<Elem> b{tagged(rb_.byte('{'), kTagObjOpen)};
      sp_.after_open(b);
      member(b);
      b.push_back(RuleBuilder::ref(obj_rest));
      rb_.add_alt(obj, std::move(b));
      std::vector<Elem> close;
      sp_.before_close(close);
      close.push_back(tagged(rb_.byte('}'), kTagObjClose));
      rb_.add_alt(obj_rest, std::move(close));
      std::vector<Elem> c{rb_.byte(',')};
      sp_.after_comma(c);
      member(c);
      c.push_back(RuleBuilder::ref(obj_rest));
      rb_.add_alt(obj_rest, std::move(c));
    }
    rb_.add_alt(v, {RuleBuilder::ref(arr)});
    rb_.add_alt(v, {RuleBuilder::ref(obj)});
    return v;
  }

  // Any value in Gemma 4's spelling, into rule v: free keys are identifiers (as a free member of a
  // schema object is).
  uint32_t gemma4_any_rule(uint32_t v) {
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule(null_text()))});
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule("None"))});
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule(bool_text(true)))});
    rb_.add_alt(v, {RuleBuilder::ref(rb_.literal_rule(bool_text(false)))});
    rb_.add_alt(v, {RuleBuilder::ref(num_regex_rule("-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,15})?([eE]-[0-9]{1,2})?"))});
    rb_.add_alt(v, {RuleBuilder::ref(string_rule(Flat{}))});
    uint32_t arr = rb_.new_rule(), arr_rest = rb_.new_rule();
    rb_.add_alt(arr, {rb_.byte('['), rb_.byte(']')});
    rb_.add_alt(arr, {rb_.byte('['), RuleBuilder::ref(v), RuleBuilder::ref(arr_rest)});
    rb_.add_alt(arr_rest, {rb_.byte(']')});
    rb_.add_alt(arr_rest, {rb_.byte(','), RuleBuilder::ref(v), RuleBuilder::ref(arr_rest)});
    const Dfa* ident = regex_cache("[A-Za-z_][A-Za-z0-9_]*", true);
    if (ident) {
      // '{' and ',' open a key, ':' closes it (unique keys), '}' closes the object.
      const uint32_t key = dfa_raw_rules(*ident);
      uint32_t obj = rb_.new_rule(), obj_rest = rb_.new_rule();
      const Elem open = tagged(rb_.byte('{'), kTagObjOpen | kTagKeyOpen);
      const Elem close = tagged(rb_.byte('}'), kTagObjClose);
      const Elem colon = tagged(rb_.byte(':'), kTagKeyClose);
      rb_.add_alt(obj, {open, close});
      rb_.add_alt(obj, {open, RuleBuilder::ref(key), colon, RuleBuilder::ref(v), RuleBuilder::ref(obj_rest)});
      rb_.add_alt(obj_rest, {close});
      rb_.add_alt(obj_rest, {tagged(rb_.byte(','), kTagKeyOpen), RuleBuilder::ref(key), colon, RuleBuilder::ref(v),
                             RuleBuilder::ref(obj_rest)});
      rb_.add_alt(v, {RuleBuilder::ref(obj)});
    }
    rb_.add_alt(v, {RuleBuilder::ref(arr)});
    return v;
  }

  RuleBuilder& rb_;
  const JValue& root_;
  CompileOptions opts_;
  std::string prefix_;
  std::vector<CompileError>& errors_;
  size_t errors_at_start_ = errors_.size();
  std::unordered_map<const JValue*, std::string> ptrs_;
  std::unordered_set<const JValue*> scanned_;  // schema locations already scanned (see scan)
  bool zero_tail_ = false;  // number rules being built admit trailing fraction zeros (number_rule)
  std::unordered_map<const JValue*, uint32_t> memo_;
  std::vector<const JValue*> flatten_stack_;
  std::map<std::string, std::shared_ptr<Dfa>> dfas_;
  std::map<std::string, std::string> regex_errors_;
  std::map<std::string, uint32_t> regex_rules_;
  std::map<std::string, uint32_t> num_rules_;
  std::map<ByteSet, uint32_t> escape_rules_;
  std::optional<uint32_t> any_rule_;
  std::optional<uint32_t> xml_close_, xml_free_text_, gemma_close_, gemma_free_text_;
  JsonSpacing sp_{rb_, opts_};
  bool has_ref_ = false;
  std::vector<std::string> nested_ids_;
};

}  // namespace

uint32_t whitespace_rule(RuleBuilder& rb, const CompileOptions& opts) {
  // ws_i: up to i more whitespace bytes. Bounded so a model cannot loop on whitespace forever.
  int n = std::max(0, opts.max_whitespace_run);
  ByteSet s{};
  for (uint8_t b : {' ', '\t', '\n', '\r'}) byteset_add(s, b);
  uint32_t prev = rb.new_rule();
  rb.add_alt(prev, {});
  for (int i = 0; i < n; ++i) {
    uint32_t r = rb.new_rule();
    rb.add_alt(r, {});
    rb.add_alt(r, {rb.cls(s), RuleBuilder::ref(prev)});
    prev = r;
  }
  return prev;
}

namespace {
// "" | " " S_k... : S_k ::= "" | " " S_{k-1}: at most k more spaces.
uint32_t spaces_rule(RuleBuilder& rb, int k) {
  uint32_t prev = rb.new_rule();
  rb.add_alt(prev, {});
  for (int i = 0; i < k; ++i) {
    uint32_t r = rb.new_rule();
    rb.add_alt(r, {});
    rb.add_alt(r, {rb.byte(' '), RuleBuilder::ref(prev)});
    prev = r;
  }
  return prev;
}
}  // namespace

void JsonSpacing::add(std::vector<Elem>& seq, Slot slot) {
  switch (opts_.whitespace) {
    case Whitespace::Compact:
      return;
    case Whitespace::Flexible:
      // Anywhere JSON allows it, except before a closing bracket, which always follows a value
      // and its whitespace (two runs in a row would double the bound).
      if (slot == Slot::BeforeClose) return;
      if (!any_) any_ = whitespace_rule(rb_, opts_);
      seq.push_back(RuleBuilder::ref(*any_));
      return;
    case Whitespace::Natural:
      if (slot == Slot::AfterValue) return;  // json.dumps and pretty printers write none before ':' ','
      if (slot == Slot::AfterColon) {
        if (!space_) space_ = spaces_rule(rb_, 1);
        seq.push_back(RuleBuilder::ref(*space_));
        return;
      }
      if (!line_) {
        // "" | " " | "\n" followed by at most max_indent spaces.
        line_ = rb_.new_rule();
        rb_.add_alt(*line_, {});
        rb_.add_alt(*line_, {rb_.byte(' ')});
        if (opts_.max_indent >= 0)
          rb_.add_alt(*line_, {rb_.byte('\n'), RuleBuilder::ref(spaces_rule(rb_, opts_.max_indent))});
      }
      seq.push_back(RuleBuilder::ref(*line_));
      return;
  }
}

uint32_t plain_string_rule(RuleBuilder& rb) {
  uint32_t body = rb.new_rule();
  rb.add_alt(body, {{ElemKind::StrCharLoop, 0}, RuleBuilder::ref(body)});
  rb.add_alt(body, {rb.byte('"')});
  uint32_t r = rb.new_rule();
  rb.add_alt(r, {rb.byte('"'), RuleBuilder::ref(body)});
  return r;
}

uint32_t key_string_rule(RuleBuilder& rb) {
  uint32_t body = rb.new_rule();
  rb.add_alt(body, {{ElemKind::StrCharLoop, 0}, RuleBuilder::ref(body)});
  rb.add_alt(body, {tagged(rb.byte('"'), kTagKeyClose)});
  uint32_t r = rb.new_rule();
  rb.add_alt(r, {tagged(rb.byte('"'), kTagKeyOpen | kTagKeyJson), RuleBuilder::ref(body)});
  return r;
}

bool gemma4_name(std::string_view s) {
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || std::strchr("{}:<>", c)) return false;
  }
  return true;
}

bool gemma4_key(std::string_view s) {
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7F || std::strchr(":,{}[]\"<>", c)) return false;
  }
  return true;
}

// An ASCII Python identifier: what a keyword argument (LFM2's calls) can be named.
bool python_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

uint32_t compile_schema_into(RuleBuilder& rb, const JValue& root, const CompileOptions& opts,
                             const std::string& pointer_prefix, std::vector<CompileError>& errors,
                             bool object_only, ArgumentSyntax syntax) {
  SchemaCompiler c(rb, root, opts, pointer_prefix, errors);
  c.object_only_ = object_only;
  c.args_syntax_ = object_only ? syntax : ArgumentSyntax::JsonObject;
  return c.run();
}

}  // namespace picolm::grammar::detail
