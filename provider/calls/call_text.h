// Internal to the call syntaxes (provider/calls/): small scanning helpers their readers and
// streamers share.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace picolm::calls {

constexpr size_t npos = std::string_view::npos;

inline bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

inline size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Bytes at the end of `s` that begin a UTF-8 character not complete yet.
inline size_t incomplete_utf8_tail(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// Length of the longest suffix of `s` that is a proper prefix of `needle`.
inline size_t partial_suffix(std::string_view s, std::string_view needle) {
  for (size_t k = std::min(needle.size() - 1, s.size()); k > 0; --k)
    if (s.compare(s.size() - k, k, needle, 0, k) == 0) return k;
  return 0;
}

// `partial` (a JSON string literal being written, from its opening quote) cut before an escape or
// UTF-8 character that is not complete, or a high surrogate whose pair has not come yet.
inline std::string_view safe_string_prefix(std::string_view partial) {
  size_t cut = partial.size();
  for (size_t i = 1; i < partial.size(); ++i) {
    if (partial[i] != '\\') continue;
    const size_t len = i + 1 < partial.size() && partial[i + 1] == 'u' ? 6 : 2;
    if (i + len > partial.size()) {
      cut = i;
      break;
    }
    if (len == 6 && i + len == partial.size()) {
      const char h = static_cast<char>(partial[i + 2] | 0x20), x = static_cast<char>(partial[i + 3] | 0x20);
      if (h == 'd' && (x == '8' || x == '9' || x == 'a' || x == 'b')) cut = i;  // high surrogate, pair pending
    }
    ++i;
  }
  std::string_view s = partial.substr(0, cut);
  return s.substr(0, s.size() - incomplete_utf8_tail(s));
}

// The arguments JSON of the one call `text` holds in `syntax` ("" when it holds none).
template <class Read>
std::string one_call_arguments(Read read, std::string_view text, std::string_view tools_json) {
  auto found = read(text, tools_json);
  return found.size() == 1 ? found[0].arguments_json : std::string();
}

}  // namespace picolm::calls
