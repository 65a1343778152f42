// Lexer and parser. Whitespace rules are jinja2's lexer (3.1) with Hugging Face's settings:
//   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after it;
//   - trim_blocks: the first newline after a block or comment tag is removed (not after `+%}`);
//   - lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag are
//     removed (not for `{%+`, not for `{{`); "start of a line" also holds right after a tag
//     that ended with a newline, and at the start of the template;
//   - keep_trailing_newline off: one trailing newline of the template is dropped.
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstring>

#include "jinja_internal.h"
#include "jinja_parse.h"

namespace picolm::jinja::detail {

namespace {

struct Token {
  enum Kind : uint8_t { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Kind kind;
  std::string text;  // Text, Name, String (decoded), Op; Int/Float: the spelling
  int line;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string normalize_newlines(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else out += in[i];
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(normalize_newlines(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    bool strip_next = false;  // the previous tag ended with '-'
    while (pos_ < src_.size()) {
      // Find the next tag start.
      size_t t = pos_;
      while (true) {
        t = src_.find('{', t);
        if (t == std::string::npos || t + 1 >= src_.size()) {
          t = std::string::npos;
          break;
        }
        const char c = src_[t + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++t;
      }
      std::string text = src_.substr(pos_, t == std::string::npos ? std::string::npos : t - pos_);
      const int text_line = line_;
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
        strip_next = false;
      }
      for (char ch : src_.substr(pos_, t == std::string::npos ? std::string::npos : t - pos_))
        if (ch == '\n') ++line_;
      if (t == std::string::npos) {
        if (!text.empty()) out_.push_back({Token::Text, std::move(text), text_line});
        pos_ = src_.size();
        break;
      }
      const char kind = src_[t + 1];
      const char sign = t + 2 < src_.size() ? src_[t + 2] : '\0';
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_space(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k)
            if (!is_space(text[k])) all_ws = false;
          if (all_ws) text.resize(l_pos);
        }
      }
      if (!text.empty()) out_.push_back({Token::Text, std::move(text), text_line});
      pos_ = t + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      const int tag_line = line_;
      if (kind == '#') {
        const size_t e = src_.find("#}", pos_);
        if (e == std::string::npos) throw Error("unterminated comment", tag_line);
        for (size_t k = pos_; k < e; ++k)
          if (src_[k] == '\n') ++line_;
        const bool minus = e > pos_ && src_[e - 1] == '-';
        const bool plus = e > pos_ && src_[e - 1] == '+';
        pos_ = e + 2;
        strip_next = minus;
        if (!minus && !plus && pos_ < src_.size() && src_[pos_] == '\n') {
          ++pos_;
          ++line_;
        }
        line_starting = src_[pos_ - 1] == '\n';
        continue;
      }
      if (kind == '%' && lex_raw(strip_next, tag_line)) {
        line_starting = src_[pos_ - 1] == '\n';
        continue;
      }
      out_.push_back({kind == '{' ? Token::VarBegin : Token::BlockBegin, "", tag_line});
      const char close = kind == '{' ? '}' : '%';
      const char sign_out = lex_inside(close);
      if (sign_out == '-') strip_next = true;
      out_.push_back({kind == '{' ? Token::VarEnd : Token::BlockEnd, "", line_});
      if (kind == '%' && sign_out == '\0' && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
        ++line_;
      }
      line_starting = src_[pos_ - 1] == '\n';
    }
    out_.push_back({Token::Eof, "", line_});
    return std::move(out_);
  }

 private:
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

  // At pos_ just inside a `{%`: if the tag is `raw`, emits everything up to the matching
  // `{% endraw %}` as text (with the same whitespace control as other tags) and returns true.
  bool lex_raw(bool& strip_next, int tag_line) {
    size_t q = pos_;
    while (q < src_.size() && is_space(src_[q])) ++q;
    if (src_.compare(q, 3, "raw") != 0 || q + 3 >= src_.size() || ident_char(src_[q + 3])) return false;
    q += 3;
    while (q < src_.size() && is_space(src_[q])) ++q;
    // jinja2's lexer knows `raw -%}` and `raw %}` only, and applies no trim_blocks after it.
    char open_sign = 0;
    if (q < src_.size() && src_[q] == '-') open_sign = src_[q++];
    if (src_.compare(q, 2, "%}") != 0) return false;
    for (size_t k = pos_; k < q; ++k)
      if (src_[k] == '\n') ++line_;
    pos_ = q + 2;
    // The closing tag: {%[-+]? endraw [-+]?%}
    size_t start = pos_, tag = 0, after = 0;
    char close_in = 0, close_out = 0;
    for (size_t search = pos_;; search = tag + 2) {
      tag = src_.find("{%", search);
      if (tag == std::string::npos) throw Error("missing '{% endraw %}'", tag_line);
      size_t k = tag + 2;
      close_in = 0;
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) close_in = src_[k++];
      while (k < src_.size() && is_space(src_[k])) ++k;
      if (src_.compare(k, 6, "endraw") != 0 || (k + 6 < src_.size() && ident_char(src_[k + 6]))) continue;
      k += 6;
      while (k < src_.size() && is_space(src_[k])) ++k;
      close_out = 0;
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) close_out = src_[k++];
      if (src_.compare(k, 2, "%}") != 0) continue;
      after = k + 2;
      break;
    }
    std::string text = src_.substr(start, tag - start);
    if (open_sign == '-') {
      size_t k = 0;
      while (k < text.size() && is_space(text[k])) ++k;
      text.erase(0, k);
    }
    if (close_in == '-') {
      size_t e = text.size();
      while (e > 0 && is_space(text[e - 1])) --e;
      text.resize(e);
    } else if (close_in != '+') {  // lstrip_blocks before the closing tag
      const size_t nl = text.rfind('\n');
      if (nl != std::string::npos && text.find_first_not_of(" \t", nl + 1) == std::string::npos) text.resize(nl + 1);
    }
    const int text_line = line_;
    for (size_t k = start; k < after; ++k)
      if (src_[k] == '\n') ++line_;
    if (!text.empty()) out_.push_back({Token::Text, std::move(text), text_line});
    pos_ = after;
    strip_next = close_out == '-';
    if (close_out == 0 && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    return true;
  }

  // Lexes expression tokens up to the closing `%}` / `}}` (outside brackets); returns the sign
  // before it ('-', '+' or '\0').
  char lex_inside(char close) {
    int balance = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) throw Error("unexpected end of template inside a tag", line_);
      const char c = src_[pos_];
      if (balance == 0) {
        if ((c == '-' || c == '+') && pos_ + 2 < src_.size() + 0 && src_[pos_ + 1] == close && src_[pos_ + 2] == '}') {
          pos_ += 3;
          return c;
        }
        if (c == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
          pos_ += 2;
          return '\0';
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        out_.push_back({Token::Name, src_.substr(pos_, e - pos_), line_});
        pos_ = e;
      } else if (c == '0' && pos_ + 2 < src_.size() && std::strchr("xXoObB", src_[pos_ + 1]) && (std::isxdigit(static_cast<unsigned char>(src_[pos_ + 2])) || src_[pos_ + 2] == '_')) {
        // 0x1F, 0o17, 0b101 (underscores allowed between digits), as jinja2's lexer reads them.
        const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_ + 1])));
        const int base = b == 'x' ? 16 : b == 'o' ? 8 : 2;
        size_t e = pos_ + 2;
        uint64_t v = 0;
        for (; e < src_.size(); ++e) {
          const char d = src_[e];
          if (d == '_') continue;
          const int dv = std::isdigit(static_cast<unsigned char>(d)) ? d - '0' : std::isxdigit(static_cast<unsigned char>(d)) ? std::tolower(d) - 'a' + 10 : 99;
          if (dv >= base) break;
          if (v > (UINT64_MAX >> 4) || v * static_cast<uint64_t>(base) + static_cast<uint64_t>(dv) > static_cast<uint64_t>(INT64_MAX))
            throw Error("integer literal too large", line_);
          v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(dv);
        }
        out_.push_back({Token::Int, std::to_string(v), line_});
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos_;
        bool is_float = false;
        while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t f = e + 1;
          if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
          if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
            is_float = true;
            e = f;
            while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          }
        }
        std::string num;
        for (size_t k = pos_; k < e; ++k)
          if (src_[k] != '_') num += src_[k];
        out_.push_back({is_float ? Token::Float : Token::Int, num, line_});
        pos_ = e;
      } else if (c == '"' || c == '\'') {
        out_.push_back({Token::String, lex_string(c), line_});
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                          "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "=", nullptr};
        const char* found = nullptr;
        for (const char* const* op = ops; *op; ++op)
          if (src_.compare(pos_, std::strlen(*op), *op) == 0) {
            found = *op;
            break;
          }
        if (!found) throw Error(std::string("unexpected character '") + c + "'", line_);
        const std::string op(found);
        if (op == "(" || op == "[" || op == "{") ++balance;
        if (op == ")" || op == "]" || op == "}") {
          if (balance == 0) throw Error("unexpected '" + op + "'", line_);
          --balance;
        }
        out_.push_back({Token::Op, op, line_});
        pos_ += op.size();
      }
    }
  }

  // Python string literal escapes (jinja2 decodes them like Python does).
  std::string lex_string(char q) {
    const int start_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) throw Error("unterminated string", start_line);
      const char c = src_[pos_++];
      if (c == q) return out;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) throw Error("unterminated string", start_line);
      const char e = src_[pos_++];
      auto hex = [&](int n) {
        if (pos_ + n > src_.size()) throw Error("bad escape in string", line_);
        uint32_t v = 0;
        auto r = std::from_chars(src_.data() + pos_, src_.data() + pos_ + n, v, 16);
        if (r.ptr != src_.data() + pos_ + n) throw Error("bad escape in string", line_);
        pos_ += n;
        append_utf8(out, v);
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\n': ++line_; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          out += '\\';
          out += e;
      }
    }
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

class Parser {
 public:
  Parser(std::vector<Token> toks, int max_depth) : t_(std::move(toks)), max_depth_(max_depth) {}

  Body parse_all() {
    std::vector<std::string> stop;
    Body b = parse_body({}, stop);
    if (peek().kind != Token::Eof) throw Error("unexpected tag", peek().line);
    return b;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).kind == Token::Op && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).kind == Token::Name && peek(k).text == n; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) throw Error(std::string("expected '") + op + "', got '" + peek().text + "'", peek().line);
  }
  std::string expect_name() {
    if (peek().kind != Token::Name) throw Error("expected a name, got '" + peek().text + "'", peek().line);
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != Token::BlockEnd) throw Error("expected the end of the statement, got '" + peek().text + "'", peek().line);
    next();
  }

  struct DepthGuard {
    DepthGuard(int& d, int max, int line) : d_(d) {
      if (++d_ > max) throw Error("template nested too deeply", line);
    }
    ~DepthGuard() { --d_; }
    int& d_;
  };

  // Parses statements until a block tag whose keyword is in `stop` (left unconsumed: the
  // caller reads it) or the end.
  Body parse_body(const std::vector<std::string>& stop, std::vector<std::string>& /*unused*/) {
    DepthGuard g(depth_, max_depth_, peek().line);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == Token::Eof) {
        if (!stop.empty()) throw Error("unexpected end of template, expected '{% " + stop[0] + " %}'", t.line);
        return body;
      }
      if (t.kind == Token::Text) {
        auto s = std::make_unique<Stmt>();
        s->type = Stmt::Type::Text;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (t.kind == Token::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->type = Stmt::Type::Output;
        s->line = t.line;
        s->expr = parse_tuple_or_expr();
        if (peek().kind != Token::VarEnd) throw Error("expected '}}', got '" + peek().text + "'", peek().line);
        next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != Token::BlockBegin) throw Error("unexpected token '" + t.text + "'", t.line);
      const Token& kw = peek(1);
      if (kw.kind != Token::Name) throw Error("expected a statement keyword", kw.line);
      for (const auto& s : stop)
        if (kw.text == s) return body;
      next();
      body.push_back(parse_statement());
    }
  }

  Body parse_until(std::vector<std::string> stop) {
    std::vector<std::string> unused;
    return parse_body(stop, unused);
  }

  // After parse_until: consumes `{% kw`, returning kw.
  std::string take_keyword() {
    next();  // BlockBegin
    return next().text;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& kw = next();
    auto s = std::make_unique<Stmt>();
    s->line = kw.line;
    const std::string& k = kw.text;
    if (k == "if") {
      s->type = Stmt::Type::If;
      ExprPtr cond = parse_expression();
      expect_block_end();
      while (true) {
        Body b = parse_until({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        const std::string end = take_keyword();
        if (end == "elif") {
          cond = parse_expression();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = parse_until({"endif"});
          take_keyword();
        }
        expect_block_end();
        break;
      }
    } else if (k == "for") {
      s->type = Stmt::Type::For;
      const bool parens = accept_op("(");  // {% for (k, v) in ... %}
      s->names.push_back(expect_name());
      while (accept_op(",")) s->names.push_back(expect_name());
      if (parens) expect_op(")");
      if (!accept_name("in")) throw Error("expected 'in' in for", peek().line);
      s->expr = parse_tuple_or_expr(/*no_cond=*/true);
      if (accept_name("if")) s->cond = parse_expression();
      if (is_name("recursive")) throw Error("recursive loops are not supported", peek().line);
      expect_block_end();
      s->body = parse_until({"else", "endfor"});
      if (take_keyword() == "else") {
        expect_block_end();
        s->else_body = parse_until({"endfor"});
        take_keyword();
      }
      expect_block_end();
    } else if (k == "set") {
      const std::string name = expect_name();
      if (accept_op(".")) {
        s->type = Stmt::Type::Set;
        s->text = name;
        s->attr = expect_name();
        expect_op("=");
        s->expr = parse_tuple_or_expr();
        expect_block_end();
      } else if (is_op("=") || is_op(",")) {
        s->type = Stmt::Type::Set;
        s->names.push_back(name);
        while (accept_op(",")) s->names.push_back(expect_name());
        expect_op("=");
        s->expr = parse_tuple_or_expr();
        expect_block_end();
      } else {
        s->type = Stmt::Type::SetBlock;
        s->text = name;
        if (accept_op("|")) s->expr = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_until({"endset"});
        take_keyword();
        expect_block_end();
      }
    } else if (k == "macro") {
      s->type = Stmt::Type::Macro;
      s->text = expect_name();
      parse_params(*s);
      expect_block_end();
      s->body = parse_until({"endmacro"});
      take_keyword();
      if (peek().kind == Token::Name) next();  // {% endmacro name %}
      expect_block_end();
    } else if (k == "call") {
      s->type = Stmt::Type::CallBlock;
      if (is_op("(")) parse_params(*s);
      s->expr = parse_expression();
      if (s->expr->type != Expr::Type::Call) throw Error("expected a call in {% call %}", s->line);
      expect_block_end();
      s->body = parse_until({"endcall"});
      take_keyword();
      expect_block_end();
    } else if (k == "filter") {
      s->type = Stmt::Type::FilterBlock;
      s->expr = parse_filter_chain(nullptr);
      expect_block_end();
      s->body = parse_until({"endfilter"});
      take_keyword();
      expect_block_end();
    } else if (k == "with") {
      // {% with a = 1, b = x %}: names visible in the body only, values evaluated outside it.
      s->type = Stmt::Type::With;
      while (peek().kind != Token::BlockEnd && peek().kind != Token::Eof) {
        if (!s->names.empty()) expect_op(",");
        s->names.push_back(expect_name());
        expect_op("=");
        s->defaults.push_back(parse_expression());
      }
      expect_block_end();
      s->body = parse_until({"endwith"});
      take_keyword();
      expect_block_end();
    } else if (k == "generation") {
      // transformers' AssistantTracker extension: marks the assistant's part for masks, renders
      // its body as it is.
      s->type = Stmt::Type::FilterBlock;
      expect_block_end();
      s->body = parse_until({"endgeneration"});
      take_keyword();
      expect_block_end();
    } else if (k == "break" || k == "continue") {
      s->type = k == "break" ? Stmt::Type::Break : Stmt::Type::Continue;
      expect_block_end();
    } else {
      throw Error("unknown or unsupported statement '" + k + "'", kw.line);
    }
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!accept_op(")")) {
      if (!s.names.empty()) expect_op(",");
      if (accept_op(")")) break;
      s.names.push_back(expect_name());
      s.defaults.push_back(accept_op("=") ? parse_expression() : nullptr);
    }
  }

  // Left-deep chains (a + b + c ..., x|f|g ..., a.b.c ...) nest the tree as deep as they are
  // long; evaluating and freeing it recurses that deep, so their length is bounded too.
  void chain(int& n) {
    if (++n > max_depth_) throw Error("expression chain longer than " + std::to_string(max_depth_), peek().line);
  }

  ExprPtr make(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // `a, b` at the top of {{ }}, set and for: a tuple.
  ExprPtr parse_tuple_or_expr(bool no_cond = false) {
    const int line = peek().line;
    ExprPtr first = no_cond ? parse_or() : parse_expression();
    if (!is_op(",")) return first;
    auto t = make(Expr::Type::TupleLit, line);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().kind == Token::BlockEnd || peek().kind == Token::VarEnd) break;
      t->args.push_back(no_cond ? parse_or() : parse_expression());
    }
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard g(depth_, max_depth_, peek().line);
    const int line = peek().line;
    ExprPtr e = parse_or();
    if (is_name("if")) {
      next();
      auto c = make(Expr::Type::Cond, line);
      c->args.push_back(parse_or());  // condition
      c->args.push_back(std::move(e));
      if (accept_name("else")) c->args.push_back(parse_expression());
      return c;
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    int n = 0;
    while (is_name("or")) {
      chain(n);
      const int line = next().line;
      auto e = make(Expr::Type::Or, line);
      e->args.push_back(std::move(l));
      e->args.push_back(parse_and());
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    int n = 0;
    while (is_name("and")) {
      chain(n);
      const int line = next().line;
      auto e = make(Expr::Type::And, line);
      e->args.push_back(std::move(l));
      e->args.push_back(parse_not());
      l = std::move(e);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(depth_, max_depth_, peek().line);
      const int line = next().line;
      auto e = make(Expr::Type::Not, line);
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    int n = 0;
    while (true) {
      chain(n);
      const int line = peek().line;
      std::string op;
      if (peek().kind == Token::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
                                       peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return l;
      }
      auto e = make(Expr::Type::Binary, line);
      e->name = op;
      e->args.push_back(std::move(l));
      e->args.push_back(parse_math1());
      l = std::move(e);
    }
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(Expr::Type::Binary, line);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    int n = 0;
    while (is_op("+") || is_op("-")) {
      chain(n);
      const Token& t = next();
      l = binary(t.text, std::move(l), parse_concat(), t.line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    int n = 0;
    while (is_op("~")) {
      chain(n);
      const Token& t = next();
      l = binary("~", std::move(l), parse_math2(), t.line);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    int n = 0;
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain(n);
      const Token& t = next();
      l = binary(t.text, std::move(l), parse_pow(), t.line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    int n = 0;
    while (is_op("**")) {
      chain(n);
      const Token& t = next();
      l = binary("**", std::move(l), parse_unary(true), t.line);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(depth_, max_depth_, peek().line);
    const int line = peek().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const bool neg = next().text == "-";
      e = make(neg ? Expr::Type::Neg : Expr::Type::Pos, line);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    const int line = t.line;
    if (t.kind == Token::Name) {
      next();
      auto lit = [&](Value v) {
        auto e = make(Expr::Type::Literal, line);
        e->literal = std::move(v);
        return e;
      };
      if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
      if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
      if (t.text == "none" || t.text == "None") return lit(Value::none());
      auto e = make(Expr::Type::Name, line);
      e->name = t.text;
      return e;
    }
    if (t.kind == Token::String) {
      std::string s = next().text;
      while (peek().kind == Token::String) s += next().text;
      auto e = make(Expr::Type::Literal, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.kind == Token::Int) {
      auto e = make(Expr::Type::Literal, line);
      int64_t v = 0;
      const std::string& s = next().text;
      auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      e->literal = r.ec == std::errc() ? Value::integer(v) : Value::big_integer(s);
      return e;
    }
    if (t.kind == Token::Float) {
      auto e = make(Expr::Type::Literal, line);
      double v = 0;
      const std::string& s = next().text;
      std::from_chars(s.data(), s.data() + s.size(), v);
      e->literal = Value::number(v);
      return e;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::Type::TupleLit, line);
      ExprPtr first = parse_expression();
      if (accept_op(")")) return first;
      auto tup = make(Expr::Type::TupleLit, line);
      tup->args.push_back(std::move(first));
      while (accept_op(",")) {
        if (is_op(")")) break;
        tup->args.push_back(parse_expression());
      }
      expect_op(")");
      return tup;
    }
    if (accept_op("[")) {
      auto l = make(Expr::Type::ListLit, line);
      while (!accept_op("]")) {
        if (!l->args.empty()) expect_op(",");
        if (accept_op("]")) break;
        l->args.push_back(parse_expression());
      }
      return l;
    }
    if (accept_op("{")) {
      auto d = make(Expr::Type::DictLit, line);
      while (!accept_op("}")) {
        if (!d->args.empty()) expect_op(",");
        if (accept_op("}")) break;
        d->args.push_back(parse_expression());
        expect_op(":");
        d->args.push_back(parse_expression());
      }
      return d;
    }
    throw Error("unexpected '" + t.text + "' in expression", line);
  }

  void parse_call_args(Expr& e) {
    // '(' consumed
    while (!accept_op(")")) {
      if (!e.args.empty() || !e.kwargs.empty()) expect_op(",");
      if (accept_op(")")) break;
      if (peek().kind == Token::Name && is_op("=", 1)) {
        std::string k = next().text;
        next();
        e.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!e.kwargs.empty()) throw Error("positional argument after keyword argument", peek().line);
        e.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    int n = 0;
    while (true) {
      chain(n);
      const int line = peek().line;
      if (accept_op(".")) {
        auto g = make(Expr::Type::GetAttr, line);
        if (peek().kind == Token::Int) g->name = next().text;  // x.0
        else g->name = expect_name();
        g->target = std::move(e);
        e = std::move(g);
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        bool slice = false;
        int idx = 0;
        while (!is_op("]")) {
          if (accept_op(":")) {
            slice = true;
            if (++idx > 2) throw Error("bad slice", line);
            continue;
          }
          if (parts[idx]) throw Error("expected ']'", peek().line);
          parts[idx] = parse_expression();
        }
        expect_op("]");
        if (slice) {
          auto s = make(Expr::Type::Slice, line);
          s->target = std::move(e);
          for (auto& p : parts) s->args.push_back(std::move(p));
          e = std::move(s);
        } else {
          if (!parts[0]) throw Error("empty subscript", line);
          auto g = make(Expr::Type::GetItem, line);
          g->target = std::move(e);
          g->args.push_back(std::move(parts[0]));
          e = std::move(g);
        }
      } else if (accept_op("(")) {
        auto c = make(Expr::Type::Call, line);
        c->target = std::move(e);
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // `x | f(a) | g` with x given (or nullptr for filter blocks: the input comes at run time).
  ExprPtr parse_filter_chain(ExprPtr input) {
    int n = 0;
    do {
      chain(n);
      const int line = peek().line;
      auto f = make(Expr::Type::Filter, line);
      f->name = expect_name();
      while (accept_op(".")) f->name += "." + expect_name();
      if (accept_op("(")) parse_call_args(*f);
      f->target = std::move(input);
      input = std::move(f);
    } while (accept_op("|"));
    return input;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    int n = 0;
    while (true) {
      chain(n);
      if (accept_op("|")) {
        const int line = peek().line;
        auto f = make(Expr::Type::Filter, line);
        f->name = expect_name();
        if (accept_op("(")) parse_call_args(*f);
        f->target = std::move(e);
        e = std::move(f);
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Type::Test, line);
        t->negated = accept_name("not");
        t->name = expect_name();
        if (accept_op("(")) {
          parse_call_args(*t);
        } else {
          const Token& n = peek();
          const bool arg = n.kind == Token::String || n.kind == Token::Int || n.kind == Token::Float || is_op("[") || is_op("{") ||
                           (n.kind == Token::Name && n.text != "else" && n.text != "or" && n.text != "and" && n.text != "if" &&
                            n.text != "is" && n.text != "in" && n.text != "not");
          if (arg) t->args.push_back(parse_postfix(parse_primary()));
        }
        t->target = std::move(e);
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int max_depth_;
};

}  // namespace

Body parse_template(std::string_view text, int max_depth) {
  Lexer lx(text);
  Parser p(lx.run(), max_depth);
  return p.parse_all();
}

}  // namespace picolm::jinja::detail
