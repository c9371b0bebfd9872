#include "parallel/device/live_bytes.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>

namespace tessera::parallel {
namespace {

std::atomic<int64_t> live{0};
std::atomic<int64_t> peak{0};
std::atomic<bool> installed{false};

void Add(int64_t n) {
  const int64_t now = live.fetch_add(n) + n;
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

// Each counted allocation is the base allocator's block with a header holding its size; the tensor's
// data starts after the header (which keeps c10's 64-byte alignment). Data pointer and context are the
// same, so raw_allocate / raw_deleter users work too.
constexpr size_t kHeader = 64;
c10::DeleterFnPtr base_deleter = nullptr;

void Release(void* data) {
  void* block = static_cast<char*>(data) - kHeader;
  live.fetch_sub(*static_cast<int64_t*>(block));
  base_deleter(block);
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    void* block = base_->raw_allocate(n + kHeader);
    *static_cast<int64_t*>(block) = static_cast<int64_t>(n);
    Add(static_cast<int64_t>(n));
    void* data = static_cast<char*>(block) + kHeader;
    return c10::DataPtr(data, data, &Release, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &Release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void InstallLiveBytesCounter() {
  c10::Allocator* base = c10::GetCPUAllocator();
  // Needs a base whose blocks can be freed by pointer alone (c10's default CPU allocator can).
  if (base->raw_deleter() == nullptr || installed.exchange(true)) return;
  base_deleter = base->raw_deleter();
  // Owned by c10 for the life of the process (allocations outlive any scope here).
  static CountingAllocator* counting = new CountingAllocator(base);
  c10::SetCPUAllocator(counting, /*priority=*/1);
}

bool LiveBytesCounted() { return installed.load(); }

int64_t LiveBytes() { return live.load(); }

int64_t PeakLiveBytes() { return peak.load(); }

void ResetPeakLiveBytes() { peak.store(live.load()); }

}  // namespace tessera::parallel
