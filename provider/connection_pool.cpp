#include "connection_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace picolm {

ConnectionPool::ConnectionPool(ConnectionPoolOptions opts) : opts_(opts) {
  opts_.max_threads = std::max<size_t>(1, opts_.max_threads);
  opts_.min_threads = std::clamp<size_t>(opts_.min_threads, 1, opts_.max_threads);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < opts_.min_threads; ++i) spawn_locked();
}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::spawn_locked() {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setstacksize(&attr, opts_.stack_bytes);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, &ConnectionPool::thread_main, this);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    spdlog::warn("HTTP: cannot start a connection thread ({} live): {}", live_, std::strerror(rc));
    return false;
  }
  ++live_;
  peak_ = std::max(peak_, live_);
  return true;
}

void ConnectionPool::reap_locked() {
  for (pthread_t t : exited_) pthread_join(t, nullptr);
  exited_.clear();
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked();
    jobs_.push_back(std::move(fn));
    // One thread per waiting connection, up to the cap; beyond it connections queue (and the
    // kernel's listen backlog holds the ones not accepted yet).
    if (jobs_.size() > idle_ && live_ < opts_.max_threads) spawn_locked();
  }
  cv_.notify_one();
}

void* ConnectionPool::thread_main(void* self) {
  static_cast<ConnectionPool*>(self)->run();
  return nullptr;
}

void ConnectionPool::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    const bool woke = cv_.wait_for(lock, opts_.idle_exit, [&] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (jobs_.empty() && (shutdown_ || (!woke && live_ > opts_.min_threads))) break;
    if (jobs_.empty()) continue;
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    lock.unlock();
    fn();  // httplib's process_and_close_socket: catches what the handlers throw
    fn = nullptr;
    lock.lock();
    --running_;
  }
  --live_;
  exited_.push_back(pthread_self());
  exit_cv_.notify_all();
}

void ConnectionPool::shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  if (joined_) return;
  shutdown_ = true;
  cv_.notify_all();
  exit_cv_.wait(lock, [&] { return live_ == 0; });
  reap_locked();
  joined_ = true;
}

ConnectionPool::Stats ConnectionPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{live_, running_, jobs_.size(), peak_};
}

}  // namespace picolm
