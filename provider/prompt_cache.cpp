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
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 80;
constexpr uint32_t kDtypeF16 = 1;
constexpr const char* kExt = ".pkv";
constexpr const char* kTmpExt = ".tmp";

struct Identity {
  uint64_t model_fp = 0;
  uint64_t tokenizer_fp = 0;
  uint32_t dtype = kDtypeF16;
  uint32_t n_layer = 0, n_head_kv = 0, head_dim = 0;
  size_t row_bytes = 0;  // one layer's K (or V) for one position

  bool operator==(const Identity& o) const {
    return model_fp == o.model_fp && tokenizer_fp == o.tokenizer_fp && dtype == o.dtype && n_layer == o.n_layer &&
           n_head_kv == o.n_head_kv && head_dim == o.head_dim;
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
  id.tokenizer_fp = m.tokenizer().fingerprint();
  id.n_layer = uint32_t(hp.n_layer);
  id.n_head_kv = uint32_t(hp.n_head_kv);
  id.head_dim = uint32_t(hp.head_dim);
  id.row_bytes = s.kv_bytes_per_position_per_layer();
  return id;
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
  uint64_t meta_bytes = 0;   // header + tokens + block table + meta checksum
  uint64_t block_bytes = 0;  // one KV block: n_layer * (K, V) * block_tokens * row_bytes
  uint64_t file_bytes = 0;
};

FileLayout layout_of(const Identity& id, uint32_t n_tokens, uint32_t block_tokens) {
  FileLayout L;
  L.n_tokens = n_tokens;
  L.block_tokens = block_tokens;
  L.n_blocks = block_tokens ? n_tokens / block_tokens : 0;
  L.meta_bytes = kHeaderBytes + 4ull * n_tokens + 8ull * L.n_blocks + 8;
  L.block_bytes = uint64_t(id.n_layer) * 2 * block_tokens * id.row_bytes;
  L.file_bytes = L.meta_bytes + L.block_bytes * L.n_blocks;
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
  std::vector<uint16_t> k, v;  // fp16, [layer][position < tokens.size()][n_head_kv][head_dim]
  uint64_t last_use = 0;
  size_t bytes() const { return (k.size() + v.size()) * 2 + tokens.size() * 4; }
};

struct DiskEntry {
  std::string name;  // file name inside the directory
  std::vector<int32_t> tokens;
  uint32_t block_tokens = 0;
  std::vector<uint64_t> block_sums;
  FileLayout layout;
};

// Longest usable prefix of `prompt` (<= limit, a multiple of `block`) that `tokens` share.
size_t match_len(std::span<const int32_t> tokens, std::span<const int32_t> prompt, size_t limit, size_t block) {
  const size_t n = std::min({tokens.size(), prompt.size(), limit});
  const size_t lcp = size_t(std::mismatch(tokens.begin(), tokens.begin() + n, prompt.begin()).first - tokens.begin());
  return block ? lcp / block * block : lcp;
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
  const uint64_t size = uint64_t(st.st_size);
  uint8_t h[kHeaderBytes];
  if (size < kHeaderBytes || !read_full(fd, h, kHeaderBytes, 0)) return "truncated header";
  if (std::memcmp(h, kMagic, 8) != 0) return "bad magic";
  const uint32_t version = rd32(h + 8), header_bytes = rd32(h + 12);
  if (version != kVersion) return "format version " + std::to_string(version) + " (expected 1)";
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
      total += uint64_t(fs.st_size);
      if (name.rfind(mine, 0) != 0) continue;  // another model's file: not ours to judge
      seen[name] = true;
      if (!index.count(name)) fresh.push_back(name);
    }
    ::closedir(d);
    for (auto it = index.begin(); it != index.end();) it = seen.count(it->first) ? std::next(it) : index.erase(it);
    for (const std::string& name : fresh) {
      Fd f(::open(path(name).c_str(), O_RDONLY | O_CLOEXEC));
      if (f.fd < 0) continue;
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
  // budget. Holds an exclusive flock on <dir>/.lock so that two processes do not both delete.
  void evict_disk(Logs& logs) {
    Fd lock(::open(path(".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lock.fd < 0 || ::flock(lock.fd, LOCK_EX) != 0) {
      logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: cannot lock " + path(".lock") + ": " + std::strerror(errno));
      return;
    }
    DIR* d = ::opendir(opts.dir.c_str());
    if (!d) return;
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
      if (::stat(path(name).c_str(), &fs) != 0) continue;
      files.push_back({name, uint64_t(fs.st_size), fs.st_mtim});
      total += uint64_t(fs.st_size);
    }
    ::closedir(d);
    std::sort(files.begin(), files.end(), [](const F& a, const F& b) {
      return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec : a.mtime.tv_nsec < b.mtime.tv_nsec;
    });
    for (const F& f : files) {
      if (total <= opts.max_disk_bytes) break;
      if (::unlink(path(f.name).c_str()) == 0 || errno == ENOENT) {
        total -= f.size;
        ++st.disk_evictions;
        index.erase(f.name);
        logs.emplace_back(PromptCacheLogLevel::Debug, "prompt cache: evicted " + path(f.name));
      }
    }
    st.disk_bytes = total;
  }

  // Copies positions [from, n) of a snapshot into the session.
  static void copy_from_ram(const RamSnapshot& s, Session& session, const Identity& id, size_t from, size_t n) {
    const size_t row = id.row_bytes / 2, total = s.tokens.size();
    for (uint32_t l = 0; l < id.n_layer; ++l) {
      const size_t base = size_t(l) * total * row;
      std::memcpy(session.k_cache(int32_t(l)) + from * row, s.k.data() + base + from * row, (n - from) * row * 2);
      std::memcpy(session.v_cache(int32_t(l)) + from * row, s.v.data() + base + from * row, (n - from) * row * 2);
    }
  }

  // Loads blocks [from/B, n/B) of a file into the session (positions below `from` are already
  // there; `from` is a multiple of B). Returns n on success; on a bad file sets `why` and returns
  // `from`: positions from `from` on may then hold garbage and must be dropped by the caller.
  static size_t load_file(int fd, const DiskEntry& e, Session& session, const Identity& id, size_t from, size_t n,
                          std::string& why) {
    const size_t B = e.block_tokens, row = id.row_bytes / 2;
    std::vector<std::pair<const uint16_t*, size_t>> pieces;
    std::vector<iovec> iov;
    for (size_t b = from / B; b < n / B; ++b) {
      pieces.clear();
      iov.clear();
      for (uint32_t l = 0; l < id.n_layer; ++l) {
        uint16_t* kp = session.k_cache(int32_t(l)) + b * B * row;
        uint16_t* vp = session.v_cache(int32_t(l)) + b * B * row;
        pieces.push_back({kp, B * id.row_bytes});
        pieces.push_back({vp, B * id.row_bytes});
        iov.push_back({kp, B * id.row_bytes});
        iov.push_back({vp, B * id.row_bytes});
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
    return n;
  }

  bool write_file(Session& session, const Identity& id, std::span<const int32_t> toks, const std::string& name,
                  Logs& logs) {
    const uint32_t B = uint32_t(opts.block_tokens);
    const FileLayout L = layout_of(id, uint32_t(toks.size()), B);
    const size_t row = id.row_bytes / 2;
    // Block checksums first (they go into the header), from the session's K/V.
    std::vector<uint64_t> sums(L.n_blocks);
    std::vector<std::pair<const uint16_t*, size_t>> pieces;
    for (size_t b = 0; b < L.n_blocks; ++b) {
      pieces.clear();
      for (uint32_t l = 0; l < id.n_layer; ++l) {
        pieces.push_back({session.k_cache(int32_t(l)) + b * B * row, B * id.row_bytes});
        pieces.push_back({session.v_cache(int32_t(l)) + b * B * row, B * id.row_bytes});
      }
      sums[b] = block_checksum(pieces, b);
    }
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
    if (f.fd < 0) {
      logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: cannot create " + tmp + ": " + std::strerror(errno));
      return false;
    }
    bool ok = write_full(f.fd, meta.data(), meta.size());
    for (size_t b = 0; ok && b < L.n_blocks; ++b)
      for (uint32_t l = 0; ok && l < id.n_layer; ++l) {
        ok = write_full(f.fd, session.k_cache(int32_t(l)) + b * B * row, B * id.row_bytes) &&
             write_full(f.fd, session.v_cache(int32_t(l)) + b * B * row, B * id.row_bytes);
      }
    // fsync before rename: after a crash the final name holds either nothing or the whole file.
    if (ok) ok = ::fsync(f.fd) == 0;
    if (ok) ok = ::rename(tmp.c_str(), path(name).c_str()) == 0;
    if (!ok) {
      logs.emplace_back(PromptCacheLogLevel::Warn, "prompt cache: writing " + tmp + " failed: " + std::strerror(errno));
      ::unlink(tmp.c_str());
      return false;
    }
    Fd dfd(::open(opts.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd.fd >= 0) ::fsync(dfd.fd);  // make the rename itself durable
    return true;
  }
};

// ------------------------------------------------------------------------------------------------

PromptCacheStore::PromptCacheStore(PromptCacheOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.opts = std::move(opts);
  if (I.opts.block_tokens <= 0) I.opts.block_tokens = PromptCacheOptions{}.block_tokens;
  while (I.opts.dir.size() > 1 && I.opts.dir.back() == '/') I.opts.dir.pop_back();
  if (!I.opts.dir.empty()) {
    // mkdir -p
    std::string p;
    for (size_t i = 0; i <= I.opts.dir.size(); ++i) {
      if (i == I.opts.dir.size() || (I.opts.dir[i] == '/' && i > 0)) {
        p = I.opts.dir.substr(0, i);
        ::mkdir(p.c_str(), 0755);
      }
    }
    struct stat ds {};
    I.disk = ::stat(I.opts.dir.c_str(), &ds) == 0 && S_ISDIR(ds.st_mode) && ::access(I.opts.dir.c_str(), W_OK) == 0;
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
  size_t live = match_len(session.tokens(), prompt, limit, 0);
  session.truncate(int32_t(live));

  Impl::Logs logs;
  std::shared_ptr<const RamSnapshot> ram_best;
  size_t ram_len = 0;
  std::vector<std::pair<size_t, std::shared_ptr<const DiskEntry>>> disk;
  {
    std::lock_guard<std::mutex> lk(I.mu);
    for (auto& s : I.ram) {
      const size_t m = match_len(s->tokens, prompt, limit, size_t(I.opts.block_tokens));
      if (m > ram_len) ram_len = m, ram_best = s;
    }
    if (I.disk) {
      I.refresh_index_locked(id, logs);
      for (auto& [name, e] : I.index) {
        const size_t m = match_len(e->tokens, prompt, limit, e->block_tokens);
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
    Fd f(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (f.fd < 0) {  // evicted or replaced by another process: a miss, not an error
      std::lock_guard<std::mutex> lk(I.mu);
      I.index.erase(e->name);
      continue;
    }
    DiskEntry now;  // re-read: the name may now hold another (equally valid) file
    std::string why = read_meta(f.fd, id, now);
    size_t got = live;
    if (why.empty()) {
      if (match_len(now.tokens, prompt, limit, now.block_tokens) < m) {
        std::lock_guard<std::mutex> lk(I.mu);
        I.index.erase(e->name);
        continue;
      }
      const size_t from = live / now.block_tokens * now.block_tokens;
      session.truncate(int32_t(from));
      got = I.load_file(f.fd, now, session, id, from, m, why);
      session.set_cached_tokens(prompt.first(got));
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
  const std::span<const int32_t> toks(session.tokens().data(), n);
  const size_t row = id.row_bytes / 2;
  Impl::Logs logs;

  // RAM tier.
  if (I.opts.max_ram_bytes > 0) {
    bool have = false;
    {
      std::lock_guard<std::mutex> lk(I.mu);
      for (auto& s : I.ram)
        if (match_len(s->tokens, toks, n, 0) == n) {
          I.touch_ram_locked(s.get());
          have = true;
          break;
        }
    }
    if (!have) {
      auto s = std::make_shared<RamSnapshot>();
      s->tokens.assign(toks.begin(), toks.end());
      if (s->bytes() + 2 * n * row * 2 * id.n_layer <= I.opts.max_ram_bytes) {
        s->k.resize(size_t(id.n_layer) * n * row);
        s->v.resize(size_t(id.n_layer) * n * row);
        for (uint32_t l = 0; l < id.n_layer; ++l) {
          std::memcpy(s->k.data() + size_t(l) * n * row, session.k_cache(int32_t(l)), n * row * 2);
          std::memcpy(s->v.data() + size_t(l) * n * row, session.v_cache(int32_t(l)), n * row * 2);
        }
        std::lock_guard<std::mutex> lk(I.mu);
        // A snapshot that is a prefix of the new one serves nothing the new one does not.
        I.ram.remove_if([&](const std::shared_ptr<const RamSnapshot>& o) {
          return o->tokens.size() <= n && match_len(o->tokens, toks, n, 0) == o->tokens.size();
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
        if (match_len(e->tokens, toks, n, 0) == n && n % e->block_tokens == 0) covering = fname;
        else if (e->tokens.size() < n && e->tokens.size() % B == 0 &&
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
    } else if (I.write_file(session, id, toks, name, logs)) {
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
    r.cached_tokens = size_t(std::mismatch(t.begin(), t.begin() + lim, prompt.begin()).first - t.begin());
    session.truncate(int32_t(r.cached_tokens));
  }
  const auto rest = prompt.subspan(r.cached_tokens);
  Status s = session.eval(rest, opts.all_logits, opts.progress);
  if (!s) return Error{s.error()};
  r.evaluated_tokens = rest.size();
  if (store && !opts.defer_store) r.stored_tokens = store->store(session, std::min(stable_len, prompt.size()));
  return r;
}

}  // namespace picolm
