// Persistent worker pool. Workers spin briefly after each job (a decode step issues hundreds of
// small matmuls back to back, and a condition-variable wake costs tens of microseconds), then sleep.
#include "kernels/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace picolm {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

// Spin iterations before a worker (or the owner) falls back to blocking; ~50-100 us.
constexpr int kSpinIters = 2000;

struct AlignedFree {
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }
};

struct ScratchBuf {
  std::unique_ptr<uint8_t[], AlignedFree> data;
  size_t size = 0;
};

}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> threads;

  std::mutex mu;
  std::condition_variable cv_start;  // owner -> workers: a new generation
  std::condition_variable cv_done;   // last worker -> owner
  std::atomic<bool> stop{false};     // set once, by the destructor
  std::atomic<uint64_t> generation{0};

  // The current job; written by the owner before generation is bumped (release), read after.
  const std::function<void(int, int)>* fn = nullptr;
  int n_tasks = 0;
  std::atomic<int> next_task{0};
  std::atomic<int> active{0};  // workers (excluding the owner) that have not finished this job
  std::exception_ptr error;    // first exception thrown by a task; guarded by mu
  std::atomic<bool> failed{false};

  std::vector<ScratchBuf> scratch;  // [1 + n_threads]

  void run_tasks(int worker) {
    for (;;) {
      const int t = next_task.fetch_add(1, std::memory_order_relaxed);
      if (t >= n_tasks) break;
      if (failed.load(std::memory_order_relaxed)) continue;  // drain remaining tasks after an error
      try {
        (*fn)(t, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  }

  void worker_loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = seen;
      for (int i = 0; i < kSpinIters && g == seen; ++i) {
        g = generation.load(std::memory_order_acquire);
        if (g == seen) cpu_relax();
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mu);
        cv_start.wait(lock, [&] { return (g = generation.load(std::memory_order_acquire)) != seen; });
      }
      // The destructor bumps the generation after setting stop; no job runs concurrently with it.
      if (stop.load(std::memory_order_acquire)) return;
      // The owner cannot start another job before this one counts down, so g is the current job.
      seen = g;
      run_tasks(worker);
      if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu);
        cv_done.notify_one();
      }
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  impl_->n_threads = n_threads < 1 ? 1 : n_threads;
  impl_->scratch.resize(static_cast<size_t>(impl_->n_threads) + 1);
  for (int w = 1; w < impl_->n_threads; ++w) impl_->threads.emplace_back([this, w] { impl_->worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true, std::memory_order_release);
    // Wake spinners too: a bumped generation with stop set makes them exit.
    impl_->generation.fetch_add(1, std::memory_order_release);
  }
  impl_->cv_start.notify_all();
  for (auto& t : impl_->threads) t.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int task, int worker)>& fn) {
  if (n_tasks <= 0) return;
  Impl& p = *impl_;
  if (p.n_threads == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  p.fn = &fn;
  p.n_tasks = n_tasks;
  p.next_task.store(0, std::memory_order_relaxed);
  p.failed.store(false, std::memory_order_relaxed);
  p.active.store(p.n_threads - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.generation.fetch_add(1, std::memory_order_release);
  }
  p.cv_start.notify_all();
  p.run_tasks(0);
  bool done = false;
  for (int i = 0; i < kSpinIters * 4; ++i) {
    if (p.active.load(std::memory_order_acquire) == 0) {
      done = true;
      break;
    }
    cpu_relax();
  }
  if (!done) {
    std::unique_lock<std::mutex> lock(p.mu);
    p.cv_done.wait(lock, [&] { return p.active.load(std::memory_order_acquire) == 0; });
  }
  p.fn = nullptr;
  if (p.failed.load(std::memory_order_relaxed)) {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(p.mu);
      e = std::exchange(p.error, nullptr);
    }
    if (e) std::rethrow_exception(e);
  }
}

uint8_t* ThreadPool::scratch(int slot, size_t bytes) {
  ScratchBuf& b = impl_->scratch.at(static_cast<size_t>(slot));
  if (b.size < bytes) {
    const size_t sz = (bytes + 63) & ~size_t{63};
    b.data.reset(static_cast<uint8_t*>(::operator new[](sz, std::align_val_t(64))));
    b.size = sz;
  }
  return b.data.get();
}

int ThreadPool::default_threads() {
  int logical = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) logical = CPU_COUNT(&set);
  // Count distinct (package, core) pairs among the CPUs we may run on: SMT siblings share a core.
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core_f(base + "core_id"), pkg_f(base + "physical_package_id");
    int core = -1, pkg = -1;
    if (!(core_f >> core) || !(pkg_f >> pkg)) {
      cores.clear();
      break;
    }
    cores.emplace(pkg, core);
  }
  if (!cores.empty() && static_cast<int>(cores.size()) < logical) return static_cast<int>(cores.size());
#endif
  return logical > 0 ? logical : 1;
}

}  // namespace picolm
