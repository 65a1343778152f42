// A loopback HTTP/1.1 file server for the download tests, laid out like the Hugging Face hub:
// GET /{owner}/{repo}/resolve/main/{file} answers 302 to /cdn/{path} with the hub's X-Linked-Etag
// (quoted sha256) and X-Linked-Size headers, and /cdn/{path} serves the bytes with Range support
// (206 + Content-Range). Written on raw sockets rather than with an HTTP library so that every
// header, the Range handling and a connection cut mid-body are exactly what the test says.
// One connection at a time (Connection: close); 127.0.0.1 on an ephemeral port only.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace test_util {

class HubFileServer {
 public:
  struct File {
    std::string bytes;
    std::string etag;   // sent as X-Linked-Etag: "<etag>" when not empty
    int64_t cut_at = -1;  // close the connection after sending this many bytes of the file (once)
  };

  HubFileServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0) std::abort();
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { loop(); });
  }
  ~HubFileServer() { stop(); }

  void stop() {
    if (stopping_.exchange(true)) return;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }

  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // path: "owner/repo/file"
  void put(const std::string& path, File f) {
    std::lock_guard<std::mutex> lk(mu_);
    files_[path] = std::move(f);
  }
  // Ranges asked for, in request order ("" for a request without Range), of /cdn/ requests.
  std::vector<std::string> ranges() {
    std::lock_guard<std::mutex> lk(mu_);
    return ranges_;
  }
  int requests() const { return requests_.load(); }
  // When false, Range headers are ignored (200 with the whole file), as some servers do.
  void honour_range(bool on) { honour_range_ = on; }

 private:
  void loop() {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      serve(c);
      ::close(c);
    }
  }

  static void send_all(int c, const char* d, size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(c, d, n, MSG_NOSIGNAL);
      if (w <= 0) return;
      d += w;
      n -= size_t(w);
    }
  }

  void serve(int c) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, size_t(n));
    }
    ++requests_;
    const size_t sp1 = req.find(' '), sp2 = req.find(' ', sp1 + 1);
    const std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string range;
    for (const char* key : {"\r\nRange: ", "\r\nrange: "}) {
      if (const size_t r = req.find(key); r != std::string::npos) {
        const size_t b = r + std::string(key).size();
        range = req.substr(b, req.find("\r\n", b) - b);
      }
    }
    std::unique_lock<std::mutex> lk(mu_);
    const std::string kResolve = "/resolve/main/";
    if (const size_t rp = path.find(kResolve); rp != std::string::npos && path.rfind("/cdn/", 0) != 0) {
      const std::string owner_repo = path.substr(1, rp - 1);
      const std::string key = owner_repo + "/" + path.substr(rp + kResolve.size());
      auto it = files_.find(key);
      if (it == files_.end()) {
        lk.unlock();
        const std::string body = "Entry not found";
        const std::string h = "HTTP/1.1 404 Not Found\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\nConnection: close\r\n\r\n" + body;
        send_all(c, h.data(), h.size());
        return;
      }
      std::string h = "HTTP/1.1 302 Found\r\nLocation: /cdn/" + key + "\r\nX-Linked-Size: " +
                      std::to_string(it->second.bytes.size()) + "\r\n";
      if (!it->second.etag.empty()) h += "X-Linked-Etag: \"" + it->second.etag + "\"\r\n";
      h += "Content-Length: 0\r\nConnection: close\r\n\r\n";
      lk.unlock();
      send_all(c, h.data(), h.size());
      return;
    }
    if (path.rfind("/cdn/", 0) != 0) {
      lk.unlock();
      const std::string h = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      send_all(c, h.data(), h.size());
      return;
    }
    ranges_.push_back(range);
    auto it = files_.find(path.substr(5));
    if (it == files_.end()) {
      lk.unlock();
      const std::string h = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      send_all(c, h.data(), h.size());
      return;
    }
    const std::string bytes = it->second.bytes;
    const int64_t cut = it->second.cut_at;
    it->second.cut_at = -1;  // cut once
    lk.unlock();
    size_t from = 0;
    std::string h;
    if (!range.empty() && honour_range_) {
      from = std::strtoull(range.c_str() + 6, nullptr, 10);  // "bytes=N-"
      if (from >= bytes.size()) {
        h = "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */" + std::to_string(bytes.size()) +
            "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        send_all(c, h.data(), h.size());
        return;
      }
      h = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(from) + "-" +
          std::to_string(bytes.size() - 1) + "/" + std::to_string(bytes.size()) + "\r\n";
    } else {
      h = "HTTP/1.1 200 OK\r\n";
    }
    h += "Content-Length: " + std::to_string(bytes.size() - from) + "\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n";
    send_all(c, h.data(), h.size());
    size_t end = bytes.size();
    if (cut >= 0 && size_t(cut) > from && size_t(cut) < end) end = size_t(cut);
    send_all(c, bytes.data() + from, end - from);
    // A cut: the connection closes with Content-Length unmet, as when the network drops.
  }

  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::atomic<bool> honour_range_{true};
  std::mutex mu_;
  std::map<std::string, File> files_;
  std::vector<std::string> ranges_;
};

}  // namespace test_util
