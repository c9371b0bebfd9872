#include "layout/schedule.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>
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
  if (schedule != PipeSchedule::kInterleaved && chunks != 1) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.pp_chunks: ", chunks, " needs pp_schedule interleaved (",
                                                   Name(schedule), " runs one chunk)"));
  }
  if (schedule == PipeSchedule::kZeroBubbleH1) {
    // Every rank makes the whole pipeline's schedule from the same costs: the same one everywhere.
    auto all = MakeZeroBubbleH1(pp, m, PipeCosts{});
    if (!all.ok()) return all.status();
    return std::move((*all)[rank]);
  }
  if (schedule == PipeSchedule::kOneFOneB) {
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

absl::StatusOr<std::vector<std::vector<PipeAction>>> MakeZeroBubbleH1(int pp, int m, const PipeCosts& costs) {
  if (pp < 1 || m < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a zero-bubble schedule of ", pp, " stages and ", m,
                                                   " micro-batches is not a valid schedule"));
  }
  if (!(costs.forward > 0 && costs.backward > 0 && costs.weight > 0)) {
    return absl::InvalidArgumentError("a zero-bubble schedule needs positive forward, backward and weight costs");
  }
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  // Finish times of F and B of (micro-batch) on each stage (unknown until scheduled).
  std::vector<std::vector<double>> f_done(pp, std::vector<double>(m, kUnknown)), b_done = f_done;
  std::vector<std::vector<PipeAction>> out(pp);
  std::vector<double> clock(pp, 0);
  std::vector<int> next_f(pp, 0), next_b(pp, 0), next_w(pp, 0);
  auto remaining = [&](int r) { return next_w[r] < m; };
  // A rank with nothing to run at its clock waits (`waiting`) until another rank has scheduled
  // something; when every rank with work waits, each moves on to its earliest known input.
  std::vector<bool> waiting(pp, false);
  // Every iteration schedules one action, on the rank whose clock is earliest among those with work:
  // whatever starts before that time is already scheduled, so its inputs' finish times are known.
  for (int64_t guard = 0; guard < int64_t{8} * pp * m * (pp + 2) + 16; ++guard) {
    int r = -1;
    bool any_work = false;
    for (int q = 0; q < pp; ++q) {
      any_work |= remaining(q);
      if (remaining(q) && !waiting[q] && (r < 0 || clock[q] < clock[r])) r = q;
    }
    if (!any_work) return out;
    auto ready_times = [&](int q, double* b_ready, double* f_ready) {
      const int fb = next_f[q], bb = next_b[q];
      // B of micro-batch bb: its own forward, and the next stage's B.
      *b_ready = bb < fb ? std::max(f_done[q][bb], q + 1 < pp ? b_done[q + 1][bb] : 0.0) : kUnknown;
      // F of micro-batch fb: the previous stage's F, within 1F1B's bound of pp − q micro-batches
      // forwarded and not yet B'd (their activations), and with fewer than pp micro-batches B'd and
      // not yet W'd (each keeps what its W needs: its linears' inputs and output gradients) — else the
      // oldest W runs first. The cap costs no time with F = B = W (schedule_test.cc) and keeps the
      // deferred W's from growing with the micro-batch count.
      *f_ready = fb < m && fb - bb < pp - q && bb - next_w[q] < pp ? (q > 0 ? f_done[q - 1][fb] : 0.0) : kUnknown;
    };
    if (r < 0) {  // Every rank with work waits: the one whose known input comes first moves to it.
      int first = -1;
      double first_at = kUnknown;
      for (int q = 0; q < pp; ++q) {
        if (!remaining(q)) continue;
        double b_ready, f_ready;
        ready_times(q, &b_ready, &f_ready);
        const double at = std::max(clock[q], std::min(b_ready, f_ready));
        if (at < first_at) first = q, first_at = at;
      }
      if (first < 0) {
        return absl::InternalError(absl::StrCat("the zero-bubble schedule of ", pp, " stages and ", m,
                                                " micro-batches is stuck"));
      }
      clock[first] = first_at;
      std::fill(waiting.begin(), waiting.end(), false);
      continue;
    }
    const double t = clock[r];
    double b_ready, f_ready;
    ready_times(r, &b_ready, &f_ready);
    if (b_ready <= t) {
      out[r].push_back({PipeOp::kBackward, next_b[r], 0});
      clock[r] = t + costs.backward;
      b_done[r][next_b[r]++] = clock[r];
    } else if (f_ready <= t) {
      out[r].push_back({PipeOp::kForward, next_f[r], 0});
      clock[r] = t + costs.forward;
      f_done[r][next_f[r]++] = clock[r];
    } else if (next_w[r] < next_b[r]) {
      out[r].push_back({PipeOp::kWeight, next_w[r]++, 0});
      clock[r] = t + costs.weight;
    } else {
      waiting[r] = true;
      continue;
    }
    std::fill(waiting.begin(), waiting.end(), false);
  }
  return absl::InternalError("the zero-bubble schedule did not finish");
}

SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks,
                               double forward_cost, double backward_cost) {
  return SimulateSchedule(per_rank, chunks, PipeCosts{forward_cost, backward_cost, 0});
}

SimulatedStep SimulateSchedule(const std::vector<std::vector<PipeAction>>& per_rank, int chunks, const PipeCosts& costs) {
  const int pp = static_cast<int>(per_rank.size());
  // Backwards split into B and W: those with a W in their rank's actions.
  std::set<std::tuple<int, int, int>> split;  // (rank, micro-batch, chunk)
  for (int r = 0; r < pp; ++r) {
    for (const PipeAction& a : per_rank[r]) {
      if (a.op == PipeOp::kWeight) split.insert({r, a.micro_batch, a.chunk});
    }
  }
  const int v = pp * chunks;
  SimulatedStep out;
  out.peak_in_flight.assign(pp, 0);
  out.peak_weight_pending.assign(pp, 0);
  // Finish time of (op, micro-batch, virtual stage).
  std::map<std::tuple<int, int, int>, double> done;
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  std::vector<int> in_flight(pp, 0), pending(pp, 0);
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
        double cost;
        if (a.op == PipeOp::kForward) {
          ok = s == 0 || need(0, s - 1);
          cost = costs.forward;
        } else if (a.op == PipeOp::kBackward) {
          ok = need(0, s) && (s == v - 1 || need(1, s + 1));
          cost = costs.backward + (split.count({r, a.micro_batch, a.chunk}) ? 0 : costs.weight);
        } else {
          ok = need(1, s);
          cost = costs.weight;
        }
        if (!ok) break;
        clock[r] = ready + cost;
        busy += cost;
        done[{static_cast<int>(a.op), a.micro_batch, s}] = clock[r];
        if (a.op != PipeOp::kWeight) in_flight[r] += a.op == PipeOp::kForward ? 1 : -1;
        if (a.op == PipeOp::kBackward && split.count({r, a.micro_batch, a.chunk})) ++pending[r];
        if (a.op == PipeOp::kWeight) --pending[r];
        out.peak_weight_pending[r] = std::max(out.peak_weight_pending[r], pending[r]);
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
