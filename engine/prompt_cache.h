// Prompt cache: reuse the KV of token prefixes that were already evaluated, from the session
// itself, from a RAM LRU of snapshots, or from files in a cache directory shared by processes.
//
// Identity: the prompt is cut in blocks of `block_tokens`; every block boundary n has a key, a
// chained 64-bit hash over (model fingerprint, tokenizer fingerprint, KV dims, tokens[0, n)).
// A key only finds candidates; a prefix is used only after its stored token ids compare equal to
// the prompt's and (for files) its header and every KV block it contributes pass their checksums.
// File format: docs/KV_CACHE_FORMAT.md.
//
// Hostile directories: only regular files are read (opened non-blocking, so a FIFO named like a
// cache file cannot block the scan); a deleted directory is created again on the next write; a
// full filesystem evicts least recently used files and retries once, then pauses writing.
//
// Thread-safety: a PromptCacheStore may be shared by any number of threads (one internal mutex
// guards the RAM LRU, the file index, directory scans and eviction; copying KV data in and out of
// sessions and reading/writing the KV blocks of files run outside it). Each
// Session passed in must be used by the calling thread only, as usual. Any number of processes
// may share one directory: files appear by atomic rename, temporary names are unique, eviction
// holds an flock on "<dir>/.lock", and files vanishing under a reader are a cache miss.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "model.h"
#include "result.h"

namespace picolm {

enum class PromptCacheLogLevel { Debug, Info, Warn };

struct PromptCacheOptions {
  // Cache directory; "" disables the disk tier. See PromptCacheStore::default_dir().
  std::string dir;
  uint64_t max_disk_bytes = uint64_t(4) << 30;  // all *.pkv files in `dir`, every model together
  uint64_t max_ram_bytes = uint64_t(1) << 30;   // KV snapshots held in RAM by this store; 0 disables
  // Prefixes are cached at multiples of this. Small, because after a hit up to block_tokens - 1
  // tokens of the stable part are evaluated again on top of the new turn, at tens of ms per token
  // on a CPU; a block costs only 8 bytes of checksum and one preadv.
  int32_t block_tokens = 16;
  // Temporary files of writers that died are removed once they are this old (or at once if their
  // writer's pid no longer exists on this host).
  int64_t stale_temp_seconds = 3600;
  // Receives rejected files, evictions and I/O problems. Optional; called with no lock held.
  std::function<void(PromptCacheLogLevel, std::string_view)> log;
  // Tests only: called before each write of a cache file with the file's size after that write;
  // a nonzero errno fails the write with it (ENOSPC simulates a full filesystem without one).
  std::function<int(uint64_t file_bytes_after)> write_fault;
  // Tests only (fault injection): called inside every file write, once, after the header is in the
  // temporary file and before the KV blocks, fsync and rename, with the temporary's path and the
  // file's final size. It may block: picolm-loadtest holds the writer here (the provider's
  // PICOLM_TEST_HOLD_CACHE_WRITE) and kills the process, so each kill -9 lands inside a write.
  // Runs on the writing thread with no lock held. Unset: one empty-function test per file.
  std::function<void(std::string_view temp_path, uint64_t file_bytes)> inside_write;
};

struct PromptCacheStats {
  uint64_t live_hits = 0;          // restore() kept the session's own prefix (longest available)
  uint64_t ram_hits = 0;           // restore() copied a RAM snapshot
  uint64_t disk_hits = 0;          // restore() loaded a file
  uint64_t misses = 0;             // restore() found nothing to reuse
  uint64_t tokens_restored = 0;    // tokens copied from RAM or disk (live hits not counted)
  uint64_t ram_snapshots = 0;      // snapshots taken by store()
  uint64_t files_written = 0;
  uint64_t files_rejected = 0;     // ignored and deleted: bad magic/version/identity/checksum/size
  uint64_t files_ignored = 0;      // names ending in .pkv that are not regular files (FIFO, directory):
                                   // never opened for reading nor deleted, counted once per name
  uint64_t disk_full = 0;          // writes that failed for lack of space (ENOSPC, EDQUOT)
  uint64_t ram_evictions = 0;
  uint64_t disk_evictions = 0;     // files this process removed to keep the budget
  uint64_t ram_bytes = 0;          // current
  uint64_t ram_entries = 0;        // current
  uint64_t disk_bytes = 0;         // *.pkv bytes in the directory at the last scan
  std::string last_rejection;      // why the last file was rejected ("" if none)
};

class PromptCacheStore {
 public:
  // Creates `opts.dir` if needed. Never fails: a directory that cannot be used disables the disk
  // tier (logged), the RAM tier still works.
  explicit PromptCacheStore(PromptCacheOptions opts);
  ~PromptCacheStore();
  PromptCacheStore(const PromptCacheStore&) = delete;
  PromptCacheStore& operator=(const PromptCacheStore&) = delete;

  // $XDG_CACHE_HOME/picolm, else $HOME/.cache/picolm, else "" (no disk tier).
  static std::string default_dir();

  // Makes `session` hold the longest reusable prefix of `prompt`: its own live prefix, a RAM
  // snapshot or a file, whichever is longest (RAM before disk at equal length). At most
  // prompt.size() - 1 tokens are restored so that evaluating the rest yields logits. The session
  // is truncated to the restored length; returns that length (== session.n_past()). Never fails:
  // anything unusable is a miss (and bad files are deleted). With sliding-window layers an entry
  // restores exactly its own length (it keeps those layers' last positions only), and the live
  // prefix is lost when the session's rings no longer reach back to it (Session::truncate). The
  // same for hybrid models (recurrent layers): an entry carries the state at its end only, and the
  // live prefix goes back to the session's latest state snapshot at or before the common prefix.
  size_t restore(Session& session, std::span<const int32_t> prompt);

  // Saves the KV of the session's first n tokens, n = min(stable_len, n_past) rounded down to a
  // block boundary, to RAM and disk (unless already cached; then only marked as recently used).
  // Decoding never changes positions below n_past, so this may be called after generation, except
  // with sliding-window layers (Session::kv_window): their rings must still hold the window before
  // n, which decoding more than about n_batch tokens overwrites; then nothing is stored (returns 0),
  // so call it before decoding for such models. Hybrid models: stored only where the session has
  // the recurrent state at n (n_past() or a kept snapshot; prefill_with_cache keeps one there).
  // Returns n (0: nothing stored). Disk errors are logged, not returned.
  size_t store(Session& session, size_t stable_len);

  // Drops the RAM snapshots (the disk tier is untouched).
  void clear_ram();

  PromptCacheStats stats() const;
  const PromptCacheOptions& options() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct PrefillWithCacheResult {
  size_t cached_tokens = 0;     // restored from the session, RAM or disk
  size_t evaluated_tokens = 0;  // computed by session.eval
  size_t stored_tokens = 0;     // prefix length saved by store() (0 if deferred or too short)
};

struct PrefillWithCacheOptions {
  bool all_logits = false;  // passed to Session::eval for the evaluated tail
  bool defer_store = false; // the caller calls store.store(session, stable_len) itself later
  std::function<void(size_t done, size_t total)> progress;
};

// restore() + eval of the remaining tokens + store(stable_len). With sliding-window layers
// (Session::kv_window) or recurrent layers (hybrids) and without all_logits, the evaluation is
// split at stable_len rounded down to a block and the store runs in between, while the rings still
// hold that prefix's window and the recurrent state is that of the prefix (a caller with its own
// prefill loop must do the same); hybrids also keep state snapshots there and at the prompt's end
// (Session::keep_state_snapshot), with or without a store, for the next turn's live reuse. `store` may be null (plain
// prefill, the session's own live prefix is still reused). Afterwards session.logits() belong to
// the last prompt token, exactly as after a full prefill. Errors are Session::eval's.
Result<PrefillWithCacheResult> prefill_with_cache(PromptCacheStore* store, Session& session,
                                                  std::span<const int32_t> prompt, size_t stable_len,
                                                  const PrefillWithCacheOptions& opts = {});

// XXH64 (Yann Collet's xxHash, 64-bit variant), implemented from its published specification;
// used for the file checksums. Exposed for tests and tools.
uint64_t prompt_cache_xxh64(const void* data, size_t len, uint64_t seed);

}  // namespace picolm
