// check_instance: is a client's JSON text valid under a compiled grammar *by value*?
//
// The grammar (and so generation) admits one spelling of a value: numbers in canonical form,
// properties in schema order, strings escaped the way the grammar writes them. A client's
// instance may spell the same value otherwise (`60.0`, `1e2`, `{"b":1,"a":2}`, `"\u0061"`), and
// JSON Schema judges values, not spellings. So, when the bytes as written are rejected, the
// instance is parsed and we search for a spelling of the same value that the recognizer accepts:
// members in any order, each number in its source, canonical, `.0` and exponent spellings, each
// string and key as the grammar writes it. The recognizer stays the only judge of the schema
// (no second validator to keep in step with the compiler); since it is sound, any spelling it
// accepts proves the value valid. It generates a subset of the valid values, so a value outside
// that subset is still rejected (docs/GRAMMAR.md, "Checking client instances").
//
// The search backtracks through Matcher::rollback: choices are the member order of each object
// and the spelling of each number and string. The instance's own order and spellings are tried
// first, so an instance that needs no reordering costs one pass; the search is bounded by
// kMaxAdvances recognizer calls and by kMaxValues values (the continuation recursion is as deep
// as the instance has values), beyond which the instance is rejected with that reason.
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_value.h"

namespace picolm::grammar {

namespace {

using detail::JValue;

constexpr size_t kMaxAdvances = 200000;
constexpr size_t kMaxValues = 1024;  // the continuations recurse once per value: bounded stack
constexpr int kMaxPlainDigits = 64;  // longest plain spelling written for an exponent form

// Spellings of one JSON number with the same value, its source spelling first.
std::vector<std::string> number_spellings(const std::string& src) {
  std::vector<std::string> out = {src};
  auto add = [&](std::string s) {
    for (const auto& o : out)
      if (o == s) return;
    out.push_back(std::move(s));
  };
  size_t i = 0;
  bool neg = false;
  if (i < src.size() && src[i] == '-') { neg = true; ++i; }
  std::string digits;
  long point = 0;  // the value is 0.digits * 10^point
  bool seen_point = false;
  for (; i < src.size() && src[i] != 'e' && src[i] != 'E'; ++i) {
    if (src[i] == '.') { seen_point = true; continue; }
    digits += src[i];
    if (!seen_point) ++point;
  }
  if (i < src.size()) {
    char* end = nullptr;
    const long e = std::strtol(src.c_str() + i + 1, &end, 10);
    if (e > 100000 || e < -100000) return out;
    point += e;
  }
  size_t lead = 0;
  while (lead < digits.size() && digits[lead] == '0') ++lead;
  digits.erase(0, lead);
  point -= long(lead);
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  if (digits.empty()) {  // zero, whatever its sign
    add("0");
    add("0.0");
    return out;
  }
  const std::string sign = neg ? "-" : "";
  const long n = long(digits.size());
  if (point > kMaxPlainDigits || point < -kMaxPlainDigits) return out;
  if (point >= n) {
    const std::string integer = digits + std::string(size_t(point - n), '0');
    add(sign + integer);
    add(sign + integer + ".0");
  } else if (point > 0) {
    add(sign + digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point)));
  } else {
    add(sign + "0." + std::string(size_t(-point), '0') + digits);
    // 1.5e-7: the exponent form the grammar writes for small unbounded numbers.
    add(sign + digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "") + "e-" + std::to_string(1 - point));
  }
  return out;
}

// A string as the grammar writes it (short escapes, \u00XX for other control characters), then
// with every control character as \u00XX.
std::vector<std::string> string_spellings(const std::string& value) {
  std::vector<std::string> out = {detail::json_quote(value)};
  std::string alt = "\"";
  static const char* hex = "0123456789abcdef";
  for (unsigned char c : value) {
    if (c == '"') alt += "\\\"";
    else if (c == '\\') alt += "\\\\";
    else if (c < 0x20) { alt += "\\u00"; alt += hex[c >> 4]; alt += hex[c & 15]; }
    else alt += char(c);
  }
  alt += '"';
  if (alt != out[0]) out.push_back(alt);
  return out;
}

size_t count_values(const JValue& v) {
  size_t n = 1;
  for (const auto& x : v.arr) n += count_values(x);
  for (const auto& kv : v.obj) n += count_values(kv.second);
  return n;
}

class ValueSearch {
 public:
  explicit ValueSearch(Matcher& m) : m_(m) {}
  bool exhausted() const { return exhausted_; }

  using Next = std::function<bool()>;

  // Writes v in some spelling, then asks next(); true when next() succeeded (the matcher keeps
  // everything accepted), false with the matcher as before.
  bool value(const JValue& v, const Next& next) {
    switch (v.kind) {
      case JValue::Kind::Null: return one_of({"null"}, next);
      case JValue::Kind::Bool: return one_of({v.boolean ? "true" : "false"}, next);
      case JValue::Kind::Number: return one_of(number_spellings(v.str), next);
      case JValue::Kind::String: return one_of(string_spellings(v.str), next);
      case JValue::Kind::Array:
        if (!put("[")) return false;
        if (elements(v, 0, next)) return true;
        undo();
        return false;
      case JValue::Kind::Object: {
        if (!put("{")) return false;
        std::vector<bool> used(v.obj.size(), false);
        if (members(v, used, 0, next)) return true;
        undo();
        return false;
      }
    }
    return false;
  }

 private:
  bool put(std::string_view bytes) {
    if (advances_ >= kMaxAdvances) {
      exhausted_ = true;
      return false;
    }
    ++advances_;
    return m_.accept_bytes(bytes);
  }
  void undo() { m_.rollback(1); }

  bool one_of(const std::vector<std::string>& spellings, const Next& next) {
    for (const auto& s : spellings) {
      if (!put(s)) continue;
      if (next()) return true;
      undo();
    }
    return false;
  }

  bool elements(const JValue& arr, size_t i, const Next& next) {
    if (i == arr.arr.size()) {
      if (!put("]")) return false;
      if (next()) return true;
      undo();
      return false;
    }
    if (i > 0 && !put(",")) return false;
    if (value(arr.arr[i], [&] { return elements(arr, i + 1, next); })) return true;
    if (i > 0) undo();
    return false;
  }

  // The members not yet written, in any order (the instance's own order tried first).
  bool members(const JValue& obj, std::vector<bool>& used, size_t n_used, const Next& next) {
    if (n_used == obj.obj.size()) {
      if (!put("}")) return false;
      if (next()) return true;
      undo();
      return false;
    }
    if (n_used > 0 && !put(",")) return false;
    for (size_t k = 0; k < obj.obj.size() && !exhausted_; ++k) {
      if (used[k]) continue;
      for (const auto& key : string_spellings(obj.obj[k].first)) {
        if (!put(key + ":")) continue;
        used[k] = true;
        if (value(obj.obj[k].second, [&] { return members(obj, used, n_used + 1, next); })) return true;
        used[k] = false;
        undo();
      }
    }
    if (n_used > 0) undo();
    return false;
  }

  Matcher& m_;
  size_t advances_ = 0;
  bool exhausted_ = false;
};

}  // namespace

InstanceCheck check_instance(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
                             std::string_view instance) {
  InstanceCheck r;
  {
    Matcher m(grammar, vocab);
    size_t pos = 0;
    while (pos < instance.size() && m.accept_bytes(instance.substr(pos, 1))) ++pos;
    r.rejected_at = pos;
    if (pos == instance.size() && m.is_complete()) {
      r.accepted = r.as_written = true;
      return r;
    }
  }
  JValue value;
  std::string err, repeated;
  if (!detail::parse_json(instance, value, err, &repeated)) {
    r.detail = "not one JSON value, so no other spelling was tried (" + err + ")";
    return r;
  }
  if (!repeated.empty()) {
    // Parsers keep one of the values (most the last): the object a client reads is not the one
    // written, so a repeated key is refused, as generation never writes one (issue 29).
    r.detail = "an object repeats the key '" + repeated + "'";
    return r;
  }
  if (count_values(value) > kMaxValues) {
    r.detail = "more than " + std::to_string(kMaxValues) + " values, other spellings not tried";
    return r;
  }
  Matcher m(std::move(grammar), std::move(vocab));
  ValueSearch search(m);
  if (search.value(value, [&] { return m.is_complete(); })) {
    r.accepted = true;
    r.canonical = m.text();
    return r;
  }
  r.detail = search.exhausted() ? "the search for another spelling of the same value hit its limit (" +
                                       std::to_string(kMaxAdvances) + " recognizer calls)"
                                 : "no other spelling of the same value (member order, number and string "
                                   "spelling) is accepted either";
  return r;
}

}  // namespace picolm::grammar
