// Prompt cache: RAM LRU of KV snapshots + a directory of KV files (docs/KV_CACHE_FORMAT.md).
#include "prompt_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace picolm {

static_assert(std::endian::native == std::endian::little,
              "the KV file format is little-endian and written with plain memcpy");

// ------------------------------------------------------------------------------------------------
// XXH64, from the xxHash specification (doc/xxhash_spec.md in Cyan4973/xxHash).

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t rd64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t rd32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}
inline uint64_t xxh_merge(uint64_t acc, uint64_t val) {
  acc ^= xxh_round(0, val);
  return acc * kP1 + kP4;
}
inline uint64_t xxh_avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t prompt_cache_xxh64(const void* data, size_t len, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  const uint8_t* const end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const uint8_t* const limit = end - 32;
    do {
      v1 = xxh_round(v1, rd64(p));
      v2 = xxh_round(v2, rd64(p + 8));
      v3 = xxh_round(v3, rd64(p + 16));
      v4 = xxh_round(v4, rd64(p + 24));
      p += 32;
    } while (p <= limit);
    h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
  } else {
    h = seed + kP5;
  }
  h += uint64_t(len);
  for (; p + 8 <= end; p += 8) {
    h ^= xxh_round(0, rd64(p));
    h = std::rotl(h, 27) * kP1 + kP4;
  }
  if (p + 4 <= end) {
    h ^= uint64_t(rd32(p)) * kP1;
    h = std::rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= uint64_t(*p) * kP5;
    h = std::rotl(h, 11) * kP1;
  }
  return xxh_avalanche(h);
}

namespace {

// ------------------------------------------------------------------------------------------------
// Identity, keys, file layout

constexpr char kMagic[8] = {'P', 'I', 'C', 'O', 'L', 'M', 'K', 'V'};
constexpr uint32_t kVersion = 3;  // 3: recurrent state of hybrid models in the tail
constexpr uint32_t kHeaderBytes = 80;
constexpr uint32_t kDtypeF16 = 1;
constexpr const char* kExt = ".pkv";
constexpr const char* kTmpExt = ".tmp";

// How the session keeps one layer's K/V. window 0: every position, position p at k_cache(l) + p * row.
// Else a sliding-window layer: a ring of `ring` slots (position p at slot p % ring), of which only the
// last `window` positions before n_past are ever read again, so that is all a cache entry keeps.
struct LayerKv {
  int32_t window = 0, ring = 0;
  // false: a recurrent layer of a hybrid model (no K/V; its state is in the tail), or a gemma4 layer
  // that reads another layer's K/V (window and ring are then 0: nothing of it is stored)
  bool kv = true;
  size_t row_bytes = 0;  // one position's K (or V) of this layer (layers differ in gemma4)
  size_t row() const { return row_bytes / 2; }  // the same in fp16 elements
};
// The layer table's entry of a recurrent layer (a window is never this large).
constexpr uint32_t kRecurrentLayer = 0xFFFFFFFFu;

struct Identity {
  uint64_t model_fp = 0;
  uint64_t tokenizer_fp = 0;
  uint32_t dtype = kDtypeF16;
  uint32_t n_layer = 0, n_head_kv = 0, head_dim = 0;
  std::vector<LayerKv> layers;
  uint32_t n_ring = 0;  // layers with a window
  uint32_t n_kv = 0;    // layers with K/V (all but a hybrid's recurrent layers)
  // Hybrid models: bytes of the recurrent state at the entry's end (Session::recurrent_state_bytes).
  uint32_t state_bytes = 0;

  // Positions of layer l an entry of n tokens keeps: all n, a window layer's last min(n, window), none
  // of a recurrent layer.
  size_t kept(uint32_t l, size_t n) const {
    return !layers[l].kv ? 0 : layers[l].window ? std::min(n, size_t(layers[l].window)) : n;
  }
  // Whether an entry restores only its own full length: window layers keep their last positions
  // before its end, a recurrent state is that of its end.
  bool exact() const { return n_ring > 0 || state_bytes > 0; }
  uint32_t layer_code(uint32_t l) const { return layers[l].kv ? uint32_t(layers[l].window) : kRecurrentLayer; }
  bool operator==(const Identity& o) const {
    return model_fp == o.model_fp && tokenizer_fp == o.tokenizer_fp && dtype == o.dtype && n_layer == o.n_layer &&
           n_head_kv == o.n_head_kv && head_dim == o.head_dim && windows_equal(o);
  }
  bool windows_equal(const Identity& o) const {
    return layers.size() == o.layers.size() &&
           std::equal(layers.begin(), layers.end(), o.layers.begin(),
                      [](const LayerKv& a, const LayerKv& b) { return a.window == b.window; });
  }
  // The 32 bytes at header offset 16: also the seed material of the prefix keys.
  void to_bytes(uint8_t out[32]) const {
    std::memcpy(out, &model_fp, 8);
    std::memcpy(out + 8, &tokenizer_fp, 8);
    std::memcpy(out + 16, &dtype, 4);
    std::memcpy(out + 20, &n_layer, 4);
    std::memcpy(out + 24, &n_head_kv, 4);
    std::memcpy(out + 28, &head_dim, 4);
  }
};

Identity identity_of(const Session& s) {
  const Model& m = s.model();
  const HParams& hp = m.hparams();
  Identity id;
  id.model_fp = m.fingerprint();
  // phi3 LongRoPE: the K rows of a session past the original context were rotated with the long
  // factors (model.cpp), so they are another model's as far as reuse goes.
  if (hp.rope_long_ctx > 0 && s.n_ctx() > hp.rope_long_ctx) id.model_fp ^= 0x4c6f6e67526f5045ull;  // "LongRoPE"
  id.tokenizer_fp = m.tokenizer().fingerprint();
  id.n_layer = uint32_t(hp.n_layer);
  id.n_head_kv = uint32_t(hp.n_head_kv);
  id.head_dim = uint32_t(hp.head_dim);
  id.layers.resize(id.n_layer);
  for (uint32_t l = 0; l < id.n_layer; ++l) {
    const size_t row = s.kv_row_bytes(int32_t(l));
    id.layers[l] = row ? LayerKv{s.kv_window(int32_t(l)), s.kv_ring(int32_t(l)), true, row} : LayerKv{0, 0, false, 0};
    id.n_ring += id.layers[l].kv && id.layers[l].window > 0;
    id.n_kv += id.layers[l].kv;
  }
  id.state_bytes = uint32_t(s.recurrent_state_bytes());
  return id;
}

// A window layer's positions [from, to) as at most two runs of contiguous slots (the ring wraps);
// fn(first element, number of elements). Other layers: one run.
template <class T, class Fn>
void for_runs(T* base, const LayerKv& kv, size_t row, size_t from, size_t to, const Fn& fn) {
  if (from >= to) return;
  if (kv.ring == 0) return fn(base + from * row, (to - from) * row);
  const size_t ring = size_t(kv.ring), s0 = from % ring, n = to - from;
  const size_t first = std::min(n, ring - s0);
  fn(base + s0 * row, first * row);
  if (first < n) fn(base, (n - first) * row);
}

// Prefix keys: a per-token chain so that a key depends only on the tokens, not on the block size:
//   state_0 = XXH64(identity bytes, 0);  state_{i+1} = rotl(state_i ^ (u32(tok_i) * P2), 31) * P1
//   key(n)  = XXH64-avalanche(state_n + n)
// Keys name files and pre-filter candidates; a match is always confirmed by comparing token ids.
class PrefixKeys {
 public:
  PrefixKeys(const Identity& id, std::span<const int32_t> toks) : states_(toks.size() + 1) {
    uint8_t b[32];
    id.to_bytes(b);
    states_[0] = prompt_cache_xxh64(b, 32, 0);
    for (size_t i = 0; i < toks.size(); ++i)
      states_[i + 1] = std::rotl(states_[i] ^ (uint64_t(uint32_t(toks[i])) * kP2), 31) * kP1;
  }
  uint64_t key(size_t n) const { return xxh_avalanche(states_[n] + uint64_t(n)); }

 private:
  std::vector<uint64_t> states_;
};

struct FileLayout {
  uint32_t n_tokens = 0, block_tokens = 0, n_blocks = 0;
  uint64_t meta_bytes = 0;   // header + tokens + block table + layer table + tail and meta checksums
  uint64_t block_bytes = 0;  // one KV block: over the layers without window, (K, V) * block_tokens * row_bytes
  uint64_t tail_off = 0;     // window layers' last positions: after the blocks
  uint64_t tail_bytes = 0;
  uint64_t file_bytes = 0;
  uint64_t layers_off() const { return kHeaderBytes + 4ull * n_tokens + 8ull * n_blocks; }
};

FileLayout layout_of(const Identity& id, uint32_t n_tokens, uint32_t block_tokens) {
  FileLayout L;
  L.n_tokens = n_tokens;
  L.block_tokens = block_tokens;
  L.n_blocks = block_tokens ? n_tokens / block_tokens : 0;
  L.meta_bytes = L.layers_off() + 4ull * id.n_layer + 8 + 8;
  for (uint32_t l = 0; l < id.n_layer; ++l)
    if (id.layers[l].kv && !id.layers[l].window) L.block_bytes += 2ull * block_tokens * id.layers[l].row_bytes;
  L.tail_off = L.meta_bytes + L.block_bytes * L.n_blocks;
  for (uint32_t l = 0; l < id.n_layer; ++l)
    if (id.layers[l].window) L.tail_bytes += 2 * uint64_t(id.kept(l, n_tokens)) * id.layers[l].row_bytes;
  if (id.state_bytes) L.tail_bytes += 8 + id.state_bytes;  // token-prefix hash, then the state
  L.file_bytes = L.tail_off + L.tail_bytes;
  return L;
}

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

// ------------------------------------------------------------------------------------------------
// Entries

struct RamSnapshot {
  std::vector<int32_t> tokens;
  // fp16, per layer [position][n_head_kv][head_dim] from offset[l]: positions [0, n), or for a window
  // layer [n - kept, n) (Identity::kept).
  std::vector<uint16_t> k, v;
  std::vector<size_t> offset;
  StateSnapshot state;  // hybrid models: the recurrent state at the snapshot's end
  uint64_t last_use = 0;
  size_t bytes() const { return (k.size() + v.size()) * 2 + tokens.size() * 4 + state.bytes.size(); }
};

struct DiskEntry {
  std::string name;  // file name inside the directory
  std::vector<int32_t> tokens;
  uint32_t block_tokens = 0;
  std::vector<uint64_t> block_sums;
  uint64_t tail_sum = 0;
  FileLayout layout;
};

// Longest usable prefix of `prompt` (<= limit, a multiple of `block`) that `tokens` share.
size_t match_len(std::span<const int32_t> tokens, std::span<const int32_t> prompt, size_t limit, size_t block) {
  const size_t n = std::min({tokens.size(), prompt.size(), limit});
  const size_t lcp = size_t(std::mismatch(tokens.begin(), tokens.begin() + n, prompt.begin()).first - tokens.begin());
  return block ? lcp / block * block : lcp;
}

// The prefix of `prompt` an entry holding `tokens` can restore: any shared block-aligned prefix,
// but with window layers only the entry's whole length (it keeps those layers' last positions
// before its end, not before earlier block boundaries).
size_t entry_match(const Identity& id, std::span<const int32_t> tokens, std::span<const int32_t> prompt, size_t limit,
                   size_t block) {
  const size_t m = match_len(tokens, prompt, limit, block);
  return id.exact() && m != tokens.size() ? 0 : m;
}

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

bool read_full(int fd, void* buf, size_t n, uint64_t off) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
    off += uint64_t(r);
  }
  return true;
}

bool write_full(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

// Parses and checks everything but the KV blocks. Returns "" if the file may be used, else why not.
std::string read_meta(int fd, const Identity& want, DiskEntry& e) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::string("fstat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const uint64_t size = uint64_t(st.st_size);
  uint8_t h[kHeaderBytes];
  if (size < kHeaderBytes || !read_full(fd, h, kHeaderBytes, 0)) return "truncated header";
  if (std::memcmp(h, kMagic, 8) != 0) return "bad magic";
  const uint32_t version = rd32(h + 8), header_bytes = rd32(h + 12);
  if (version != kVersion)
    return "format version " + std::to_string(version) + " (expected " + std::to_string(kVersion) + ")";
  if (header_bytes != kHeaderBytes) return "header size " + std::to_string(header_bytes);
  uint8_t want_id[32];
  want.to_bytes(want_id);
  if (rd64(h + 16) != rd64(want_id)) return "model fingerprint differs";
  if (rd64(h + 24) != rd64(want_id + 8)) return "tokenizer fingerprint differs";
  if (std::memcmp(h + 32, want_id + 16, 16) != 0) return "KV dtype or dimensions differ";
  const uint32_t n_tokens = rd32(h + 48), block_tokens = rd32(h + 52);
  if (block_tokens == 0 || n_tokens == 0 || n_tokens % block_tokens != 0 || n_tokens > (1u << 24))
    return "bad token count " + std::to_string(n_tokens) + " / block " + std::to_string(block_tokens);
  const FileLayout L = layout_of(want, n_tokens, block_tokens);
  if (rd64(h + 64) != L.file_bytes) return "header file size disagrees with the dimensions";
  if (rd32(h + 72) != want.n_ring) return "window layers differ";
  if (rd32(h + 76) != want.state_bytes) return "recurrent state size differs";
  if (size != L.file_bytes)
    return "file is " + std::to_string(size) + " bytes, expected " + std::to_string(L.file_bytes) + " (truncated?)";
  std::vector<uint8_t> meta(L.meta_bytes);
  if (!read_full(fd, meta.data(), meta.size(), 0)) return "short read";
  if (prompt_cache_xxh64(meta.data(), meta.size() - 8, 0) != rd64(meta.data() + meta.size() - 8))
    return "header checksum mismatch";
  e.tokens.resize(n_tokens);
  std::memcpy(e.tokens.data(), meta.data() + kHeaderBytes, 4ull * n_tokens);
  e.block_sums.resize(L.n_blocks);
  std::memcpy(e.block_sums.data(), meta.data() + kHeaderBytes + 4ull * n_tokens, 8ull * L.n_blocks);
  for (uint32_t l = 0; l < want.n_layer; ++l)
    if (rd32(meta.data() + L.layers_off() + 4ull * l) != want.layer_code(l))
      return "window or kind of layer " + std::to_string(l) + " differs";
  e.tail_sum = rd64(meta.data() + L.layers_off() + 4ull * want.n_layer);
  const PrefixKeys keys(want, e.tokens);
  if (rd64(h + 56) != keys.key(n_tokens)) return "prefix key does not match the token ids";
  e.block_tokens = block_tokens;
  e.layout = L;
  return "";
}

// Block checksum: XXH64 chained over the block's pieces in file order, seeded with the block index.
uint64_t block_checksum(const std::vector<std::pair<const uint16_t*, size_t>>& pieces, uint64_t block) {
  uint64_t h = block;
  for (const auto& [p, n] : pieces) h = prompt_cache_xxh64(p, n, h);
  return h;
}

bool pid_alive(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// Opens a cache file for reading. O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
// writer forever, with the store's mutex held (issue 15 item 4); on a regular file it changes nothing.
int open_for_reading(const std::string& p) { return ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC); }

// mkdir -p; true if `dir` is a directory afterwards.
bool make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0755);
  struct stat ds {};
  return ::stat(dir.c_str(), &ds) == 0 && S_ISDIR(ds.st_mode);
}

bool no_space(int err) { return err == ENOSPC || err == EDQUOT; }

}  // namespace

// ------------------------------------------------------------------------------------------------

struct PromptCacheStore::Impl {
  PromptCacheOptions opts;
  bool disk = false;

  mutable std::mutex mu;  // guards everything below
  std::list<std::shared_ptr<const RamSnapshot>> ram;  // most recently used first
  std::unordered_map<std::string, std::shared_ptr<const DiskEntry>> index;  // by file name
  struct timespec dir_mtime {};
  bool scanned = false;
  PromptCacheStats st;
  uint64_t tmp_seq = 0;
  // Names that are not regular files, with the inode seen: reported once, not on every scan.
  std::unordered_map<std::string, ino_t> ignored;
  time_t no_writes_until = 0;  // the filesystem was full even after evicting: pause writing

  using Logs = std::vector<std::pair<PromptCacheLogLevel, std::string>>;
  void emit(Logs& logs) const {
    if (opts.log)
      for (auto& [lvl, m] : logs) opts.log(lvl, m);
    logs.clear();
  }

  std::string path(const std::string& name) const { return opts.dir + "/" + name; }
  static std::string prefix_of(const Identity& id) { return hex16(id.model_fp) + "-"; }

  void reject_locked(const std::string& name, const std::string& why, Logs& logs) {
    ::unlink(path(name).c_str());
    index.erase(name);
    ++st.files_rejected;
    st.last_rejection = name + ": " + why;
    logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: ignoring and deleting " + path(name) + ": " + why);
  }

  // Brings the file index up to date if the directory changed since the last scan.
  void refresh_index_locked(const Identity& id, Logs& logs) {
    struct stat ds {};
    if (::stat(opts.dir.c_str(), &ds) != 0) {
      index.clear();
      return;
    }
    if (scanned && ds.st_mtim.tv_sec == dir_mtime.tv_sec && ds.st_mtim.tv_nsec == dir_mtime.tv_nsec) return;
    DIR* d = ::opendir(opts.dir.c_str());
    if (!d) return;
    const std::string mine = prefix_of(id);
    std::unordered_map<std::string, bool> seen;
    uint64_t total = 0;
    std::vector<std::string> fresh;
    while (dirent* de = ::readdir(d)) {
      const std::string name = de->d_name;
      if (name.size() <= 4 || name.compare(name.size() - 4, 4, kExt) != 0 || name[0] == '.') continue;
      struct stat fs {};
      if (::stat(path(name).c_str(), &fs) != 0) continue;  // vanished
      if (!S_ISREG(fs.st_mode)) {
        ignore_locked(name, fs.st_ino, logs);
        continue;
      }
      total += uint64_t(fs.st_size);
      if (name.rfind(mine, 0) != 0) continue;  // another model's file: not ours to judge
      seen[name] = true;
      if (!index.count(name)) fresh.push_back(name);
    }
    ::closedir(d);
    for (auto it = index.begin(); it != index.end();) it = seen.count(it->first) ? std::next(it) : index.erase(it);
    for (const std::string& name : fresh) {
      Fd f(open_for_reading(path(name)));
      if (f.fd < 0) continue;
      struct stat fs {};
      if (::fstat(f.fd, &fs) != 0) continue;
      if (!S_ISREG(fs.st_mode)) {  // replaced since the stat() above
        ignore_locked(name, fs.st_ino, logs);
        continue;
      }
      auto e = std::make_shared<DiskEntry>();
      e->name = name;
      std::string why = read_meta(f.fd, id, *e);
      if (why.empty() && name != mine + hex16(PrefixKeys(id, e->tokens).key(e->tokens.size())) + kExt)
        why = "file name does not match its contents";
      if (!why.empty()) {
        reject_locked(name, why, logs);
        continue;
      }
      index[name] = std::move(e);
    }
    st.disk_bytes = total;
    dir_mtime = ds.st_mtim;
    // Directory timestamps have coarse (clock-tick) resolution: a file renamed in by another
    // process in the same tick after our stat() would leave the mtime unchanged. Only trust an
    // mtime that is a few seconds old; until then, rescan (cheap: headers are read once per name).
    scanned = ::time(nullptr) - ds.st_mtim.tv_sec > 2;
  }

  // A *.pkv name that is not a regular file (a directory, a FIFO, a socket) is not a cache file:
  // it is never read (a FIFO would block) nor deleted (not ours to delete; a directory cannot be
  // unlink()ed anyway), and it is reported once per inode instead of on every scan.
  void ignore_locked(const std::string& name, ino_t ino, Logs& logs) {
    auto [it, fresh] = ignored.try_emplace(name, ino);
    if (!fresh && it->second == ino) return;
    it->second = ino;
    index.erase(name);
    ++st.files_ignored;
    logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: ignoring " + path(name) + ": not a regular file");
  }

  void touch_ram_locked(const RamSnapshot* s) {
    auto it = std::find_if(ram.begin(), ram.end(), [&](auto& p) { return p.get() == s; });
    if (it != ram.end()) ram.splice(ram.begin(), ram, it);
  }

  void evict_ram_locked() {
    uint64_t total = 0;
    for (auto& s : ram) total += s->bytes();
    while (total > opts.max_ram_bytes && !ram.empty()) {
      total -= ram.back()->bytes();
      ram.pop_back();
      ++st.ram_evictions;
    }
    st.ram_bytes = total;
    st.ram_entries = ram.size();
  }

  // Removes stale temp files and the least recently used files until the directory fits the
  // budget, and `must_free` bytes below its current size (a full filesystem). Holds an exclusive
  // flock on <dir>/.lock so that two processes do not both delete. Returns the bytes removed.
  uint64_t evict_disk(Logs& logs, uint64_t must_free = 0) {
    Fd lock(::open(path(".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX) != 0) {
      logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: cannot lock " + path(".lock") + ": " + std::strerror(errno));
      return 0;
    }
    DIR* d = ::opendir(opts.dir.c_str());
    if (!d) return 0;
    struct F {
      std::string name;
      uint64_t size;
      struct timespec mtime;
    };
    std::vector<F> files;
    uint64_t total = 0;
    const time_t now = ::time(nullptr);
    while (dirent* de = ::readdir(d)) {
      const std::string name = de->d_name;
      struct stat fs {};
      if (name.size() > 4 && name[0] == '.' && name.compare(name.size() - 4, 4, kTmpExt) == 0) {
        // A writer's file; stale when its pid is gone or it is old.
        if (::stat(path(name).c_str(), &fs) != 0) continue;
        // ".<stem>.<pid>.<unique>.tmp"; the stem has no dots.
        const size_t dot = name.find('.', 1);
        const long pid = dot == std::string::npos ? 0 : std::strtol(name.c_str() + dot + 1, nullptr, 10);
        if (!pid_alive(pid) || now - fs.st_mtim.tv_sec > opts.stale_temp_seconds) {
          if (::unlink(path(name).c_str()) == 0)
            logs.emplace_back(PromptCacheLogLevel::Info, "prompt cache: removed stale temporary file " + path(name));
        }
        continue;
      }
      if (name.size() <= 4 || name[0] == '.' || name.compare(name.size() - 4, 4, kExt) != 0) continue;
      if (::stat(path(name).c_str(), &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
      files.push_back({name, uint64_t(fs.st_size), fs.st_mtim});
      total += uint64_t(fs.st_size);
    }
    ::closedir(d);
    std::sort(files.begin(), files.end(), [](const F& a, const F& b) {
      return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
    });
    const uint64_t limit = std::min(opts.max_disk_bytes, total > must_free ? total - must_free : 0);
    uint64_t removed = 0;
    for (const F& f : files) {
      if (total <= limit) break;
      if (::unlink(path(f.name).c_str()) == 0 || errno == ENOENT) {
        total -= f.size;
        removed += f.size;
        ++st.disk_evictions;
        index.erase(f.name);
        logs.emplace_back(PromptCacheLogLevel::Debug, "prompt cache: evicted " + path(f.name));
      }
    }
    st.disk_bytes = total;
    return removed;
  }

  // Copies positions [from, n) of a snapshot into the session; window layers get the snapshot's
  // last positions (then n is the snapshot's length: entry_match).
  static void copy_from_ram(const RamSnapshot& s, Session& session, const Identity& id, size_t from, size_t n) {
    for (uint32_t l = 0; l < id.n_layer; ++l) {
      if (!id.layers[l].kv) continue;
      const size_t total = s.tokens.size(), stored_first = total - id.kept(l, total);  // 0 unless a window
      const size_t first = id.layers[l].window ? stored_first : from;
      const uint16_t* sk = s.k.data() + s.offset[l] + (first - stored_first) * id.layers[l].row();
      const uint16_t* sv = s.v.data() + s.offset[l] + (first - stored_first) * id.layers[l].row();
      for_runs(session.k_cache(int32_t(l)), id.layers[l], id.layers[l].row(), first, n, [&](uint16_t* p, size_t cnt) {
        std::memcpy(p, sk, cnt * 2);
        sk += cnt;
      });
      for_runs(session.v_cache(int32_t(l)), id.layers[l], id.layers[l].row(), first, n, [&](uint16_t* p, size_t cnt) {
        std::memcpy(p, sv, cnt * 2);
        sv += cnt;
      });
    }
  }

  // Loads blocks [from/B, n/B) of a file into the session (positions below `from` are already
  // there; `from` is a multiple of B), and with window layers the file's tail (n is then the
  // file's length). Returns n on success; on a bad file sets `why` and returns `from`: positions
  // from `from` on may then hold garbage and must be dropped by the caller (window layers are
  // only written once their tail has verified, so their older positions are never damaged).
  // Hybrid models: `state` receives the recurrent state at n (the tail's last part).
  static size_t load_file(int fd, const DiskEntry& e, Session& session, const Identity& id, size_t from, size_t n,
                          std::string& why, StateSnapshot& state) {
    const size_t B = e.block_tokens;
    std::vector<std::pair<const uint16_t*, size_t>> pieces;
    std::vector<iovec> iov;
    for (size_t b = from / B; b < n / B; ++b) {
      pieces.clear();
      iov.clear();
      for (uint32_t l = 0; l < id.n_layer; ++l) {
        if (id.layers[l].window || !id.layers[l].kv) continue;  // in the tail, or no K/V
        uint16_t* kp = session.k_cache(int32_t(l)) + b * B * id.layers[l].row();
        uint16_t* vp = session.v_cache(int32_t(l)) + b * B * id.layers[l].row();
        pieces.push_back({kp, B * id.layers[l].row_bytes});
        pieces.push_back({vp, B * id.layers[l].row_bytes});
        iov.push_back({kp, B * id.layers[l].row_bytes});
        iov.push_back({vp, B * id.layers[l].row_bytes});
      }
      // Scatter-read straight into the session (no staging copy), then verify in place.
      uint64_t off = e.layout.meta_bytes + b * e.layout.block_bytes;
      size_t want = e.layout.block_bytes, vi = 0;
      while (want > 0) {
        const int cnt = int(std::min<size_t>(iov.size() - vi, 1024));
        const ssize_t r = ::preadv(fd, iov.data() + vi, cnt, off_t(off));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          why = "short read in KV block " + std::to_string(b);
          return from;
        }
        want -= size_t(r);
        off += uint64_t(r);
        for (size_t got = size_t(r); got > 0;) {
          if (got >= iov[vi].iov_len) {
            got -= iov[vi].iov_len;
            ++vi;
          } else {
            iov[vi].iov_base = static_cast<uint8_t*>(iov[vi].iov_base) + got;
            iov[vi].iov_len -= got;
            got = 0;
          }
        }
      }
      if (block_checksum(pieces, b) != e.block_sums[b]) {
        why = "checksum mismatch in KV block " + std::to_string(b);
        return from;  // nothing of a bad file is used, not even its blocks that verified
      }
    }
    if (!id.exact()) return n;
    // The tail is staged: its ring slots may alias live positions below `from`.
    std::vector<uint16_t> tail(e.layout.tail_bytes / 2);
    if (!read_full(fd, tail.data(), e.layout.tail_bytes, e.layout.tail_off)) {
      why = "short read in the tail";
      return from;
    }
    pieces.clear();
    size_t off = 0;
    for (size_t l = 0; l < id.n_layer; ++l) {
      if (!id.layers[l].window) continue;
      for (int kv = 0; kv < 2; ++kv, off += id.kept(uint32_t(l), n) * id.layers[l].row())
        pieces.push_back({tail.data() + off, id.kept(uint32_t(l), n) * id.layers[l].row_bytes});
    }
    if (id.state_bytes) pieces.push_back({tail.data() + off, 8 + id.state_bytes});
    if (block_checksum(pieces, e.layout.n_blocks) != e.tail_sum) {
      why = "checksum mismatch in the tail (window layers, recurrent state)";
      return from;
    }
    if (id.state_bytes) {
      const auto* p = reinterpret_cast<const uint8_t*>(tail.data() + off);
      state.n_past = int32_t(n);
      std::memcpy(&state.tokens_hash, p, 8);
      state.bytes.assign(p + 8, p + 8 + id.state_bytes);
    }
    for (size_t l = 0, i = 0; l < id.n_layer; ++l) {
      if (!id.layers[l].window) continue;
      for (int kv = 0; kv < 2; ++kv, ++i) {
        const uint16_t* src = pieces[i].first;
        uint16_t* base = kv ? session.v_cache(int32_t(l)) : session.k_cache(int32_t(l));
        for_runs(base, id.layers[l], id.layers[l].row(), n - id.kept(uint32_t(l), n), n, [&](uint16_t* p, size_t cnt) {
          std::memcpy(p, src, cnt * 2);
          src += cnt;
        });
      }
    }
    return n;
  }

  // The pieces of the window layers' tail of a session's first n positions, in file order (per
  // window layer K then V, each up to two runs of ring slots).
  static std::vector<std::pair<const uint16_t*, size_t>> tail_pieces(Session& session, const Identity& id, size_t n) {
    std::vector<std::pair<const uint16_t*, size_t>> pieces;
    for (uint32_t l = 0; l < id.n_layer; ++l) {
      if (!id.layers[l].window) continue;
      for (uint16_t* base : {session.k_cache(int32_t(l)), session.v_cache(int32_t(l))})
        for_runs(base, id.layers[l], id.layers[l].row(), n - id.kept(l, n), n,
                 [&](uint16_t* p, size_t cnt) { pieces.push_back({p, cnt * 2}); });
    }
    return pieces;
  }

  // Writes through the test hook (PromptCacheOptions::write_fault); false with errno set on failure.
  bool write_part(int fd, const void* buf, size_t n, uint64_t& written) const {
    if (opts.write_fault)
      if (const int e = opts.write_fault(written + n)) {
        errno = e;
        return false;
      }
    if (!write_full(fd, buf, n)) return false;
    written += n;
    return true;
  }

  // On failure returns false and sets `err` to the errno (ENOSPC: the caller may evict and retry).
  // `state`: hybrid models' recurrent state at toks.size() (ignored otherwise).
  bool write_file(Session& session, const Identity& id, std::span<const int32_t> toks, const StateSnapshot& state,
                  const std::string& name, Logs& logs, int& err) {
    err = 0;
    const uint32_t B = uint32_t(opts.block_tokens);
    const FileLayout L = layout_of(id, uint32_t(toks.size()), B);
    // Block checksums first (they go into the header), from the session's K/V.
    std::vector<uint64_t> sums(L.n_blocks);
    std::vector<std::pair<const uint16_t*, size_t>> pieces;
    for (size_t b = 0; b < L.n_blocks; ++b) {
      pieces.clear();
      for (uint32_t l = 0; l < id.n_layer; ++l) {
        if (id.layers[l].window || !id.layers[l].kv) continue;
        pieces.push_back({session.k_cache(int32_t(l)) + b * B * id.layers[l].row(), B * id.layers[l].row_bytes});
        pieces.push_back({session.v_cache(int32_t(l)) + b * B * id.layers[l].row(), B * id.layers[l].row_bytes});
      }
      sums[b] = block_checksum(pieces, b);
    }
    // The window layers' tail, gathered from the ring (whose runs may wrap) into file order and
    // hashed in the pieces the reader uses: per window layer, K then V.
    const auto runs = tail_pieces(session, id, toks.size());
    std::vector<uint16_t> tail(L.tail_bytes / 2);
    size_t off = 0;
    for (const auto& [p, bytes] : runs) {
      std::memcpy(tail.data() + off, p, bytes);
      off += bytes / 2;
    }
    if (id.state_bytes) {  // after the window rows: the token-prefix hash, then the state
      auto* p = reinterpret_cast<uint8_t*>(tail.data() + off);
      std::memcpy(p, &state.tokens_hash, 8);
      std::memcpy(p + 8, state.bytes.data(), id.state_bytes);
    }
    pieces.clear();
    off = 0;
    for (size_t l = 0; l < id.n_layer; ++l) {
      if (!id.layers[l].window) continue;
      for (int kv = 0; kv < 2; ++kv, off += id.kept(uint32_t(l), toks.size()) * id.layers[l].row())
        pieces.push_back({tail.data() + off, id.kept(uint32_t(l), toks.size()) * id.layers[l].row_bytes});
    }
    if (id.state_bytes) pieces.push_back({tail.data() + off, 8 + id.state_bytes});
    const uint64_t tail_sum = block_checksum(pieces, L.n_blocks);
    std::vector<uint8_t> meta(L.meta_bytes, 0);
    std::memcpy(meta.data(), kMagic, 8);
    std::memcpy(meta.data() + 8, &kVersion, 4);
    std::memcpy(meta.data() + 12, &kHeaderBytes, 4);
    id.to_bytes(meta.data() + 16);
    const uint32_t n = uint32_t(toks.size());
    std::memcpy(meta.data() + 48, &n, 4);
    std::memcpy(meta.data() + 52, &B, 4);
    const uint64_t key = PrefixKeys(id, toks).key(toks.size());
    std::memcpy(meta.data() + 56, &key, 8);
    std::memcpy(meta.data() + 64, &L.file_bytes, 8);
    std::memcpy(meta.data() + kHeaderBytes, toks.data(), 4ull * n);
    std::memcpy(meta.data() + kHeaderBytes + 4ull * n, sums.data(), 8ull * L.n_blocks);
    std::memcpy(meta.data() + 72, &id.n_ring, 4);
    std::memcpy(meta.data() + 76, &id.state_bytes, 4);
    for (uint32_t l = 0; l < id.n_layer; ++l) {
      const uint32_t w = id.layer_code(l);
      std::memcpy(meta.data() + L.layers_off() + 4ull * l, &w, 4);
    }
    std::memcpy(meta.data() + L.layers_off() + 4ull * id.n_layer, &tail_sum, 8);
    const uint64_t msum = prompt_cache_xxh64(meta.data(), meta.size() - 8, 0);
    std::memcpy(meta.data() + meta.size() - 8, &msum, 8);

    uint64_t seq;
    {
      std::lock_guard<std::mutex> lk(mu);
      seq = ++tmp_seq;
    }
    // ".<stem>.<pid>.<store address>-<seq>.tmp": unique per process, per store and per call; the
    // pid lets eviction recognise a dead writer's leftovers.
    char uniq[64];
    std::snprintf(uniq, sizeof uniq, ".%ld.%" PRIxPTR "-%" PRIu64, long(::getpid()), uintptr_t(this), seq);
    const std::string tmp = path("." + name.substr(0, name.size() - 4) + uniq + kTmpExt);
    Fd f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (f.fd < 0 && errno == ENOENT && make_dirs(opts.dir)) {
      // Someone deleted the cache directory while we run: make it again (issue 15 item 10).
      logs.emplace_back(PromptCacheLogLevel::Info, "prompt cache: created " + opts.dir + " again (it was removed)");
      f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (f.fd < 0) {
      err = errno;
      logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: cannot create " + tmp + ": " + std::strerror(err));
      return false;
    }
    uint64_t written = 0;
    bool ok = write_part(f.fd, meta.data(), meta.size(), written);
    if (ok && opts.inside_write) opts.inside_write(tmp, L.file_bytes);
    for (size_t b = 0; ok && b < L.n_blocks; ++b)
      for (uint32_t l = 0; ok && l < id.n_layer; ++l) {
        if (id.layers[l].window || !id.layers[l].kv) continue;
        ok = write_part(f.fd, session.k_cache(int32_t(l)) + b * B * id.layers[l].row(), B * id.layers[l].row_bytes, written) &&
             write_part(f.fd, session.v_cache(int32_t(l)) + b * B * id.layers[l].row(), B * id.layers[l].row_bytes, written);
      }
    if (ok) ok = write_part(f.fd, tail.data(), L.tail_bytes, written);
    // fsync before rename: after a crash the final name holds either nothing or the whole file.
    if (ok) ok = ::fsync(f.fd) == 0;
    if (ok) ok = ::rename(tmp.c_str(), path(name).c_str()) == 0;
    if (!ok) {
      err = errno;
      logs.emplace_back(no_space(err) ? PromptCacheLogLevel::Info : PromptCacheLogLevel::Warn,
                        "prompt cache: writing " + tmp + " failed: " + std::strerror(err));
      ::unlink(tmp.c_str());
      return false;
    }
    Fd dfd(::open(opts.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd.fd >= 0) ::fsync(dfd.fd);  // make the rename itself durable
    return true;
  }

  // write_file; on a full filesystem (issue 15 item 10) evicts least recently used files worth the
  // new file's size and tries once more, and if that fails too stops writing for a minute (reads
  // go on) instead of failing every request's write.
  bool write_file_or_make_room(Session& session, const Identity& id, std::span<const int32_t> toks,
                               const StateSnapshot& state, const std::string& name, uint64_t bytes, Logs& logs) {
    int err = 0;
    if (write_file(session, id, toks, state, name, logs, err)) return true;
    if (!no_space(err)) return false;
    uint64_t freed = 0;
    {
      std::lock_guard<std::mutex> lk(mu);
      ++st.disk_full;
      freed = evict_disk(logs, bytes);
    }
    if (freed > 0 && write_file(session, id, toks, state, name, logs, err)) return true;
    std::lock_guard<std::mutex> lk(mu);
    if (no_space(err)) {
      if (freed > 0) ++st.disk_full;
      no_writes_until = ::time(nullptr) + 60;
      logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: " + opts.dir + " is full (" + std::strerror(err) +
                                                       ") after evicting " + std::to_string(freed) +
                                                       " bytes; not writing for 60 s");
    }
    return false;
  }
};

// ------------------------------------------------------------------------------------------------

PromptCacheStore::PromptCacheStore(PromptCacheOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.opts = std::move(opts);
  if (I.opts.block_tokens <= 0) I.opts.block_tokens = PromptCacheOptions{}.block_tokens;
  while (I.opts.dir.size() > 1 && I.opts.dir.back() == '/') I.opts.dir.pop_back();
  if (!I.opts.dir.empty()) {
    I.disk = make_dirs(I.opts.dir) && ::access(I.opts.dir.c_str(), W_OK) == 0;
    if (!I.disk && I.opts.log)
      I.opts.log(PromptCacheLogLevel::Warn, "prompt cache: directory " + I.opts.dir + " is not usable; RAM only");
  }
  if (I.disk) {
    Impl::Logs logs;
    {
      std::lock_guard<std::mutex> lk(I.mu);
      I.evict_disk(logs);
    }
    I.emit(logs);
  }
}

PromptCacheStore::~PromptCacheStore() = default;

std::string PromptCacheStore::default_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/picolm";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/picolm";
  return "";
}

const PromptCacheOptions& PromptCacheStore::options() const { return impl_->opts; }

PromptCacheStats PromptCacheStore::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->st;
}

void PromptCacheStore::clear_ram() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->ram.clear();
  impl_->st.ram_bytes = impl_->st.ram_entries = 0;
}

size_t PromptCacheStore::restore(Session& session, std::span<const int32_t> prompt) {
  Impl& I = *impl_;
  if (prompt.empty()) {
    session.truncate(0);
    return 0;
  }
  const Identity id = identity_of(session);
  const size_t limit = std::min(prompt.size() - 1, size_t(session.n_ctx()));
  // Less than the common prefix if window layers no longer hold what it needs, or (hybrids) back to
  // the latest recurrent-state snapshot before it.
  session.truncate(int32_t(match_len(session.tokens(), prompt, limit, 0)));
  size_t live = size_t(session.n_past());

  Impl::Logs logs;
  std::shared_ptr<const RamSnapshot> ram_best;
  size_t ram_len = 0;
  std::vector<std::pair<size_t, std::shared_ptr<const DiskEntry>>> disk;
  {
    std::lock_guard<std::mutex> lk(I.mu);
    for (auto& s : I.ram) {
      const size_t m = entry_match(id, s->tokens, prompt, limit, size_t(I.opts.block_tokens));
      if (m > ram_len) ram_len = m, ram_best = s;
    }
    if (I.disk) {
      I.refresh_index_locked(id, logs);
      for (auto& [name, e] : I.index) {
        const size_t m = entry_match(id, e->tokens, prompt, limit, e->block_tokens);
        if (m > std::max(live, ram_len)) disk.emplace_back(m, e);
      }
    }
  }
  std::sort(disk.begin(), disk.end(), [](auto& a, auto& b) { return a.first > b.first; });

  size_t result = live;
  enum { kLive, kRam, kDisk } source = kLive;
  for (auto& [m, e] : disk) {
    if (m <= std::max(live, ram_len)) break;
    const std::string p = I.path(e->name);
    Fd f(open_for_reading(p));
    if (f.fd < 0) {  // evicted or replaced by another process: a miss, not an error
      std::lock_guard<std::mutex> lk(I.mu);
      I.index.erase(e->name);
      continue;
    }
    DiskEntry now;  // re-read: the name may now hold another (equally valid) file
    std::string why = read_meta(f.fd, id, now);
    size_t got = live;
    if (why.empty()) {
      const size_t now_m = entry_match(id, now.tokens, prompt, limit, now.block_tokens);
      if (now_m < m || (id.exact() && now_m != m)) {
        std::lock_guard<std::mutex> lk(I.mu);
        I.index.erase(e->name);
        continue;
      }
      // Blocks from `from` on are loaded; the session's K/V below it are the live prefix's. (A hybrid
      // is not truncated there: truncate would go back to a state snapshot, the file brings the state.)
      if (!id.state_bytes) session.truncate(int32_t(live / now.block_tokens * now.block_tokens));
      const size_t from = id.state_bytes ? live / now.block_tokens * now.block_tokens : size_t(session.n_past());
      StateSnapshot state;
      got = I.load_file(f.fd, now, session, id, from, m, why, state);
      if (id.state_bytes) {
        // The state is the entry's end's: all of it or nothing (the live state is overwritten or stale).
        if (got == m) {
          session.set_cached_tokens(prompt.first(got));
          if (Status st = session.restore_state(state); !st) why = "recurrent state: " + st.error();
        }
        if (!why.empty()) {
          session.truncate(0);
          got = 0;
        }
      } else {
        session.set_cached_tokens(prompt.first(got));
      }
      live = got;
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> lk(I.mu);
      I.reject_locked(e->name, why, logs);
      continue;
    }
    ::utimensat(AT_FDCWD, p.c_str(), nullptr, 0);  // LRU: last use = mtime
    result = m;
    source = kDisk;
    break;
  }
  if (source == kLive) {
    result = live;  // possibly lowered to a block boundary by a file that failed to load
    if (ram_len > live) {
      Impl::copy_from_ram(*ram_best, session, id, live, ram_len);
      session.set_cached_tokens(prompt.first(ram_len));
      result = ram_len;
      source = kRam;
      if (id.state_bytes && !session.restore_state(ram_best->state)) {  // cannot happen: same tokens
        session.truncate(0);
        result = 0;
        source = kLive;
      }
    }
  }
  {
    std::lock_guard<std::mutex> lk(I.mu);
    if (source == kRam) {
      I.touch_ram_locked(ram_best.get());
      ++I.st.ram_hits;
      I.st.tokens_restored += result;
    } else if (source == kDisk) {
      ++I.st.disk_hits;
      I.st.tokens_restored += result;
    } else if (result > 0) {
      ++I.st.live_hits;
    } else {
      ++I.st.misses;
    }
  }
  I.emit(logs);
  return result;
}

size_t PromptCacheStore::store(Session& session, size_t stable_len) {
  Impl& I = *impl_;
  const size_t B = size_t(I.opts.block_tokens);
  const size_t n = std::min(stable_len, size_t(session.n_past())) / B * B;
  if (n == 0) return 0;
  const Identity id = identity_of(session);
  // Hybrid models: an entry carries the recurrent state at its end, which the session has only at
  // n_past() or at a kept snapshot (prefill_with_cache keeps one at the stored length).
  StateSnapshot state;
  if (id.state_bytes) {
    auto at = session.state_at(int32_t(n));
    if (!at) {
      if (I.opts.log)
        I.opts.log(PromptCacheLogLevel::Debug, "prompt cache: no recurrent-state snapshot at " + std::to_string(n) +
                                                   " tokens; not stored (keep one there: Session::keep_state_snapshot)");
      return 0;
    }
    state = std::move(*at);
  }
  const std::span<const int32_t> toks(session.tokens().data(), n);
  Impl::Logs logs;
  for (uint32_t l = 0; l < id.n_layer; ++l)
    if (id.layers[l].window && size_t(session.kv_ring_first(int32_t(l))) > n - id.kept(l, n)) {
      // Decoding went on long enough to reuse the ring slots of the prefix's last positions.
      if (I.opts.log)
        I.opts.log(PromptCacheLogLevel::Debug, "prompt cache: the window layers no longer hold the " +
                                                   std::to_string(n) + "-token prefix; not stored (store before decoding)");
      return 0;
    }

  // RAM tier.
  if (I.opts.max_ram_bytes > 0) {
    bool have = false;
    {
      std::lock_guard<std::mutex> lk(I.mu);
      for (auto& s : I.ram)
        if (entry_match(id, s->tokens, toks, n, 0) == n) {
          I.touch_ram_locked(s.get());
          have = true;
          break;
        }
    }
    if (!have) {
      auto s = std::make_shared<RamSnapshot>();
      s->tokens.assign(toks.begin(), toks.end());
      s->state = state;
      size_t elems = 0;
      s->offset.resize(id.n_layer);
      for (uint32_t l = 0; l < id.n_layer; ++l) {
        s->offset[l] = elems;
        elems += id.kept(l, n) * id.layers[l].row();
      }
      if (s->bytes() + 2 * elems * 2 <= I.opts.max_ram_bytes) {
        s->k.resize(elems);
        s->v.resize(elems);
        for (uint32_t l = 0; l < id.n_layer; ++l) {
          if (!id.layers[l].kv) continue;
          uint16_t* dk = s->k.data() + s->offset[l];
          uint16_t* dv = s->v.data() + s->offset[l];
          for_runs(session.k_cache(int32_t(l)), id.layers[l], id.layers[l].row(), n - id.kept(l, n), n, [&](uint16_t* p, size_t cnt) {
            std::memcpy(dk, p, cnt * 2);
            dk += cnt;
          });
          for_runs(session.v_cache(int32_t(l)), id.layers[l], id.layers[l].row(), n - id.kept(l, n), n, [&](uint16_t* p, size_t cnt) {
            std::memcpy(dv, p, cnt * 2);
            dv += cnt;
          });
        }
        std::lock_guard<std::mutex> lk(I.mu);
        // A snapshot that is a prefix of the new one serves nothing the new one does not (unless
        // window layers tie each entry to its own length).
        I.ram.remove_if([&](const std::shared_ptr<const RamSnapshot>& o) {
          return !id.exact() && o->tokens.size() <= n && match_len(o->tokens, toks, n, 0) == o->tokens.size();
        });
        I.ram.push_front(std::move(s));
        ++I.st.ram_snapshots;
        I.evict_ram_locked();
      }
    }
  }

  // Disk tier.
  if (I.disk) {
    const std::string name = Impl::prefix_of(id) + hex16(PrefixKeys(id, toks).key(n)) + kExt;
    std::string covering;
    std::vector<std::string> covered;  // shorter files whose tokens are a prefix of ours
    {
      std::lock_guard<std::mutex> lk(I.mu);
      I.refresh_index_locked(id, logs);
      for (auto& [fname, e] : I.index) {
        if (entry_match(id, e->tokens, toks, n, 0) == n && n % e->block_tokens == 0) covering = fname;
        else if (!id.exact() && e->tokens.size() < n && e->tokens.size() % B == 0 &&
                 match_len(e->tokens, toks, n, 0) == e->tokens.size())
          covered.push_back(fname);  // the new file serves exactly this prefix too
      }
    }
    const FileLayout L = layout_of(id, uint32_t(n), uint32_t(B));
    if (!covering.empty()) {
      ::utimensat(AT_FDCWD, I.path(covering).c_str(), nullptr, 0);
    } else if (L.file_bytes > I.opts.max_disk_bytes) {
      logs.emplace_back(PromptCacheLogLevel::Debug, "prompt cache: " + std::to_string(L.file_bytes) +
                                                        "-byte prefix exceeds the disk budget; not written");
    } else if (::time(nullptr) < I.no_writes_until) {
      logs.emplace_back(PromptCacheLogLevel::Debug, "prompt cache: the filesystem was full; not written");
    } else if (I.write_file_or_make_room(session, id, toks, state, name, L.file_bytes, logs)) {
      std::lock_guard<std::mutex> lk(I.mu);
      ++I.st.files_written;
      for (const std::string& c : covered) {
        ::unlink(I.path(c).c_str());
        I.index.erase(c);
      }
      I.evict_disk(logs);
    }
  }
  I.emit(logs);
  return n;
}

// ------------------------------------------------------------------------------------------------

Result<PrefillWithCacheResult> prefill_with_cache(PromptCacheStore* store, Session& session,
                                                  std::span<const int32_t> prompt, size_t stable_len,
                                                  const PrefillWithCacheOptions& opts) {
  PrefillWithCacheResult r;
  if (prompt.empty()) return Error{"prefill: empty prompt"};
  if (store) {
    r.cached_tokens = store->restore(session, prompt);
  } else {
    // No store: still reuse the session's own live prefix (leave one token to produce logits).
    const auto& t = session.tokens();
    const size_t lim = std::min(t.size(), prompt.size() - 1);
    session.truncate(int32_t(std::mismatch(t.begin(), t.begin() + lim, prompt.begin()).first - t.begin()));
    r.cached_tokens = size_t(session.n_past());  // 0 when window layers' rings cannot go back that far
  }
  const bool store_now = store && !opts.defer_store;
  // Window layers: the stable prefix must be stored while the rings still hold its last window, so
  // the evaluation is split at the stored length (a block boundary) with the store in between.
  // Not with all_logits (logits_at covers one eval call), and never leaving a 1-token eval (its
  // matmuls take the decode path, whose rounding differs from a batch's).
  size_t split = r.cached_tokens;
  bool windows = false;
  for (int32_t l = 0; l < session.model().hparams().n_layer; ++l) windows = windows || session.kv_window(l) > 0;
  if (store_now && windows && !opts.all_logits) {
    const size_t B = size_t(store->options().block_tokens);
    const size_t at = std::min(stable_len, prompt.size()) / B * B;
    if (at >= r.cached_tokens + 2 && at + 2 <= prompt.size()) split = at;
  }
  // Hybrid models: the prefix is stored with the recurrent state at its end, which exists only while
  // the evaluation stands there: split at the stored length as for window layers, keep a snapshot
  // there (for the live session's next turn), store; and keep one at the end of the prompt.
  const bool hybrid = session.has_recurrent_state();
  if (hybrid && !opts.all_logits) {
    const size_t B = store ? size_t(store->options().block_tokens) : 1;
    const size_t at = std::min(stable_len, prompt.size()) / B * B;
    if (at >= r.cached_tokens + 2 && at + 2 <= prompt.size()) split = at;
  }
  const size_t total = prompt.size() - r.cached_tokens;
  auto eval_part = [&](size_t from, size_t to) -> Status {
    std::function<void(size_t, size_t)> progress;
    if (opts.progress)
      progress = [&, from](size_t done, size_t) { opts.progress(from - r.cached_tokens + done, total); };
    return session.eval(prompt.subspan(from, to - from), opts.all_logits, progress);
  };
  if (split > r.cached_tokens) {
    Status s = eval_part(r.cached_tokens, split);
    if (!s) return Error{s.error()};
    if (hybrid) session.keep_state_snapshot();
    if (store_now) r.stored_tokens = store->store(session, split);
  }
  Status s = eval_part(split, prompt.size());
  if (!s) return Error{s.error()};
  if (hybrid) session.keep_state_snapshot();
  r.evaluated_tokens = total;
  if (store_now && split == r.cached_tokens)
    r.stored_tokens = store->store(session, std::min(stable_len, prompt.size()));
  return r;
}

}  // namespace picolm
