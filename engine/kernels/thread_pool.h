// One persistent pool of worker threads (the caller's thread takes part as worker 0).
// Thread-safety: parallel_for is called by one thread at a time (the pool's owner).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace picolm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1 (total, including the caller)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Runs fn(task, worker) for task in [0, n_tasks); returns when all are done.
  // worker is in [0, size()) and identifies the thread (for per-thread scratch).
  void parallel_for(int n_tasks, const std::function<void(int task, int worker)>& fn);

  // Scratch memory owned by the pool for kernels, 64-byte aligned. Slot 0 belongs to the owner
  // thread (e.g. activations prepared before parallel_for); slot 1 + w belongs to worker w. Grows,
  // never shrinks; the pointer stays valid until the next call for the same slot. Each slot must
  // be used by one thread at a time.
  uint8_t* scratch(int slot, size_t bytes);

  // Number of physical cores (best effort), the default for -j.
  static int default_threads();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace picolm
