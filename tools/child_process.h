// A program run as a child process, for the tools and tests that start picolm-provider themselves
// (picolm-loadtest, picolm-agentbench, test_hardening): spawn with extra environment entries, its
// stdout (and stderr, unless it goes to a log file) collected by a reader thread so the child can
// never block on a full pipe, waits for a text or for its exit, signals, /proc/PID/status figures.
// Thread-safety: output() and wait_for() may be called from any thread; the rest from the owner.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace picolm::tools {

struct ChildOptions {
  std::vector<std::string> argv;       // argv[0] is the program's path (no PATH search)
  std::vector<std::string> extra_env;  // "NAME=VALUE" entries added to this process's environment
  std::string stderr_log;              // append stderr to this file; "" = stderr joins the output
};

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();  // SIGKILL if still running, then reaped

  // Starts the program; false with `why` if the pipe or fork failed. (A program that cannot be
  // executed exits with status 127, which wait_exit reports.)
  bool start(const ChildOptions& options, std::string& why);

  // Everything the child wrote so far (its first 4 MB; later output is read and dropped).
  std::string output() const;
  // Waits until `text` appears in the output; false at the deadline or when the child has closed
  // its output without writing it.
  bool wait_for(const std::string& text, std::chrono::milliseconds within) const;
  // The port of picolm-provider's "listening on 127.0.0.1:PORT" line, waiting for it; 0 if it did not
  // come within the time (then `why` says what the output was).
  int listening_port(std::chrono::milliseconds within, std::string& why) const;
  // Polls GET /health on 127.0.0.1:port until 200; false with `why` at the deadline or if the
  // child exited first.
  bool wait_healthy(int port, std::chrono::milliseconds within, std::string& why);

  // Exit status (a signal's as 128 + number), or -1 if it did not exit within the time.
  int wait_exit(std::chrono::milliseconds within);
  void signal(int sig) const;
  // Sends `sig` if it still runs, then reaps it (SIGTERM: the provider drains and exits).
  void stop(int sig);
  bool running() const { return pid_ > 0 && !reaped_; }
  pid_t pid() const { return pid_; }
  // A /proc/PID/status figure in MB ("VmRSS:" resident now, "VmHWM:" its peak as the kernel
  // counted it); 0 once the child is gone.
  double status_mb(const char* field) const;

 private:
  void reap(int status);

  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_status_ = -1;
  std::thread reader_;
  mutable std::mutex mu_;
  std::string out_;     // guarded by mu_
  bool closed_ = false;  // guarded by mu_: the child closed its output
};

// The port in a "listening on 127.0.0.1:PORT" line of `out`, 0 if none.
int listening_port_in(const std::string& out);

}  // namespace picolm::tools
