// Model download from a Hugging Face-style hub: OWNER/REPO/FILE.gguf -> a complete local file.
// The transfer is libcurl's (HTTP(S), redirects, TLS, proxies from the environment); this module
// adds the hub's URL layout, the local cache layout, resume, and the integrity checks.
//
// Local layout: <models_dir>/<owner>/<repo>/<file>, written as <file>.part (locked with flock
// while a process downloads it, resumed with an HTTP Range request) and renamed into place only
// after its size and, when the server names one, its sha256 have been checked. A file present
// under its final name is therefore complete and is used without contacting the network.
//
// Thread-safety: every function may be called from any thread; fetch_model() calls on the same
// file from several processes or threads are serialized by the .part lock (the second fails fast).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "result.h"

namespace picolm::download {

struct ModelRef {
  std::string owner, repo, file;  // file may contain '/' (a file in a sub-folder of the repo)
};

// "OWNER/REPO/FILE.gguf" (also accepts a pasted ".../resolve/main/FILE" tail). Rejects empty
// parts, "..", and a file that does not end in .gguf.
Result<ModelRef> parse_model_ref(std::string_view spec);

// $HF_ENDPOINT without trailing slashes, else https://huggingface.co.
std::string default_endpoint();
// $PICOLM_MODELS, else $XDG_CACHE_HOME/picolm/models, else ~/.cache/picolm/models.
std::string default_models_dir();
// {endpoint}/{owner}/{repo}/resolve/main/{file}
std::string model_url(const ModelRef& ref, std::string_view endpoint);
// {models_dir}/{owner}/{repo}/{file}
std::string local_path(const ModelRef& ref, std::string_view models_dir);

struct Progress {
  uint64_t done = 0;          // bytes of the file present locally (resumed part included)
  uint64_t total = 0;         // 0 while unknown
  uint64_t resumed_from = 0;  // bytes that were already there when this transfer started
  double seconds = 0;         // since this transfer started
};

struct FetchOptions {
  std::string endpoint;    // empty: default_endpoint()
  std::string models_dir;  // empty: default_models_dir()
  std::string token;       // empty: $HF_TOKEN (if set); sent as a Bearer token, never across redirects to other hosts
  std::function<void(const Progress&)> progress;  // called often during the transfer; may throttle itself
  std::function<void(std::string_view)> log;      // one-line notes: reuse, resume, checksum
  // Free bytes of the file system holding `dir` (default: statvfs). A seam for the disk-full test.
  std::function<uint64_t(const std::string& dir)> free_bytes;
  long connect_timeout_sec = 20;
  long stall_timeout_sec = 60;  // abort when under 1 byte/s for this long (resumable)
};

// The local path of a complete copy of `ref`: reused when already downloaded (no network access),
// else downloaded (resuming a .part left by an interrupted run). Errors name the cause (HTTP 404,
// access denied, no network, disk full, size or checksum mismatch) and what to do about it.
Result<std::string> fetch_model(const ModelRef& ref, const FetchOptions& opts = {});

// Lower-case hex SHA-256 of a file / of bytes (OpenSSL's EVP).
Result<std::string> sha256_file(const std::string& path);
std::string sha256_hex(std::string_view bytes);

// False when built with -DPICOLM_DOWNLOAD=OFF (fetch_model then returns an error saying so).
bool download_supported();

}  // namespace picolm::download
