#include "unicode.h"

#include <algorithm>

#include "unicode_data.h"

namespace picolm {

CodepointFlags unicode_flags(uint32_t cpt) {
  using namespace unicode_data;
  if (cpt < 256) return CodepointFlags{kLatin1Flags[cpt]};
  if (cpt > 0x10FFFF) return CodepointFlags{0};
  const uint32_t* end = kUnicodeRunStart + kUnicodeRunCount;
  const uint32_t* it = std::upper_bound(kUnicodeRunStart, end, cpt);  // first run starting after cpt
  return CodepointFlags{kUnicodeRunFlags[(it - kUnicodeRunStart) - 1]};
}

const char* unicode_data_version() { return unicode_data::kUnicodeVersion; }

std::vector<uint32_t> utf8_to_codepoints(std::string_view s) {
  // Same acceptance rules as llama.cpp's unicode_cpt_from_utf8 (lead byte and continuation-byte
  // pattern only, no overlong/surrogate checks), so pre-tokenization sees the same code points.
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (p[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0x40) == 0) {
      out.push_back(0xFFFD);
      i += 1;
    } else if ((b & 0x20) == 0) {
      if (!cont(i + 1)) { out.push_back(0xFFFD); i += 1; continue; }
      out.push_back(((b & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu));
      i += 2;
    } else if ((b & 0x10) == 0) {
      if (!cont(i + 1) || !cont(i + 2)) { out.push_back(0xFFFD); i += 1; continue; }
      out.push_back(((b & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu));
      i += 3;
    } else if ((b & 0x08) == 0) {
      if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) { out.push_back(0xFFFD); i += 1; continue; }
      out.push_back(((b & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu));
      i += 4;
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

size_t sanitize_utf8(std::string_view in, bool hold_partial_tail, std::string& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Table 3-7)
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t k = 1;
    for (; k < len && i + k < n; ++k) {
      const uint8_t c = p[i + k];
      const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (c < l || c > h) break;
    }
    if (k == len) {
      out.append(in.substr(i, len));
      i += len;
    } else if (i + k == n && hold_partial_tail) {
      return i;  // a valid prefix of a sequence whose remaining bytes have not arrived yet
    } else {
      out += "\xEF\xBF\xBD";  // one replacement for the maximal ill-formed subpart
      i += k;
    }
  }
  return i;
}

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// are numbered from U+0100 upwards in byte order.
constexpr bool gpt2_printable(unsigned x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); }

struct Gpt2Tables {
  uint16_t byte_to_cpt[256] = {};
  int16_t cpt_to_byte[0x100 + 68] = {};  // every code point of the mapping is below U+0144
};

constexpr Gpt2Tables make_gpt2_tables() {
  Gpt2Tables t;
  for (auto& v : t.cpt_to_byte) v = -1;
  unsigned n = 0;
  for (unsigned b = 0; b < 256; ++b) {
    const unsigned c = gpt2_printable(b) ? b : 0x100 + n++;
    t.byte_to_cpt[b] = static_cast<uint16_t>(c);
    t.cpt_to_byte[c] = static_cast<int16_t>(b);
  }
  return t;
}

constexpr Gpt2Tables kGpt2 = make_gpt2_tables();
static_assert(kGpt2.byte_to_cpt[' '] == 0x120 && kGpt2.byte_to_cpt[0xFF] == 0xFF);

}  // namespace

uint32_t gpt2_byte_to_codepoint(uint8_t b) { return kGpt2.byte_to_cpt[b]; }

int gpt2_codepoint_to_byte(uint32_t cpt) {
  return cpt < sizeof(kGpt2.cpt_to_byte) / sizeof(kGpt2.cpt_to_byte[0]) ? kGpt2.cpt_to_byte[cpt] : -1;
}

}  // namespace picolm
