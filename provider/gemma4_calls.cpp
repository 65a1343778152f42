#include "gemma4_calls.h"

#include <algorithm>
#include <cstring>

#include "json_writer.h"

namespace picolm {

namespace {

constexpr std::string_view kOpen = "<|tool_call>call:";
constexpr std::string_view kClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

enum class Match { Yes, No, NeedMore };

// Whether `lit` is at text[i], or text ends inside it.
Match match_at(std::string_view text, size_t i, std::string_view lit) {
  const size_t n = std::min(lit.size(), text.size() - i);
  if (text.compare(i, n, lit, 0, n) != 0) return Match::No;
  return n == lit.size() ? Match::Yes : Match::NeedMore;
}

// Length of the longest suffix of `s` that is a proper prefix of `needle`.
size_t partial_suffix(std::string_view s, std::string_view needle) {
  for (size_t k = std::min(needle.size() - 1, s.size()); k > 0; --k)
    if (s.compare(s.size() - k, k, needle, 0, k) == 0) return k;
  return 0;
}

// Bytes at the end of `s` that begin a UTF-8 character not complete yet.
size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// A string's raw text as JSON string content (no quotes).
std::string json_content(std::string_view raw) {
  std::string quoted;
  json::append_json_string(quoted, raw);
  return quoted.substr(1, quoted.size() - 2);
}

// JSON's number syntax: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t b = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > b;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') ++i;
  else if (!digits()) return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

bool scalar_byte(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' || c == '.';
}

// A byte that cannot be part of an unquoted name or key (grammar/schema_compiler.h's gemma4_name
// and gemma4_key say what the grammar writes; the reader refuses only what would be ambiguous).
bool bad_name_byte(char ch, const char* extra) {
  const auto c = static_cast<unsigned char>(ch);
  return c <= 0x20 || c == 0x7F || std::strchr(extra, c) != nullptr;
}

}  // namespace

void Gemma4CallReader::fail(size_t at, const std::string& what) {
  if (error_.empty()) error_ = what + " at byte " + std::to_string(at);
}

void Gemma4CallReader::emit(std::vector<Gemma4Event>& events, std::string piece) {
  if (piece.empty()) return;
  if (!events.empty() && events.back().kind == Gemma4Event::Kind::Arguments && events.back().index + 1 == n_calls_) {
    events.back().text += piece;
    return;
  }
  events.push_back({Gemma4Event::Kind::Arguments, n_calls_ - 1, std::move(piece)});
}

bool Gemma4CallReader::end_key(size_t at, std::string key, std::vector<Gemma4Event>& events) {
  if (key.empty()) {
    fail(at, "empty key");
    return false;
  }
  auto& keys = stack_.back().keys;
  if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
    fail(at, "repeated key '" + key + "'");
    return false;
  }
  std::string piece;
  json::append_json_string(piece, key);
  piece += ':';
  emit(events, std::move(piece));
  keys.push_back(std::move(key));
  state_ = State::Value;
  return true;
}

bool Gemma4CallReader::end_scalar(size_t at, std::vector<Gemma4Event>& events) {
  const bool none = token_ == "None";  // Jinja's print of Python's None
  if (!none && token_ != "true" && token_ != "false" && token_ != "null" && !json_number(token_)) {
    fail(at, "not a value: '" + token_ + "'");
    return false;
  }
  emit(events, none ? std::string("null") : token_);
  token_.clear();
  close_value();
  return true;
}

void Gemma4CallReader::close_value() {
  state_ = stack_.empty() ? State::CallClose : State::After;
}

void Gemma4CallReader::update(std::string_view text, std::vector<Gemma4Event>& events) {
  while (error_.empty() && pos_ < text.size()) {
    const char c = text[pos_];
    switch (state_) {
      case State::Outside: {
        if (text_between_) {
          const size_t k = text.find(kOpen, pos_);
          if (k == std::string_view::npos) {
            pos_ = text.size() - partial_suffix(text.substr(pos_), kOpen);
            return;
          }
          pos_ = k;
        } else if (is_ws(c)) {
          ++pos_;
          break;
        }
        const Match m = match_at(text, pos_, kOpen);
        if (m == Match::NeedMore) return;
        if (m == Match::No) {
          fail(pos_, "text outside a <|tool_call> block");
          return;
        }
        pos_ += kOpen.size();
        token_.clear();
        token_at_ = pos_;
        state_ = State::Name;
        break;
      }
      case State::Name:
        if (c == '{') {
          if (token_.empty()) {
            fail(pos_, "a call without a name");
            return;
          }
          events.push_back({Gemma4Event::Kind::Start, n_calls_++, std::move(token_)});
          token_.clear();
          stack_.push_back({true, {}});
          emit(events, "{");
          state_ = State::KeyOrClose;
        } else if (bad_name_byte(c, "}:<>")) {
          fail(pos_, "a function name cannot hold this byte");
          return;
        } else {
          token_ += c;
        }
        ++pos_;
        break;
      case State::KeyOrClose:
        if (is_ws(c)) {
          ++pos_;
        } else if (c == '}') {
          ++pos_;
          stack_.pop_back();
          emit(events, "}");
          close_value();
        } else {
          state_ = State::Key;
        }
        break;
      case State::Key: {
        if (is_ws(c)) {
          ++pos_;
          break;
        }
        const Match m = match_at(text, pos_, kQuote);
        if (m == Match::NeedMore) return;
        token_.clear();
        token_at_ = pos_;
        if (m == Match::Yes) {
          pos_ += kQuote.size();
          state_ = State::QuotedKey;
        } else {
          state_ = State::UnquotedKey;
        }
        break;
      }
      case State::UnquotedKey:
        if (c == ':') {
          if (!end_key(token_at_, std::move(token_), events)) return;
          token_.clear();
        } else if (bad_name_byte(c, ",{}[]\"<>")) {
          fail(pos_, "a key cannot hold this byte");
          return;
        } else {
          token_ += c;
        }
        ++pos_;
        break;
      case State::QuotedKey: {
        const size_t k = text.find(kQuote, pos_);
        if (k == std::string_view::npos) {
          const size_t keep = partial_suffix(text.substr(pos_), kQuote);
          token_.append(text.substr(pos_, text.size() - keep - pos_));
          pos_ = text.size() - keep;
          return;
        }
        token_.append(text.substr(pos_, k - pos_));
        pos_ = k + kQuote.size();
        state_ = State::Colon;
        break;
      }
      case State::Colon:
        if (is_ws(c)) {
          ++pos_;
        } else if (c == ':') {
          ++pos_;
          if (!end_key(token_at_, std::move(token_), events)) return;
          token_.clear();
        } else {
          fail(pos_, "':' expected after a key");
          return;
        }
        break;
      case State::Value: {
        if (is_ws(c)) {
          ++pos_;
          break;
        }
        const Match m = match_at(text, pos_, kQuote);
        if (m == Match::NeedMore) return;
        if (m == Match::Yes) {
          pos_ += kQuote.size();
          emit(events, "\"");
          state_ = State::String;
        } else if (c == '{') {
          ++pos_;
          stack_.push_back({true, {}});
          emit(events, "{");
          state_ = State::KeyOrClose;
        } else if (c == '[') {
          ++pos_;
          stack_.push_back({false, {}});
          emit(events, "[");
          state_ = State::ValueOrClose;
        } else if (scalar_byte(c)) {
          token_.clear();
          token_at_ = pos_;
          state_ = State::Scalar;
        } else {
          fail(pos_, "a value expected");
          return;
        }
        break;
      }
      case State::ValueOrClose:
        if (is_ws(c)) {
          ++pos_;
        } else if (c == ']') {
          ++pos_;
          stack_.pop_back();
          emit(events, "]");
          close_value();
        } else {
          state_ = State::Value;
        }
        break;
      case State::String: {
        const size_t k = text.find(kQuote, pos_);
        if (k == std::string_view::npos) {
          // Hand out what cannot turn into the close or be half a character.
          std::string_view avail = text.substr(pos_);
          avail = avail.substr(0, avail.size() - partial_suffix(avail, kQuote));
          avail = avail.substr(0, avail.size() - incomplete_utf8_tail(avail));
          emit(events, json_content(avail));
          pos_ += avail.size();
          return;
        }
        emit(events, json_content(text.substr(pos_, k - pos_)) + "\"");
        pos_ = k + kQuote.size();
        close_value();
        break;
      }
      case State::Scalar:
        if (scalar_byte(c)) {
          token_ += c;
          ++pos_;
        } else if (!end_scalar(token_at_, events)) {
          return;
        }
        break;
      case State::After:
        if (is_ws(c)) {
          ++pos_;
        } else if (c == ',') {
          ++pos_;
          emit(events, ",");
          state_ = stack_.back().object ? State::Key : State::Value;
        } else if (c == (stack_.back().object ? '}' : ']')) {
          ++pos_;
          stack_.pop_back();
          emit(events, std::string(1, c));
          close_value();
        } else {
          fail(pos_, stack_.back().object ? "',' or '}' expected" : "',' or ']' expected");
          return;
        }
        break;
      case State::CallClose: {
        const Match m = match_at(text, pos_, kClose);
        if (m == Match::NeedMore) return;
        if (m == Match::No) {
          fail(pos_, "<tool_call|> expected after the arguments");
          return;
        }
        pos_ += kClose.size();
        events.push_back({Gemma4Event::Kind::End, n_calls_ - 1, ""});
        state_ = State::Outside;
        break;
      }
    }
  }
}

void Gemma4CallReader::finish(size_t text_size) {
  if (!error_.empty()) return;
  if (state_ != State::Outside) fail(text_size, "the reply ends inside call " + std::to_string(n_calls_ - 1));
  else if (!text_between_ && pos_ < text_size) fail(pos_, "the reply ends inside <|tool_call>");
}

Gemma4Calls parse_gemma4_calls(std::string_view text, bool text_between) {
  Gemma4CallReader reader(text_between);
  std::vector<Gemma4Event> events;
  reader.update(text, events);
  reader.finish(text.size());
  Gemma4Calls out;
  std::vector<ToolCall> open;
  for (auto& e : events) {
    if (e.kind == Gemma4Event::Kind::Start) open.push_back({"", std::move(e.text), ""});
    else if (e.kind == Gemma4Event::Kind::Arguments) open.back().arguments_json += e.text;
    else out.calls.push_back(std::move(open.back()));
  }
  out.error = reader.error();
  return out;
}

}  // namespace picolm
