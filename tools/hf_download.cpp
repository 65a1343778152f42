// See hf_download.h. The HTTP side is libcurl's; this file decides what a response means for the
// .part file (append, restart, reject) and turns failures into messages a user can act on.
#include "hf_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#if PICOLM_HAVE_CURL
#include <curl/curl.h>
#include <openssl/evp.h>
#endif

namespace picolm::download {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool valid_part(std::string_view s) { return !s.empty() && s != "." && s != ".." && s.find('\\') == std::string_view::npos; }

}  // namespace

Result<ModelRef> parse_model_ref(std::string_view spec) {
  std::string s(spec);
  // A URL or path pasted from the hub's web page: keep what follows the host, drop resolve/main.
  for (const char* scheme : {"https://", "http://"}) {
    if (s.rfind(scheme, 0) == 0) {
      const size_t slash = s.find('/', std::strlen(scheme));
      s = slash == std::string::npos ? std::string() : s.substr(slash + 1);
    }
  }
  for (const char* mid : {"/resolve/main/", "/blob/main/"}) {
    if (const size_t p = s.find(mid); p != std::string::npos) s = s.substr(0, p) + "/" + s.substr(p + std::strlen(mid));
  }
  const auto bad = [&](const std::string& why) {
    return Error{"--hf '" + std::string(spec) + "': " + why + " (expected OWNER/REPO/FILE.gguf, e.g. " +
                 "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf)"};
  };
  const size_t a = s.find('/');
  const size_t b = a == std::string::npos ? std::string::npos : s.find('/', a + 1);
  if (b == std::string::npos) return bad("needs three parts");
  ModelRef r{s.substr(0, a), s.substr(a + 1, b - a - 1), s.substr(b + 1)};
  if (!valid_part(r.owner) || !valid_part(r.repo) || r.file.empty()) return bad("an empty part");
  size_t start = 0;
  while (start <= r.file.size()) {
    const size_t end = std::min(r.file.find('/', start), r.file.size());
    if (!valid_part(std::string_view(r.file).substr(start, end - start))) return bad("a bad path component");
    start = end + 1;
  }
  if (r.file.size() < 6 || r.file.compare(r.file.size() - 5, 5, ".gguf") != 0) return bad("the file is not a .gguf");
  return r;
}

std::string default_endpoint() {
  std::string e = env("HF_ENDPOINT");
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e.empty() ? "https://huggingface.co" : e;
}

std::string default_models_dir() {
  if (std::string d = env("PICOLM_MODELS"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/picolm/models";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/picolm/models";
  return "picolm-models";  // no home: the working directory
}

std::string model_url(const ModelRef& ref, std::string_view endpoint) {
  std::string e(endpoint);
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e + "/" + ref.owner + "/" + ref.repo + "/resolve/main/" + ref.file;
}

std::string local_path(const ModelRef& ref, std::string_view models_dir) {
  return (fs::path(std::string(models_dir)) / ref.owner / ref.repo / ref.file).string();
}

#if PICOLM_HAVE_CURL

bool download_supported() { return true; }

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

Result<std::string> sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{"cannot read " + path + ": " + std::strerror(errno)};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::string buf(1 << 20, '\0');
  std::string err;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) { err = "cannot read " + path + ": " + std::strerror(errno); break; }
    if (n == 0) break;
    EVP_DigestUpdate(ctx, buf.data(), size_t(n));
  }
  ::close(fd);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (!err.empty()) return Error{err};
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

// libcurl must be initialised once per process before any thread uses it.
void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// One transfer: the state its callbacks share. Headers of every response in a redirect chain
// pass through on_header; a new status line starts a new response.
struct Transfer {
  int fd = -1;
  std::string part_path, dir;
  uint64_t resume_from = 0;  // bytes in .part when the request was sent
  const FetchOptions* opts = nullptr;
  std::chrono::steady_clock::time_point t0;

  // The current (last) response.
  long status = 0;
  int64_t content_length = -1;
  int64_t range_start = -1, range_total = -1;
  // The hub puts the LFS object's sha256 and size on its own (redirecting) response, so they are
  // kept across the chain.
  std::string linked_etag;
  int64_t linked_size = -1;

  bool body_started = false;
  bool restarted = false;       // the server ignored Range: .part was emptied
  uint64_t written = 0;         // bytes written to .part by this transfer
  std::string error;            // set by a callback that aborts the transfer
  int write_errno = 0;
  std::string error_body;       // start of an error response's body (for the message)

  uint64_t local_bytes() const { return (restarted ? 0 : resume_from) + written; }
  int64_t expected_total() const {
    if (status == 206 && range_total >= 0) return range_total;
    if (status == 200 && content_length >= 0) return content_length;
    return linked_size;
  }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    const size_t sp = line.find(' ');
    t.status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    t.content_length = -1;
    t.range_start = t.range_total = -1;
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  const std::string key = lower(trim(line.substr(0, colon)));
  const std::string value = trim(line.substr(colon + 1));
  if (key == "content-length") {
    t.content_length = std::strtoll(value.c_str(), nullptr, 10);
  } else if (key == "content-range") {  // "bytes START-END/TOTAL"
    long long s = -1, e = -1, total = -1;
    if (std::sscanf(value.c_str(), "bytes %lld-%lld/%lld", &s, &e, &total) == 3) {
      t.range_start = s;
      t.range_total = total;
    }
  } else if (key == "x-linked-etag") {
    std::string v = value;
    if (v.rfind("W/", 0) == 0) v = v.substr(2);
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    t.linked_etag = lower(v);
  } else if (key == "x-linked-size") {
    t.linked_size = std::strtoll(value.c_str(), nullptr, 10);
  }
  return size * n;
}

uint64_t statvfs_free(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return UINT64_MAX;  // unknown: let the writes decide
  return uint64_t(s.f_bavail) * uint64_t(s.f_frsize);
}

// Returning a count other than size * n makes libcurl abort with CURLE_WRITE_ERROR.
size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (t.status >= 300 || t.status < 200) {  // an error page: keep its start for the message only
    if (t.error_body.size() < 300) t.error_body.append(data, std::min(len, 300 - t.error_body.size()));
    return len;
  }
  if (!t.body_started) {
    t.body_started = true;
    if (t.resume_from > 0 && t.status == 200) {
      // The server ignored the Range request and sends the whole file: start the .part anew.
      if (::ftruncate(t.fd, 0) != 0 || ::lseek(t.fd, 0, SEEK_SET) != 0) {
        t.error = "cannot truncate " + t.part_path + ": " + std::strerror(errno);
        return 0;
      }
      t.restarted = true;
    } else if (t.status == 206 && t.range_start != int64_t(t.resume_from)) {
      t.error = "the server answered the resume request at byte " + std::to_string(t.resume_from) +
                " with a part starting at " + std::to_string(t.range_start);
      return 0;
    }
    const int64_t total = t.expected_total();
    if (total > 0) {
      const uint64_t need = uint64_t(total) - std::min<uint64_t>(uint64_t(total), t.local_bytes());
      const uint64_t avail = t.opts->free_bytes ? t.opts->free_bytes(t.dir) : statvfs_free(t.dir);
      if (avail < need) {
        t.error = "disk full: " + mib(need) + " more are needed in " + t.dir + " but only " + mib(avail) +
                  " are free; free some space or set PICOLM_MODELS to a folder on a larger disk";
        return 0;
      }
    }
  }
  size_t off = 0;
  while (off < len) {
    const ssize_t w = ::write(t.fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      t.write_errno = errno;
      return 0;
    }
    off += size_t(w);
  }
  t.written += len;
  return len;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto& t = *static_cast<Transfer*>(user);
  if (t.opts->progress && t.body_started && t.status >= 200 && t.status < 300) {
    Progress p;
    p.done = t.local_bytes();
    const int64_t total = t.expected_total();
    p.total = total > 0 ? uint64_t(total) : 0;
    p.resumed_from = t.restarted ? 0 : t.resume_from;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t.t0).count();
    t.opts->progress(p);
  }
  return 0;
}

std::string host_of(const std::string& url) {
  const size_t s = url.find("://");
  const size_t b = s == std::string::npos ? 0 : s + 3;
  const size_t e = url.find('/', b);
  return url.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

// Closes the fd (which drops the flock) on every path out of fetch_model, and removes a .part
// that holds nothing (a 404, no network), so failed attempts leave no litter.
struct FdGuard {
  int fd = -1;
  std::string path;  // cleared once the .part has been renamed into place
  ~FdGuard() {
    if (fd < 0) return;
    struct stat st {};
    if (!path.empty() && ::fstat(fd, &st) == 0 && st.st_size == 0) ::unlink(path.c_str());
    ::close(fd);
  }
};

// Empties the .part so that the next run starts from byte 0 (a best effort: if this fails, the
// size and checksum checks of the next run still reject a bad file).
void discard_part(int fd) {
  if (::ftruncate(fd, 0) != 0) return;
}

}  // namespace

Result<std::string> fetch_model(const ModelRef& ref, const FetchOptions& opts) {
  const std::string endpoint = opts.endpoint.empty() ? default_endpoint() : opts.endpoint;
  const std::string dir_root = opts.models_dir.empty() ? default_models_dir() : opts.models_dir;
  const std::string final_path = local_path(ref, dir_root);
  const std::string part_path = final_path + ".part";
  const std::string url = model_url(ref, endpoint);
  const auto log = [&](const std::string& m) {
    if (opts.log) opts.log(m);
  };

  std::error_code ec;
  if (fs::is_regular_file(final_path, ec)) {
    log("using " + final_path + " (downloaded before)");
    return final_path;
  }
  const std::string dir = fs::path(final_path).parent_path().string();
  fs::create_directories(dir, ec);
  if (ec) return Error{"cannot create " + dir + ": " + ec.message()};

  FdGuard guard;
  guard.fd = ::open(part_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (guard.fd < 0) return Error{"cannot write " + part_path + ": " + std::strerror(errno)};
  if (::flock(guard.fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(guard.fd);  // not ours to clean up
    guard.fd = -1;
    return Error{"another process is downloading " + final_path + " (" + part_path + " is locked)"};
  }
  guard.path = part_path;
  // Another process may have finished and renamed its .part between our first check and our open:
  // our fd then holds a fresh, empty file (removed by the guard); check the final name again.
  if (fs::is_regular_file(final_path, ec)) {
    log("using " + final_path + " (downloaded by another process)");
    return final_path;
  }

  curl_init_once();
  std::string token = opts.token.empty() ? env("HF_TOKEN") : opts.token;

  for (int attempt = 0; attempt < 2; ++attempt) {
    struct stat st {};
    if (::fstat(guard.fd, &st) != 0) return Error{"cannot stat " + part_path + ": " + std::strerror(errno)};
    Transfer t;
    t.fd = guard.fd;
    t.part_path = part_path;
    t.dir = dir;
    t.resume_from = uint64_t(st.st_size);
    t.opts = &opts;
    t.t0 = std::chrono::steady_clock::now();
    if (::lseek(guard.fd, 0, SEEK_END) < 0) return Error{"cannot seek " + part_path + ": " + std::strerror(errno)};
    if (t.resume_from > 0) log("resuming " + ref.file + " at " + mib(t.resume_from) + " (" + part_path + ")");
    else log("downloading " + url);

    CURL* c = curl_easy_init();
    if (!c) return Error{"libcurl could not start a transfer"};
    char curl_err[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
    const std::string range = std::to_string(t.resume_from) + "-";
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "picolm/" PICOLM_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, opts.connect_timeout_sec);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, opts.stall_timeout_sec);
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    if (t.resume_from > 0) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);

    const uint64_t have = t.local_bytes();
    const std::string kept = have > 0 ? "; " + mib(have) + " are kept in " + part_path +
                                            ": run the same command again to resume"
                                      : "";
    if (!t.error.empty()) {
      if (t.error.rfind("disk full", 0) != 0) discard_part(guard.fd);  // inconsistent part: start over next time
      return Error{t.error + " (" + url + ")"};
    }
    if (rc == CURLE_WRITE_ERROR && t.write_errno != 0) {
      if (t.write_errno == ENOSPC || t.write_errno == EDQUOT)
        return Error{"disk full while writing " + part_path + " (" + std::strerror(t.write_errno) +
                     "); free some space or set PICOLM_MODELS to a folder on a larger disk" + kept};
      return Error{"cannot write " + part_path + ": " + std::strerror(t.write_errno) + kept};
    }
    if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_COULDNT_CONNECT ||
        (rc == CURLE_OPERATION_TIMEDOUT && t.status == 0)) {
      return Error{"cannot reach " + host_of(url) + " (" + (curl_err[0] ? curl_err : curl_easy_strerror(rc)) +
                   "): no network? A model downloaded before is used offline; HF_ENDPOINT selects a mirror" + kept};
    }
    if (rc != CURLE_OK && t.status >= 200 && t.status < 300) {
      return Error{"download of " + url + " interrupted at " + mib(have) +
                   (t.expected_total() > 0 ? " of " + mib(uint64_t(t.expected_total())) : std::string()) + " (" +
                   (curl_err[0] ? curl_err : curl_easy_strerror(rc)) + ")" + kept};
    }
    if (rc != CURLE_OK) return Error{"download of " + url + " failed: " + (curl_err[0] ? curl_err : curl_easy_strerror(rc)) + kept};

    if (t.status == 416 && t.resume_from > 0 && attempt == 0) {
      // The .part is not a prefix the server can continue (e.g. the file changed and shrank).
      log("the server cannot resume " + part_path + " (HTTP 416): starting over");
      if (::ftruncate(guard.fd, 0) != 0) return Error{"cannot truncate " + part_path + ": " + std::strerror(errno)};
      continue;
    }
    if (t.status == 404)
      return Error{"not found (HTTP 404): " + url +
                   " - check OWNER/REPO/FILE (names are case-sensitive); --list-models shows known-good ones"};
    if (t.status == 401 || t.status == 403)
      return Error{"access denied (HTTP " + std::to_string(t.status) + "): " + url +
                   " - a gated or private repository: accept its terms on the hub and set HF_TOKEN"};
    if (t.status < 200 || t.status >= 300)
      return Error{"HTTP " + std::to_string(t.status) + " from " + url +
                   (t.error_body.empty() ? std::string() : ": " + trim(t.error_body))};

    // ---- complete: size, checksum, rename ----
    const int64_t total = t.expected_total();
    if (::fstat(guard.fd, &st) != 0) return Error{"cannot stat " + part_path + ": " + std::strerror(errno)};
    const uint64_t size = uint64_t(st.st_size);
    if (total >= 0 && size != uint64_t(total)) {
      if (size > uint64_t(total)) discard_part(guard.fd);
      return Error{"size mismatch for " + url + ": have " + std::to_string(size) + " bytes, the server announced " +
                   std::to_string(total) + (size < uint64_t(total) ? kept : "; the partial file was discarded")};
    }
    if (t.linked_size >= 0 && size != uint64_t(t.linked_size)) {
      discard_part(guard.fd);
      return Error{"size mismatch for " + url + ": have " + std::to_string(size) + " bytes, X-Linked-Size says " +
                   std::to_string(t.linked_size) + "; the partial file was discarded"};
    }
    if (is_sha256(t.linked_etag)) {
      auto sum = sha256_file(part_path);
      if (!sum) return Error{sum.error()};
      if (*sum != t.linked_etag) {
        discard_part(guard.fd);
        return Error{"checksum mismatch for " + url + ": sha256 " + *sum + ", the server says " + t.linked_etag +
                     "; the download was discarded, run the same command again to fetch it anew"};
      }
      log("sha256 " + *sum + " ok");
    } else {
      log("the server gave no sha256 (X-Linked-Etag) for " + ref.file + ": size checked only");
    }
    if (::fsync(guard.fd) != 0) return Error{"cannot flush " + part_path + ": " + std::strerror(errno)};
    if (::rename(part_path.c_str(), final_path.c_str()) != 0)
      return Error{"cannot rename " + part_path + " to " + final_path + ": " + std::strerror(errno)};
    guard.path.clear();
    if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
      ::fsync(dfd);  // the rename itself survives a power cut
      ::close(dfd);
    }
    log("saved " + final_path + " (" + mib(size) + ")");
    return final_path;
  }
  return Error{"download of " + url + " failed twice"};
}

#else  // built without libcurl (-DPICOLM_DOWNLOAD=OFF, e.g. the ARM cross build)

bool download_supported() { return false; }

Result<std::string> fetch_model(const ModelRef& ref, const FetchOptions& opts) {
  const std::string final_path =
      local_path(ref, opts.models_dir.empty() ? default_models_dir() : opts.models_dir);
  std::error_code ec;
  if (fs::is_regular_file(final_path, ec)) return final_path;
  return Error{"this build has no download support (configured with -DPICOLM_DOWNLOAD=OFF); fetch " +
               model_url(ref, opts.endpoint.empty() ? default_endpoint() : opts.endpoint) + " to " + final_path +
               " by other means, or use -m FILE"};
}

Result<std::string> sha256_file(const std::string&) { return Error{"built without OpenSSL (PICOLM_DOWNLOAD=OFF)"}; }
std::string sha256_hex(std::string_view) { return {}; }

#endif

}  // namespace picolm::download
