// The generated Unicode run table (engine/unicode_data.cpp, from tools/gen_unicode_tables.py).
// Engine-internal; use unicode_flags() from unicode.h instead of reading these directly.
#pragma once
#include <cstdint>

namespace picolm::unicode_data {
extern const char* const kUnicodeVersion;
extern const uint32_t kUnicodeRunCount;
extern const uint32_t kUnicodeRunStart[];  // sorted; run i covers [start[i], start[i+1])
extern const uint8_t kUnicodeRunFlags[];   // CodepointFlags::bits of run i
extern const uint8_t kLatin1Flags[256];
}  // namespace picolm::unicode_data
