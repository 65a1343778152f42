#include "volatile_lines.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace picolm {

namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

// A markdown horizontal rule: three or more '-', '*' or '_' alone on a line.
bool is_rule(std::string_view line) {
  size_t n = 0;
  char c0 = 0;
  for (char c : line) {
    if (c == ' ' || c == '\t') continue;
    if ((c != '-' && c != '*' && c != '_') || (c0 && c != c0)) return false;
    c0 = c;
    ++n;
  }
  return n >= 3;
}

bool is_heading(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i < line.size() && line[i] == '#';
}

// The value lines of a clock's block are short ("Current sender: Anna (ID: 581234907)").
constexpr size_t kBlockLineBytes = 120;

bool digit(char c) { return c >= '0' && c <= '9'; }
bool alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Length of the run of digits starting at s[i] (0 if s[i] is not a digit).
size_t digits_at(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size() && digit(s[j])) ++j;
  return j - i;
}

// hh:mm (hh 1-2 digits, mm exactly 2, not part of a longer number).
bool has_time(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!digit(s[i]) || (i > 0 && digit(s[i - 1]))) continue;
    const size_t a = digits_at(s, i);
    if (a < 1 || a > 2 || i + a >= s.size() || s[i + a] != ':') continue;
    const size_t b = digits_at(s, i + a + 1);
    if (b == 2) return true;
  }
  return false;
}

// Three numbers joined by one separator: yyyy-mm-dd, dd/mm/yyyy, mm-dd-yy, dd.mm.yyyy (a dotted
// form needs a 4-digit year at an end, so version numbers such as 1.25.3 are not dates).
bool has_numeric_date(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!digit(s[i]) || (i > 0 && digit(s[i - 1]))) continue;
    const size_t a = digits_at(s, i);
    size_t j = i + a;
    if (j >= s.size()) break;
    const char sep = s[j];
    if (sep != '-' && sep != '/' && sep != '.') continue;
    const size_t b = digits_at(s, j + 1);
    if (b < 1 || b > 2) continue;
    size_t k = j + 1 + b;
    if (k >= s.size() || s[k] != sep) continue;
    const size_t c = digits_at(s, k + 1);
    if (k + 1 + c < s.size() && digit(s[k + 1 + c])) continue;
    const bool year_first = a == 4 && c >= 1 && c <= 2;
    const bool year_last = a >= 1 && a <= 2 && (sep == '.' ? c == 4 : (c == 2 || c == 4));
    if (year_first || year_last) return true;
  }
  return false;
}

constexpr std::string_view kMonths[] = {"january", "february", "march", "april", "may", "june", "july",
                                        "august", "september", "october", "november", "december"};
constexpr std::string_view kWeekdays[] = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"};

std::string lower(std::string_view w) {
  std::string out(w);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "nov", "november", "sept"; "may" only capitalised (the verb is not a month).
bool is_month(std::string_view word) {
  const std::string w = lower(word);
  if (w == "may") return word[0] == 'M';
  for (auto m : kMonths) {
    if (w == m || (w.size() == 3 && m.compare(0, 3, w) == 0)) return true;
  }
  return w == "sept";
}

bool is_weekday(std::string_view word) {
  const std::string w = lower(word);
  for (auto d : kWeekdays) {
    if (w == d || (w.size() == 3 && d.compare(0, 3, w) == 0)) return true;
  }
  return false;
}

// A month name next to a day or a year: "Nov 26", "26 November 2026", "November 26, 2026".
bool has_month_date(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!alpha(s[i]) || (i > 0 && alpha(s[i - 1]))) continue;
    size_t j = i;
    while (j < s.size() && alpha(s[j])) ++j;
    if (is_month(s.substr(i, j - i))) {
      size_t k = j;
      while (k < s.size() && (s[k] == ' ' || s[k] == ',' || s[k] == '.')) ++k;
      const size_t after = k < s.size() ? digits_at(s, k) : 0;
      if (k > j && (after == 1 || after == 2 || after == 4)) return true;
      size_t p = i;
      while (p > 0 && s[p - 1] == ' ') --p;
      if (p < i && p > 0 && digit(s[p - 1])) {
        size_t q = p - 1;
        while (q > 0 && digit(s[q - 1])) --q;
        if (p - q <= 2) return true;
      }
    }
    i = j;
  }
  return false;
}

// Words of letters that are not part of a date or a time: not a month or weekday name, not am/pm,
// not a time-zone abbreviation (2-5 capitals: UTC, CEST).
size_t other_words(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    if (!alpha(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && alpha(s[j])) ++j;
    const std::string_view w = s.substr(i, j - i);
    const bool zone = w.size() >= 2 && w.size() <= 5 &&
                      std::all_of(w.begin(), w.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
    const std::string lw = lower(w);
    if (!is_month(w) && !is_weekday(w) && !zone && lw != "am" && lw != "pm" && lw != "t" && lw != "z") ++n;
    i = j;
  }
  return n;
}

// For each line of `a`, the index of the line of `b` it is matched to in a longest common
// subsequence (or -1). The common head and tail are matched directly; the middle by dynamic
// programming when it is small enough, else left unmatched.
std::vector<ptrdiff_t> match_lines(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::vector<ptrdiff_t> m(a.size(), -1);
  size_t head = 0;
  while (head < a.size() && head < b.size() && a[head] == b[head]) {
    m[head] = static_cast<ptrdiff_t>(head);
    ++head;
  }
  size_t tail = 0;
  while (tail < a.size() - head && tail < b.size() - head && a[a.size() - 1 - tail] == b[b.size() - 1 - tail]) {
    m[a.size() - 1 - tail] = static_cast<ptrdiff_t>(b.size() - 1 - tail);
    ++tail;
  }
  const size_t n = a.size() - head - tail, k = b.size() - head - tail;
  if (n == 0 || k == 0 || n * k > (size_t{1} << 22)) return m;
  // lcs[i][j]: the LCS of a[head+i..] and b[head+j..] (suffixes), [n+1][k+1].
  std::vector<uint32_t> lcs((n + 1) * (k + 1), 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (k + 1) + j]; };
  for (size_t i = n; i-- > 0;)
    for (size_t j = k; j-- > 0;)
      at(i, j) = a[head + i] == b[head + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
  size_t i = 0, j = 0;
  while (i < n && j < k) {
    if (a[head + i] == b[head + j]) {
      m[head + i] = static_cast<ptrdiff_t>(head + j);
      ++i;
      ++j;
    } else if (at(i + 1, j) >= at(i, j + 1)) {
      ++i;
    } else {
      ++j;
    }
  }
  return m;
}

constexpr std::string_view kStateMagic = "picolm-volatile-lines 2";

bool hex16(const std::string& s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace

bool line_reads_as_clock(std::string_view line) {
  const bool date = has_numeric_date(line) || has_month_date(line);
  if (!date) return false;
  // A date with a time of day, under a short label ("Current time: 2026-11-26 09:44 (Thursday)").
  if (has_time(line)) return other_words(line) <= 6;
  // A date alone, or with a two-word label ("Today is Nov 26, 2026"); never a heading (a dated
  // section of a memory file is content).
  size_t first = 0;
  while (first < line.size() && std::isspace(static_cast<unsigned char>(line[first]))) ++first;
  return (first == line.size() || line[first] != '#') && other_words(line) <= 2;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) {
      out.push_back(text.substr(start));
      return out;
    }
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
}

VolatileLineTracker::VolatileLineTracker(VolatileOptions opts) : opts_(std::move(opts)) {
  if (!opts_.state_file.empty()) load();
}

size_t VolatileLineTracker::remembered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::vector<size_t> VolatileLineTracker::classify(std::string_view system_text, uint64_t conversation) {
  const std::vector<std::string_view> lines = split_lines(system_text);
  const size_t n = lines.size();
  std::vector<uint64_t> hashes(n);
  std::vector<uint8_t> movable(n), pattern(n, 0), changed(n, 0), carried(n, 0);
  size_t nonblank = 0, n_pattern = 0;
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = fnv1a(lines[i]);
    const bool blank = is_blank(lines[i]);
    nonblank += blank ? 0 : 1;
    movable[i] = !blank && lines[i].size() <= opts_.max_line_bytes;
    if (movable[i] && line_reads_as_clock(lines[i])) {
      pattern[i] = 1;
      ++n_pattern;
    }
  }
  // A prompt full of times (a timetable) is content: its lines are not a clock.
  if (n_pattern > opts_.max_lines) std::fill(pattern.begin(), pattern.end(), 0);
  // A clock usually comes with the other per-request facts in a short block of its own (between
  // horizontal rules, or the message's start or end): the sender, the session, the runtime. When
  // that block is short, all its value lines are volatile from the first request on, so a sender
  // that changes later costs nothing either (headings stay: they label the placeholders).
  {
    std::vector<uint8_t> block_lines(n, 0);
    size_t begin = 0;
    for (size_t i = 0; i <= n; ++i) {
      if (i < n && !is_rule(lines[i])) continue;
      bool has_clock = false, short_block = true;
      size_t values = 0;
      for (size_t j = begin; j < i; ++j) {
        has_clock = has_clock || pattern[j];
        if (is_blank(lines[j]) || is_heading(lines[j])) continue;
        ++values;
        short_block = short_block && lines[j].size() <= kBlockLineBytes;
      }
      if (has_clock && short_block && values <= opts_.max_lines) {
        for (size_t j = begin; j < i; ++j)
          if (movable[j] && !is_heading(lines[j])) block_lines[j] = 1;
      }
      begin = i + 1;
    }
    size_t n_block = 0;
    for (size_t i = 0; i < n; ++i) n_block += (pattern[i] || block_lines[i]) ? 1 : 0;
    if (n_block <= opts_.max_lines)
      for (size_t i = 0; i < n; ++i) pattern[i] = pattern[i] || block_lines[i];
  }

  std::lock_guard<std::mutex> lock(mu_);
  // The most similar prompt seen before (the most lines in common), of this conversation if it
  // has one: a line is learned as volatile only when it changed within one conversation (another
  // agent's prompt that differs in a few lines of its own is not a clock). Lines another prompt
  // learned are carried over from any similar prompt.
  auto best = entries_.end();
  size_t best_score = 0;
  bool best_same = false;
  bool learned = false;  // lines that changed against `best`: its layout is superseded
  std::vector<uint64_t> sorted = hashes;
  std::sort(sorted.begin(), sorted.end());
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    std::vector<uint64_t> theirs = it->hashes;
    std::sort(theirs.begin(), theirs.end());
    std::vector<uint64_t> common;
    std::set_intersection(sorted.begin(), sorted.end(), theirs.begin(), theirs.end(), std::back_inserter(common));
    const bool same = conversation != 0 && it->conversation == conversation;
    if ((same && !best_same) || (same == best_same && common.size() > best_score)) {
      best_score = common.size();
      best = it;
      best_same = same;
    }
  }
  if (best != entries_.end() && best_score * 2 >= n && nonblank > 0) {
    const std::vector<ptrdiff_t> m = match_lines(hashes, best->hashes);
    size_t n_changed = 0;
    bool small = true;
    for (size_t i = 0; i < n; ++i) {
      if (m[i] >= 0) {
        if (best->volatile_[static_cast<size_t>(m[i])] && movable[i]) carried[i] = 1;
      } else if (!is_blank(lines[i])) {
        changed[i] = 1;
        ++n_changed;
        small = small && movable[i];
      }
    }
    // A volatile line with another value is unmatched: where a run of unmatched lines faces a run
    // of the same length in the other prompt, the lines are each other's (another sender, the
    // same place), and the other's flags carry over.
    ptrdiff_t prev_i = -1, prev_j = -1;
    for (size_t i = 0; i <= n; ++i) {
      if (i < n && m[i] < 0) continue;
      const ptrdiff_t j = i < n ? m[i] : static_cast<ptrdiff_t>(best->hashes.size());
      if (static_cast<ptrdiff_t>(i) - prev_i == j - prev_j) {
        for (ptrdiff_t k = 1; prev_i + k < static_cast<ptrdiff_t>(i); ++k) {
          const size_t a = static_cast<size_t>(prev_i + k), b = static_cast<size_t>(prev_j + k);
          if (best->volatile_[b] && movable[a]) carried[a] = 1;
        }
      }
      prev_i = static_cast<ptrdiff_t>(i);
      prev_j = j;
    }
    if (!best_same || !small || n_changed > opts_.max_lines) std::fill(changed.begin(), changed.end(), 0);
    learned = std::find(changed.begin(), changed.end(), 1) != changed.end();
  }
  auto count_union = [&](bool with_carried) {
    size_t c = 0;
    for (size_t i = 0; i < n; ++i) c += (pattern[i] || changed[i] || (with_carried && carried[i])) ? 1 : 0;
    return c;
  };
  const bool with_carried = count_union(true) <= opts_.max_lines;
  std::vector<uint8_t> vol(n, 0);
  std::vector<size_t> out;
  if (count_union(with_carried) <= opts_.max_lines) {
    for (size_t i = 0; i < n; ++i) {
      vol[i] = (pattern[i] || changed[i] || (with_carried && carried[i])) ? 1 : 0;
      if (vol[i]) out.push_back(i);
    }
  }

  // Remember the prompt under its stable lines.
  uint64_t key = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    if (vol[i]) continue;
    key = fnv1a(lines[i], key);
    key = fnv1a("\n", key);
  }
  bool dirty = false;
  auto same = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.key == key && e.conversation == conversation; });
  if (same != entries_.end()) {
    dirty = same->volatile_ != vol;
    same->hashes = std::move(hashes);
    same->volatile_ = std::move(vol);
    entries_.splice(entries_.begin(), entries_, same);
  } else {
    // The prompt the new lines were learned from keeps no layout of its own: its next request is
    // this conversation's next turn (or one like it) and must find the flags learned here.
    if (learned && best != entries_.end() && out.size() > 0) entries_.erase(best);
    entries_.push_front(Entry{std::move(hashes), std::move(vol), key, conversation});
    while (entries_.size() > opts_.max_prompts) entries_.pop_back();
    dirty = true;
  }
  if (dirty && !opts_.state_file.empty()) save_locked();
  return out;
}

// State file: the magic line, then per prompt "P <key> <conversation> <lines>" and one
// "<hash> <0|1>" per line,
// then "C <checksum of everything before>". Anything else: ignored, the tracker starts empty.
void VolatileLineTracker::save_locked() const {
  std::string text(kStateMagic);
  text += '\n';
  char buf[64];
  for (const Entry& e : entries_) {
    std::snprintf(buf, sizeof buf, "P %016llx %016llx %zu\n", static_cast<unsigned long long>(e.key),
                  static_cast<unsigned long long>(e.conversation), e.hashes.size());
    text += buf;
    for (size_t i = 0; i < e.hashes.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%016llx %d\n", static_cast<unsigned long long>(e.hashes[i]), e.volatile_[i] ? 1 : 0);
      text += buf;
    }
  }
  std::snprintf(buf, sizeof buf, "C %016llx\n", static_cast<unsigned long long>(fnv1a(text)));
  text += buf;
  std::error_code ec;
  const std::filesystem::path path(opts_.state_file);
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::string tmp = opts_.state_file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f << text;
    if (!f.flush()) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

void VolatileLineTracker::load() {
  std::ifstream f(opts_.state_file, std::ios::binary);
  if (!f) return;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.size() > (size_t{64} << 20)) return;
  const size_t last = text.rfind("\nC ");
  if (last == std::string::npos || text.compare(0, kStateMagic.size(), kStateMagic) != 0) return;
  unsigned long long sum = 0;
  if (std::sscanf(text.c_str() + last + 1, "C %16llx", &sum) != 1 || sum != fnv1a(std::string_view(text).substr(0, last + 1)))
    return;
  std::istringstream in(text.substr(kStateMagic.size() + 1, last + 1 - kStateMagic.size() - 1));
  std::list<Entry> loaded;
  std::string tag;
  while (in >> tag) {
    if (tag != "P") return;
    std::string key_hex, conversation_hex;
    size_t lines = 0;
    if (!(in >> key_hex >> conversation_hex >> lines) || lines > (size_t{1} << 20) || key_hex.size() != 16 ||
        conversation_hex.size() != 16 || !hex16(key_hex) || !hex16(conversation_hex))
      return;
    Entry e;
    e.key = std::stoull(key_hex, nullptr, 16);
    e.conversation = std::stoull(conversation_hex, nullptr, 16);
    e.hashes.resize(lines);
    e.volatile_.resize(lines);
    for (size_t i = 0; i < lines; ++i) {
      std::string h;
      int v = 0;
      if (!(in >> h >> v) || h.size() != 16 || !hex16(h) || (v != 0 && v != 1)) return;
      e.hashes[i] = std::stoull(h, nullptr, 16);
      e.volatile_[i] = static_cast<uint8_t>(v);
    }
    if (loaded.size() < opts_.max_prompts) loaded.push_back(std::move(e));
  }
  entries_ = std::move(loaded);
}

uint64_t conversation_key(std::span<const ChatMessage> messages) {
  if (messages.size() < 2) return 0;
  uint64_t h = fnv1a(messages[1].role);
  h = fnv1a("\n", h);
  h = fnv1a(messages[1].content, h);
  return h == 0 ? 1 : h;
}

RelocatedMessages relocate_volatile_lines(std::span<const ChatMessage> messages, std::span<const size_t> lines) {
  RelocatedMessages r;
  r.messages.assign(messages.begin(), messages.end());
  if (lines.empty() || messages.empty() || messages[0].role != "system") return r;
  size_t note_at = 0;
  for (size_t i = messages.size(); i-- > 1;) {
    if (messages[i].role == "user" || messages[i].role == "tool") {
      note_at = i;
      break;
    }
  }
  if (note_at == 0) return r;
  const std::vector<std::string_view> sys = split_lines(messages[0].content);
  std::vector<uint8_t> vol(sys.size(), 0);
  for (size_t i : lines)
    if (i < sys.size()) vol[i] = 1;
  std::string system, note;
  for (size_t i = 0; i < sys.size(); ++i) {
    if (!vol[i]) {
      if (i > 0) system += '\n';
      system += sys[i];
      continue;
    }
    if (i > 0 && vol[i - 1]) {
      note += '\n';
    } else {
      if (i > 0) system += '\n';
      system += kVolatilePlaceholder;
      // The heading or label the run sits under ("## Current Time", "Session:"), so the note says
      // what the value is.
      size_t p = i;
      while (p > 0 && is_blank(sys[p - 1])) --p;
      if (!note.empty()) note += '\n';
      if (p > 0 && !vol[p - 1]) {
        std::string_view above = sys[p - 1];
        while (!above.empty() && std::isspace(static_cast<unsigned char>(above.back()))) above.remove_suffix(1);
        if (!above.empty() && (above.front() == '#' || above.back() == ':')) {
          note += above;
          note += '\n';
        }
      }
    }
    note += sys[i];
    r.moved.emplace_back(sys[i]);
  }
  if (r.moved.empty()) return r;
  r.messages[0].content = std::move(system);
  r.messages[note_at].content += "\n\n<current_context>\n" + note + "\n</current_context>";
  r.note_message = note_at;
  return r;
}

}  // namespace picolm
