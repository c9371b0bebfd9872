#include "layout/schedule.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::layout {
namespace {

// Interleaved order (as Megatron): the k-th forward of a rank is micro-batch (k / (pp·v))·pp + k % pp
// of chunk (k / pp) % v; the k-th backward the same micro-batch of chunk v-1 - (k / pp) % v.
PipeAction InterleavedAction(PipeOp op, int k, int pp, int chunks) {
  const int group = pp * chunks;
  PipeAction a;
  a.op = op;
  a.micro_batch = (k / group) * pp + k % pp;
  const int c = (k % group) / pp;
  a.chunk = op == PipeOp::kForward ? c : chunks - 1 - c;
  return a;
}

}  // namespace

absl::StatusOr<std::vector<PipeAction>> MakeSchedule(PipeSchedule schedule, int pp, int chunks, int rank,
                                                     int m) {
  if (pp < 1 || rank < 0 || rank >= pp || m < 1) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline rank ", rank, " of ", pp, " with ", m,
                                                   " micro-batches is not a valid schedule"));
  }
  std::vector<PipeAction> out;
  if (schedule == PipeSchedule::kOneFOneB) {
    if (chunks != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel.pp_chunks: ", chunks, " needs pp_schedule interleaved (1f1b runs one chunk)"));
    }
    const int warmup = std::min(pp - rank - 1, m);
    for (int i = 0; i < warmup; ++i) out.push_back({PipeOp::kForward, i, 0});
    for (int i = 0; i < m - warmup; ++i) {
      out.push_back({PipeOp::kForward, warmup + i, 0});
      out.push_back({PipeOp::kBackward, i, 0});
    }
    for (int i = m - warmup; i < m; ++i) out.push_back({PipeOp::kBackward, i, 0});
    return out;
  }
  if (chunks < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel.pp_chunks: ", chunks, " must be at least 2 with pp_schedule interleaved"));
  }
  if (m % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.pp_schedule: interleaved needs the micro-batches per "
                                                   "step (", m, ") to be a multiple of pp (", pp, ")"));
  }
  const int total = m * chunks;
  int warmup = total;
  if (m != pp) warmup = std::min(total, (pp - rank - 1) * 2 + (chunks - 1) * pp);
  for (int k = 0; k < warmup; ++k) out.push_back(InterleavedAction(PipeOp::kForward, k, pp, chunks));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(InterleavedAction(PipeOp::kForward, warmup + i, pp, chunks));
    out.push_back(InterleavedAction(PipeOp::kBackward, i, pp, chunks));
  }
  for (int i = std::max(0, total - warmup); i < total; ++i) {
    out.push_back(InterleavedAction(PipeOp::kBackward, i, pp, chunks));
  }
  return out;
}

SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks,
                               double forward_cost, double backward_cost) {
  const int pp = static_cast<int>(per_rank.size());
  const int v = pp * chunks;
  SimulatedStep out;
  out.peak_in_flight.assign(pp, 0);
  // Finish time of (op, micro-batch, virtual stage).
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  std::vector<int> in_flight(pp, 0);
  double busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (next[r] < per_rank[r].size()) {
        const PipeAction& a = per_rank[r][next[r]];
        const int s = a.chunk * pp + r;
        double ready = clock[r];
        auto need = [&](int op, int stage) {
          auto it = done.find({op, a.micro_batch, stage});
          if (it == done.end()) return false;
          ready = std::max(ready, it->second);
          return true;
        };
        bool ok;
        if (a.op == PipeOp::kForward) {
          ok = s == 0 || need(0, s - 1);
        } else {
          ok = need(0, s) && (s == v - 1 || need(1, s + 1));
        }
        if (!ok) break;
        const double cost = a.op == PipeOp::kForward ? forward_cost : backward_cost;
        clock[r] = ready + cost;
        busy += cost;
        done[{a.op == PipeOp::kForward ? 0 : 1, a.micro_batch, s}] = clock[r];
        in_flight[r] += a.op == PipeOp::kForward ? 1 : -1;
        out.peak_in_flight[r] = std::max(out.peak_in_flight[r], in_flight[r]);
        ++next[r];
        progress = true;
      }
    }
  }
  out.completes = true;
  for (int r = 0; r < pp; ++r) out.completes &= next[r] == per_rank[r].size();
  for (double c : clock) out.makespan = std::max(out.makespan, c);
  out.bubble = out.makespan > 0 ? 1.0 - busy / (pp * out.makespan) : 0;
  return out;
}

}  // namespace tessera::layout
