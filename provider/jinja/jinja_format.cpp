// Python's string formatting as templates call it: format(value, spec) (the mini-language of
// str.format fields) and printf-style `fmt % args` (the `%` operator on a string, the `format`
// filter). Floats go through C's snprintf, which spells f, e and g as Python does.
#include <cmath>
#include <cstdio>

#include "jinja.h"
#include "jinja_internal.h"

namespace picolm::jinja::detail {

namespace {

struct Spec {
  std::string fill = " ";  // one code point
  char align = 0;          // '<', '>', '^', '=' or 0 = the type's default
  char sign = '-';         // '-', '+' or ' '
  bool alternate = false;  // '#'
  bool zero = false;       // '0' before the width
  size_t width = 0;
  char grouping = 0;  // ',' or '_'
  int precision = -1;
  char type = 0;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

size_t read_number(std::string_view s, size_t& i) {
  size_t n = 0;
  while (i < s.size() && is_digit(s[i])) {
    if (n > 100000) throw Error("format width or precision too big");
    n = n * 10 + static_cast<size_t>(s[i++] - '0');
  }
  return n;
}

Spec parse_spec(std::string_view s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  // [[fill]align]: the fill is one code point.
  size_t after_first = 0;
  if (!s.empty()) {
    next_cp(s, after_first);
    if (after_first < s.size() && is_align(s[after_first])) {
      spec.fill = std::string(s.substr(0, after_first));
      spec.align = s[after_first];
      i = after_first + 1;
    } else if (is_align(s[0])) {
      spec.align = s[0];
      i = 1;
    }
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    spec.zero = true;
    ++i;
  }
  spec.width = read_number(s, i);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i >= s.size() || !is_digit(s[i])) throw Error("Format specifier missing precision");
    spec.precision = static_cast<int>(read_number(s, i));
  }
  if (i < s.size()) spec.type = s[i++];
  if (i != s.size()) throw Error("Invalid format specifier '" + std::string(s) + "'");
  return spec;
}

std::string group_digits(const std::string& digits, char sep, int every) {
  std::string out;
  const size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    if (k > 0 && (n - k) % static_cast<size_t>(every) == 0) out += sep;
    out += digits[k];
  }
  return out;
}

// Pads body (sign and prefix apart for '=' alignment) to the width.
std::string pad(const std::string& prefix, const std::string& body, const Spec& spec, char default_align) {
  char align = spec.align ? spec.align : default_align;
  std::string fill = spec.fill;
  if (!spec.align && spec.zero && default_align == '>') {
    align = '=';
    fill = "0";
  }
  const size_t len = cp_count(prefix) + cp_count(body);
  if (len >= spec.width) return prefix + body;
  const size_t n = spec.width - len;
  std::string padding;
  auto fills = [&](size_t k) {
    std::string out;
    for (size_t j = 0; j < k; ++j) out += fill;
    return out;
  };
  switch (align) {
    case '<': return prefix + body + fills(n);
    case '^': return fills(n / 2) + prefix + body + fills(n - n / 2);
    case '=': return prefix + fills(n) + body;
    default: return fills(n) + prefix + body;
  }
}

std::string c_float(double x, int precision, char type, bool alternate) {
  char fmt[16];
  std::snprintf(fmt, sizeof(fmt), "%%%s.*%c", alternate ? "#" : "", type);
  const int n = std::snprintf(nullptr, 0, fmt, precision, x);
  std::string out(static_cast<size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, fmt, precision, x);
  return out;
}

std::string format_int(const Value& v, const Spec& spec, char type) {
  if (v.is_big_integer()) {
    if (type != 'd') throw Error("format of a big integer with type '" + std::string(1, type) + "' is not supported");
    const std::string& d = v.as_string();
    const bool neg = d.starts_with('-');
    std::string digits = neg ? d.substr(1) : d;
    if (spec.grouping) digits = group_digits(digits, spec.grouping, 3);
    return pad(neg ? "-" : spec.sign == '-' ? "" : std::string(1, spec.sign), digits, spec, '>');
  }
  const int64_t i = v.kind() == Value::Kind::Bool ? (v.as_bool() ? 1 : 0) : v.as_int();
  if (type == 'c') {
    if (i < 0 || i > 0x10FFFF) throw Error("%c arg not in range(0x110000)");
    std::string s;
    append_utf8(s, static_cast<uint32_t>(i));
    return pad("", s, spec, '<');
  }
  const bool neg = i < 0;
  uint64_t u = neg ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
  std::string digits;
  int base = 10;
  const char* prefix = "";
  switch (type) {
    case 'x': base = 16; prefix = "0x"; break;
    case 'X': base = 16; prefix = "0X"; break;
    case 'o': base = 8; prefix = "0o"; break;
    case 'b': base = 2; prefix = "0b"; break;
    default: break;
  }
  do {
    const int dgt = static_cast<int>(u % static_cast<uint64_t>(base));
    digits.insert(digits.begin(), static_cast<char>(dgt < 10 ? '0' + dgt : (type == 'X' ? 'A' : 'a') + dgt - 10));
    u /= static_cast<uint64_t>(base);
  } while (u);
  if (spec.grouping) digits = group_digits(digits, spec.grouping, base == 10 ? 3 : 4);
  std::string head = neg ? "-" : spec.sign == '-' ? "" : std::string(1, spec.sign);
  if (spec.alternate) head += prefix;
  return pad(head, digits, spec, '>');
}

std::string format_float(double x, const Spec& spec, char type) {
  const bool neg = std::signbit(x) && !std::isnan(x);
  const double a = std::fabs(x);
  std::string body;
  const int p = spec.precision < 0 ? 6 : spec.precision;
  if (std::isnan(a) || std::isinf(a)) {
    body = std::isnan(a) ? "nan" : "inf";
    if (type == 'F' || type == 'E' || type == 'G') for (auto& c : body) c = static_cast<char>(c - 32);
    if (type == '%') body += '%';
  } else if (type == 0) {
    if (spec.precision < 0) {
      body = py_float(a);
    } else {
      // Like 'g', but scientific from exp >= p - 1 on, and a fixed-point result keeps one digit
      // after the point (Python's format spec docs, the "None" presentation type).
      const int p1 = spec.precision == 0 ? 1 : spec.precision;
      const std::string sci = c_float(a, p1 - 1, 'e', false);
      const int exp = std::atoi(sci.c_str() + sci.find('e') + 1);
      if (exp < -4 || exp >= p1 - 1) {
        std::string mant = sci.substr(0, sci.find('e'));
        if (mant.find('.') != std::string::npos && !spec.alternate) {
          while (mant.back() == '0') mant.pop_back();
          if (mant.back() == '.') mant.pop_back();
        }
        body = mant + sci.substr(sci.find('e'));
      } else {
        body = c_float(a, p1 - 1 - exp, 'f', false);
        if (body.find('.') != std::string::npos) {
          while (body.back() == '0') body.pop_back();
          if (body.back() == '.') body += '0';
        } else {
          body += ".0";
        }
      }
    }
  } else if (type == '%') {
    body = c_float(a * 100, p, 'f', spec.alternate) + "%";
  } else if (type == 'n') {
    body = c_float(a, p == 0 ? 1 : p, 'g', spec.alternate);
  } else {
    body = c_float(a, (type == 'g' || type == 'G') && p == 0 ? 1 : p, type, spec.alternate);
  }
  if (spec.grouping && std::isfinite(a)) {
    size_t end = body.find_first_not_of("0123456789");
    if (end == std::string::npos) end = body.size();
    body = group_digits(body.substr(0, end), spec.grouping, 3) + body.substr(end);
  }
  return pad(neg ? "-" : spec.sign == '-' ? "" : std::string(1, spec.sign), body, spec, '>');
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    default: return "object";
  }
}

std::string format_with(const Value& v, const Spec& spec, std::string_view spec_text) {
  const char t = spec.type;
  switch (v.kind()) {
    case Value::Kind::String: {
      if (t != 0 && t != 's') throw Error(std::string("Unknown format code '") + t + "' for object of type 'str'");
      if (spec.sign != '-' || spec.alternate || spec.grouping) throw Error("Sign, alternate form or grouping not allowed in string format specifier");
      std::string s = v.as_string();
      if (spec.precision >= 0) {
        const std::u32string u = to_u32(s);
        if (u.size() > static_cast<size_t>(spec.precision)) s = from_u32(u.substr(0, static_cast<size_t>(spec.precision)));
      }
      return pad("", s, spec, '<');
    }
    case Value::Kind::Bool:
    case Value::Kind::Int:
      if (t == 0 || t == 'd' || t == 'n' || t == 'x' || t == 'X' || t == 'o' || t == 'b' || t == 'c') {
        if (spec.precision >= 0) throw Error("Precision not allowed in integer format specifier");
        return format_int(v, spec, t == 0 || t == 'n' ? 'd' : t);
      }
      if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G' || t == '%')
        return format_float(v.is_big_integer() ? std::strtod(v.as_string().c_str(), nullptr)
                                               : static_cast<double>(v.kind() == Value::Kind::Bool ? v.as_bool() : v.as_int()),
                            spec, t);
      break;
    case Value::Kind::Float:
      if (t == 0 || t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G' || t == '%' || t == 'n')
        return format_float(v.as_float(), spec, t);
      break;
    default:
      throw Error(std::string("unsupported format string passed to ") + type_name(v) + ".__format__");
  }
  throw Error("Unknown format code '" + std::string(1, t) + "' for object of type '" + type_name(v) + "' (spec '" +
              std::string(spec_text) + "')");
}

}  // namespace

std::string py_format_spec(const Value& v, std::string_view spec) {
  if (spec.empty()) return to_python_str(v);
  return format_with(v, parse_spec(spec), spec);
}

std::string py_percent_format(std::string_view fmt, const Value& args) {
  std::vector<Value> list;
  const bool mapping = args.is_dict() && !args.is_namespace();
  if (args.is_tuple()) list = args.items();
  else list.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw Error("incomplete format");
    const Value* v = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string_view::npos) throw Error("incomplete format key");
      if (!mapping) throw Error("format requires a mapping");
      const std::string key(fmt.substr(i + 1, close - i - 1));
      v = args.find(key);
      if (!v) throw Error("KeyError: '" + key + "'");
      used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    for (; i < fmt.size(); ++i) {
      const char c = fmt[i];
      if (c == '-') spec.align = '<';
      else if (c == '0') spec.zero = true;
      else if (c == '+') spec.sign = '+';
      else if (c == ' ') {
        if (spec.sign != '+') spec.sign = ' ';
      } else if (c == '#') spec.alternate = true;
      else break;
    }
    spec.width = read_number(fmt, i);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      spec.precision = static_cast<int>(read_number(fmt, i));
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw Error("incomplete format");
    const char type = fmt[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!v) {
      if (next >= list.size()) throw Error("not enough arguments for format string");
      v = &list[next++];
    }
    if (spec.align == '<') spec.zero = false;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? to_python_str(*v) : v->is_string() ? py_repr_string(v->as_string()) : to_python_str(*v);
        if (spec.precision >= 0) {
          const std::u32string u = to_u32(s);
          if (u.size() > static_cast<size_t>(spec.precision)) s = from_u32(u.substr(0, static_cast<size_t>(spec.precision)));
        }
        Spec plain = spec;
        plain.zero = false;
        out += pad("", s, plain, '>');
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        if (type == 'c' && v->is_string()) {
          if (cp_count(v->as_string()) != 1) throw Error("%c requires an int or a unicode character, not a string of length " + std::to_string(cp_count(v->as_string())));
          Spec plain = spec;
          plain.zero = false;
          out += pad("", v->as_string(), plain, '>');
          break;
        }
        Value n = *v;
        if (n.kind() == Value::Kind::Float) {
          if (type == 'x' || type == 'X' || type == 'o' || type == 'c') throw Error(std::string("%") + type + " format: an integer is required, not float");
          if (!std::isfinite(n.as_float())) throw Error("cannot convert float to integer");
          n = Value::integer(static_cast<int64_t>(std::trunc(n.as_float())));
        }
        if (n.kind() != Value::Kind::Int && n.kind() != Value::Kind::Bool)
          throw Error(std::string("%") + type + " format: a real number is required, not " + type_name(n));
        if (spec.precision >= 0 && type != 'c') {
          // %.3d pads the digits with zeros, as C does.
          Spec digits_spec;
          digits_spec.width = static_cast<size_t>(spec.precision);
          digits_spec.zero = true;
          Spec outer = spec;
          outer.precision = -1;
          const bool neg = n.kind() == Value::Kind::Int && !n.is_big_integer() && n.as_int() < 0;
          if (neg && n.as_int() == INT64_MIN) throw Error("integer overflow");
          std::string body = format_int(neg ? Value::integer(-n.as_int()) : n, digits_spec, type == 'i' || type == 'u' ? 'd' : type);
          out += pad(neg ? "-" : spec.sign == '-' ? "" : std::string(1, spec.sign), body, outer, '>');
        } else {
          out += format_int(n, spec, type == 'i' || type == 'u' ? 'd' : type);
        }
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        double x;
        if (v->kind() == Value::Kind::Float) x = v->as_float();
        else if (v->kind() == Value::Kind::Int || v->kind() == Value::Kind::Bool)
          x = v->is_big_integer() ? std::strtod(v->as_string().c_str(), nullptr)
                                  : static_cast<double>(v->kind() == Value::Kind::Bool ? v->as_bool() : v->as_int());
        else throw Error(std::string("must be real number, not ") + type_name(*v));
        out += format_float(x, spec, type);
        break;
      }
      default: throw Error(std::string("unsupported format character '") + type + "'");
    }
  }
  if (!used_mapping && !mapping && next < list.size()) throw Error("not all arguments converted during string formatting");
  return out;
}

}  // namespace picolm::jinja::detail
