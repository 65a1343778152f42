// The threads that serve HTTP connections. cpp-httplib (0.11, Debian 12) runs one connection per
// thread from start to close: an idle keep-alive connection, a client that sends half a request and
// then nothing, or one that trickles a byte a second each hold a thread until their timeout. With
// a fixed pool sized for the engine queue (issue 15: max-queue + 4 = 20 threads) twenty such clients
// stalled every endpoint, /health included.
//
// ConnectionPool grows on demand up to `max_threads` (a connection waits in a queue only when all of
// them are busy), gives each thread a small explicit stack so that hundreds of them stay cheap in
// address space (32-bit ARM has 3 GB of it), and lets threads that sat idle for `idle_exit` exit,
// keeping `min_threads`. It is handed to httplib through Server::new_task_queue.
//
// Thread-safety: enqueue() from httplib's listener thread, shutdown() once from its owner; jobs run on
// the pool's threads. shutdown() runs every job already queued (each closes its socket) and joins.
#pragma once
#include <httplib.h>
#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace picolm {

struct ConnectionPoolOptions {
  size_t min_threads = 4;
  size_t max_threads = 512;
  size_t stack_bytes = size_t(1) << 20;
  std::chrono::milliseconds idle_exit{30000};
};

class ConnectionPool final : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(ConnectionPoolOptions opts);
  ~ConnectionPool() override;  // shutdown() if the owner did not
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  struct Stats {
    size_t threads = 0, busy = 0, queued = 0, peak_threads = 0;  // busy: running a connection
  };
  Stats stats() const;

 private:
  static void* thread_main(void* self);
  void run();
  bool spawn_locked();  // false if the system refused a thread
  void reap_locked();   // joins threads that have exited

  ConnectionPoolOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // jobs or shutdown, for the workers
  std::condition_variable exit_cv_;  // a worker left, for shutdown()
  std::deque<std::function<void()>> jobs_;
  std::vector<pthread_t> exited_;    // finished threads not joined yet
  size_t live_ = 0, idle_ = 0, running_ = 0, peak_ = 0;
  bool shutdown_ = false, joined_ = false;
};

}  // namespace picolm
