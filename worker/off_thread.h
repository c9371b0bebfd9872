// OffThread<T>: one call run on a thread of its own, so that the thread that started it never waits on
// it. The worker's loop thread reads and writes the user's files under a job's OUTPUT_DIR, which may lie
// on a network or FUSE mount that stopped answering: an open or a read there can block for ever (an NFS
// hard mount whose server is gone), and the loop must keep heartbeating and serving the node's other
// jobs. The owner polls for the result (Take) or waits for it a bounded time (WaitFor); a call it stops
// waiting for is abandoned: its thread finishes (or never does) on its own, and its result is dropped.
//
// Contract: `fn` must not throw and must own everything it touches (captures by value): it may outlive
// the OffThread and whatever started it. Not thread-safe itself (one owner thread).
#ifndef TESSERA_WORKER_OFF_THREAD_H_
#define TESSERA_WORKER_OFF_THREAD_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

namespace tessera::worker {

template <typename T>
class OffThread {
 public:
  // Starts `fn` on a new, detached thread. False (and nothing started) when the system refuses a
  // thread: the caller tries again later. Precondition: !busy().
  bool Start(std::function<T()> fn) {
    auto state = std::make_shared<State>();
    try {
      std::thread([state, fn = std::move(fn)]() mutable {
        T result = fn();
        std::lock_guard<std::mutex> lock(state->mu);
        state->result.emplace(std::move(result));
        state->done.notify_all();
      }).detach();
    } catch (const std::system_error&) {
      return false;
    }
    state_ = std::move(state);
    return true;
  }

  // Started, and its result not yet taken.
  bool busy() const { return state_ != nullptr; }

  // The result once `fn` has returned (busy() is false after it); nullopt while it runs or when idle.
  std::optional<T> Take() {
    if (!state_) return std::nullopt;
    std::optional<T> out;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!state_->result.has_value()) return std::nullopt;
      out = std::move(state_->result);
    }
    state_.reset();
    return out;
  }

  // Waits at most `timeout` for the result; nullopt when `fn` is still running (it stays busy()).
  std::optional<T> WaitFor(std::chrono::milliseconds timeout) {
    if (!state_) return std::nullopt;
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->done.wait_for(lock, timeout, [&] { return state_->result.has_value(); });
    }
    return Take();
  }

  // Stops waiting: whatever `fn` returns is dropped. busy() is false after it.
  void Abandon() { state_.reset(); }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable done;
    std::optional<T> result;  // Guarded by mu.
  };
  std::shared_ptr<State> state_;
};

}  // namespace tessera::worker

#endif  // TESSERA_WORKER_OFF_THREAD_H_
