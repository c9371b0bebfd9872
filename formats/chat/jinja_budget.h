// RenderBudget: the work and the string sizes one rendering of a chat template may reach (the limits
// of RenderOptions, jinja_render.h). The renderer makes one per rendering and puts it in effect on its
// thread while it runs; what it calls — printing, JSON, comparison, copying lists, building and
// splitting strings — charges the budget in effect for each item it visits or makes and for every
// kBytesPerStep bytes of string it makes. Work is what is charged, not size in memory: a list that holds
// one list twice, 64 levels deep, is 65 lists in memory but 2^64 items to print or compare.
//
// Once spent, a budget stays spent with its first error (ResourceExhausted, naming the limit). An
// operation that can return an error returns it; one that cannot (printing, ==) stops early with a
// partial result, and the renderer returns the budget's error after it. Outside a rendering nothing
// is charged. Not thread-safe: a budget belongs to the thread that renders.
#ifndef TESSERA_FORMATS_CHAT_JINJA_BUDGET_H_
#define TESSERA_FORMATS_CHAT_JINJA_BUDGET_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::formats::chat {

class RenderBudget {
 public:
  static constexpr int64_t kBytesPerStep = 64;
  // A value made as an item of a list (or a dict's entry) holds ~128 bytes: it costs two steps.
  static constexpr int64_t kStepsPerItem = 2;

  RenderBudget(int64_t max_steps, size_t max_string_bytes)
      : max_steps_(max_steps), max_string_bytes_(max_string_bytes) {}
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // The budget in effect on this thread, or nullptr outside a rendering.
  static RenderBudget* Current() { return current_; }

  // Puts `budget` in effect on this thread for the scope's lifetime (scopes nest).
  class Scope {
   public:
    explicit Scope(RenderBudget* budget) : previous_(current_) { current_ = budget; }
    ~Scope() { current_ = previous_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    RenderBudget* previous_;
  };

  // Adds `steps` (>= 0); false once the total would pass max_steps (then, and from then on).
  bool Charge(int64_t steps) {
    if (!status_.ok()) return false;
    if (steps <= max_steps_ - steps_) {  // No overflow: 0 <= steps_ <= max_steps_ here.
      steps_ += steps;
      return true;
    }
    steps_ = max_steps_;
    status_ = absl::ResourceExhaustedError(absl::StrCat("the template ran more than ", max_steps_, " steps"));
    return false;
  }
  // Whether a string of `bytes` may be made; if not, the budget is spent with the size error.
  bool FitsString(size_t bytes) {
    if (!status_.ok()) return false;
    if (bytes <= max_string_bytes_) return true;
    status_ = absl::ResourceExhaustedError(
        absl::StrCat("a string longer than ", max_string_bytes_, " bytes (the limit of one value)"));
    return false;
  }
  // A string of `bytes` made: FitsString, and its steps charged.
  bool ChargeString(size_t bytes) {
    return FitsString(bytes) && Charge(static_cast<int64_t>(bytes / kBytesPerStep));
  }

  bool spent() const { return !status_.ok(); }
  // OK until spent; then the error that spent it.
  const absl::Status& status() const { return status_; }
  int64_t steps() const { return steps_; }
  size_t max_string_bytes() const { return max_string_bytes_; }

 private:
  static inline thread_local RenderBudget* current_ = nullptr;

  const int64_t max_steps_;
  const size_t max_string_bytes_;
  int64_t steps_ = 0;
  absl::Status status_;
};

// The budget in effect, for code that charges it: each returns OK (always, outside a rendering) or the
// budget's error once spent.
inline absl::Status Spend(int64_t steps) {
  RenderBudget* b = RenderBudget::Current();
  if (b == nullptr || b->Charge(steps)) return absl::OkStatus();
  return b->status();
}
inline absl::Status SpendItems(uint64_t items) {  // `items` values made (kStepsPerItem each).
  const uint64_t cap = static_cast<uint64_t>(INT64_MAX / RenderBudget::kStepsPerItem);
  return Spend(static_cast<int64_t>(items < cap ? items : cap) * RenderBudget::kStepsPerItem);
}
inline absl::Status SpendString(size_t bytes) {
  RenderBudget* b = RenderBudget::Current();
  if (b == nullptr || b->ChargeString(bytes)) return absl::OkStatus();
  return b->status();
}
inline absl::Status CheckStringSize(size_t bytes) {
  RenderBudget* b = RenderBudget::Current();
  if (b == nullptr || b->FitsString(bytes)) return absl::OkStatus();
  return b->status();
}
inline bool BudgetSpent() {
  const RenderBudget* b = RenderBudget::Current();
  return b != nullptr && b->spent();
}

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_BUDGET_H_
