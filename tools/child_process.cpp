#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include <httplib.h>

extern char** environ;

namespace picolm::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxOutput = size_t(4) << 20;
constexpr const char* kListening = "listening on 127.0.0.1:";

}  // namespace

int listening_port_in(const std::string& out) {
  const size_t at = out.find(kListening);
  if (at == std::string::npos) return 0;
  return std::atoi(out.c_str() + at + std::strlen(kListening));
}

ChildProcess::~ChildProcess() {
  stop(SIGKILL);
  if (reader_.joinable()) reader_.join();
}

bool ChildProcess::start(const ChildOptions& options, std::string& why) {
  if (options.argv.empty()) {
    why = "no program to start";
    return false;
  }
  // Everything the child needs is built before fork: it only calls async-signal-safe functions.
  std::vector<std::string> args = options.argv, env = options.extra_env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    why = std::string("pipe failed: ") + std::strerror(errno);
    return false;
  }
  const std::string log = options.stderr_log;
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(p[1], 1);
    int err = p[1];
    if (!log.empty()) {
      const int lf = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (lf >= 0) err = lf;
    }
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(p[1]);
  if (pid_ < 0) {
    ::close(p[0]);
    why = std::string("fork failed: ") + std::strerror(errno);
    return false;
  }
  reader_ = std::thread([this, fd = p[0]] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      std::lock_guard<std::mutex> lk(mu_);
      if (out_.size() < kMaxOutput) out_.append(buf, std::min(size_t(n), kMaxOutput - out_.size()));
    }
    ::close(fd);
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
  });
  return true;
}

std::string ChildProcess::output() const {
  std::lock_guard<std::mutex> lk(mu_);
  return out_;
}

bool ChildProcess::wait_for(const std::string& text, std::chrono::milliseconds within) const {
  const auto deadline = Clock::now() + within;
  for (;;) {
    bool closed = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (out_.find(text) != std::string::npos) return true;
      closed = closed_;
    }
    if (closed || Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int ChildProcess::listening_port(std::chrono::milliseconds within, std::string& why) const {
  if (wait_for(kListening, within)) {
    // The line may still be arriving: wait for its end.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (;;) {
      const std::string out = output();
      const size_t at = out.find(kListening);
      if (out.find('\n', at) != std::string::npos || Clock::now() >= deadline) return listening_port_in(out);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::string out = output();
  if (out.size() > 2000) out = "..." + out.substr(out.size() - 2000);
  why = "no 'listening on' line (output: '" + out + "')";
  return 0;
}

bool ChildProcess::wait_healthy(int port, std::chrono::milliseconds within, std::string& why) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(5, 0);
  const auto deadline = Clock::now() + within;
  while (Clock::now() < deadline) {
    auto r = c.Get("/health");
    if (r && r->status == 200) return true;
    int status = 0;
    if (running() && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      reap(status);
      why = "the child exited with status " + std::to_string(exit_status_) + " before it was healthy";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  why = "not healthy on port " + std::to_string(port) + " within " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(within).count()) + " s";
  return false;
}

void ChildProcess::reap(int status) {
  reaped_ = true;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (reader_.joinable()) reader_.join();
}

int ChildProcess::wait_exit(std::chrono::milliseconds within) {
  if (pid_ <= 0) return -1;
  if (reaped_) return exit_status_;
  const auto deadline = Clock::now() + within;
  for (;;) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      reap(status);
      return exit_status_;
    }
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ChildProcess::signal(int sig) const {
  if (running()) ::kill(pid_, sig);
}

void ChildProcess::stop(int sig) {
  if (!running()) return;
  ::kill(pid_, sig);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reap(status);
}

double ChildProcess::status_mb(const char* field) const {
  if (!running()) return 0;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string key;
  while (in >> key) {
    if (key == field) {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

}  // namespace picolm::tools
