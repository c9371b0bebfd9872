#include "plan/planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "layout/check_layout.h"
#include "layout/schedule.h"
#include "layout/tp_grid.h"

namespace tessera::plan {
namespace {

constexpr double kBytes = 4;  // fp32.

using layout::PipeSchedule;
using layout::SpMode;
using layout::TpMode;

// How a layout's tensor parallelism divides things (per rank).
struct TpSplits {
  int q = 1;              // Grid side (1 for 1D).
  int samples = 1;        // Micro-batch samples split.
  int hidden = 1;         // Hidden width of activations between blocks split.
  int heads = 1;          // Attention heads split.
  int weights = 1;        // Linear weights split.
  int vocab = 1;          // Embedding / logits split.
};

TpSplits Splits(const Layout& l) {
  const layout::TpGrid g = layout::TpGridOf(l.tp_mode, l.tp, l.tp_depth);
  return {g.q, g.SampleSplit(), g.HiddenSplit(), g.HeadSplit(), g.WeightSplit(), g.VocabSplit()};
}

std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

}  // namespace

std::string Invalid(const PlanInput& in, const Layout& l) {
  if (l.WorldSize() != in.devices) return "dp·pp·tp·sp is not the device count";
  const std::vector<layout::LayoutProblem> problems =
      layout::LayoutProblems(in.model, l, {in.micro_batch, in.global_batch}, in.target);
  return problems.empty() ? "" : absl::StrCat(problems[0].field, ": ", problems[0].message);
}

Prediction Predict(const PlanInput& in, const Layout& l) {
  const ModelConfig& m = in.model;
  const double L = m.layers, h = m.hidden, V = m.vocab, T = m.seq_len;
  const TpSplits s = Splits(l);
  const int micro_batches =
      static_cast<int>(std::max<int64_t>(1, layout::MicroBatchesPerStep({in.micro_batch, in.global_batch}, l.dp)));
  Prediction p;
  p.layout = l;

  // Parameters on the device holding the most (the first stage: its blocks and the embeddings).
  // GPT-2: 12h² + 13h per block; Llama by its kv heads and SwiGLU width (ModelConfig).
  // Mixture of Experts: the mean block's experts (all of them, not only the active ones: each is a
  // parameter with its state) are split over ep ranks and replicated over the dp/ep others; each
  // expert is split over tp (1D) or over the grid's hidden axis only (q ranks; docs/models.md).
  const double expert_block = m.IsMoe() ? static_cast<double>(m.experts) * 3 * h * m.MoeFfnHidden() * m.MoeLayers() / L
                                        : 0;
  const double dense_block = m.MeanBlockParameters() - expert_block;
  const double expert_split = l.tp_mode == TpMode::k1D ? l.tp : s.q;
  const double expert_dev = L / l.pp * expert_block / l.ep / expert_split;
  // The embeddings (first stage) or an untied head (last stage), whichever is larger; both where one
  // rank holds both ends (no pipeline, or zbv's V); norms neglected.
  const bool both_ends = l.pp == 1 || layout::PlacementOf(l.pp_schedule) == layout::StagePlacement::kV;
  const double outside = both_ends ? m.EmbeddingParameters() + m.HeadParameters()
                                   : std::max(m.EmbeddingParameters(), m.HeadParameters());
  const double params_dev =
      L / l.pp * dense_block / s.weights + expert_dev + outside / (l.tp_mode == TpMode::k1D ? l.tp : s.q);
  p.state_bytes = 16 * params_dev;

  // Pipeline: bubble and peak micro-batch chunks alive on the first stage, from the schedule.
  double peak_chunks = 1;
  if (l.pp > 1) {
    std::vector<std::vector<layout::PipeAction>> ranks;
    for (int r = 0; r < l.pp; ++r) {
      auto a = layout::MakeSchedule(l.pp_schedule, l.pp, l.pp_chunks, r, micro_batches);
      ranks.push_back(a.ok() ? *a : std::vector<layout::PipeAction>{});
    }
    // Per chunk: F, B (input gradient) and W (weight gradient) of equal cost; a backward not split
    // into B and W costs both.
    const double c = 1.0 / l.pp_chunks;
    layout::SimulatedStep sim =
        layout::SimulateSchedule(ranks, l.pp_chunks, layout::PipeCosts{c, c, c}, layout::PlacementOf(l.pp_schedule));
    p.bubble = sim.bubble;
    peak_chunks = *std::max_element(sim.peak_in_flight.begin(), sim.peak_in_flight.end());
  }

  // Compute.
  const double tokens = static_cast<double>(in.global_batch) * T;
  double flops = tokens * m.TrainingFlopsPerToken();
  if (in.activation_checkpointing) flops *= 4.0 / 3.0;
  p.compute_s = flops / in.devices / in.device.flops / (1 - p.bubble);

  // Communication per device per step.
  const double b = in.micro_batch, sp = l.sp;
  const double tokens_mb = b * T / sp / s.samples;  // Tokens of one micro-batch on this rank.
  const double layers_dev = L / l.pp;
  double bytes = 0;
  const int replicas = l.dp * l.sp;
  if (replicas > 1) bytes += 2.0 * (replicas - 1) / replicas * (params_dev - expert_dev) * kBytes;
  const double expert_replicas = static_cast<double>(replicas) / l.ep;  // An expert's copies.
  if (expert_replicas > 1) bytes += 2.0 * (expert_replicas - 1) / expert_replicas * expert_dev * kBytes;
  if (m.IsMoe() && l.ep > 1) {
    // Each sparse block sends its tokens' k assignment rows to their experts' ranks and back, in
    // forward and again in backward (and once more forward when recomputed): all-to-all (ep−1)/ep.
    const double exchanges = in.activation_checkpointing ? 6 : 4;
    const double sparse_dev = static_cast<double>(m.MoeLayers()) / l.pp;
    bytes += micro_batches * sparse_dev * exchanges * (l.ep - 1.0) / l.ep * tokens_mb * m.experts_per_token * h * kBytes;
  }
  if (l.tp > 1 && l.tp_mode == TpMode::k1D) {
    const double t = l.tp;
    const double all_reduces = 4 * layers_dev + 2 + (in.activation_checkpointing ? 2 * layers_dev : 0);
    bytes += micro_batches * all_reduces * 2 * (t - 1) / t * tokens_mb * h * kBytes;
  } else if (l.tp > 1) {
    const double q = s.q;
    const double linears[4][2] = {{h, 3 * h}, {h, h}, {h, 4 * h}, {4 * h, h}};
    double per_layer = 0;
    for (const auto& io : linears) {
      const double in_dim = io[0], out_dim = io[1];
      if (l.tp_mode == TpMode::k3D) {
        const double a = tokens_mb * in_dim / q, w = in_dim / (q * q) * out_dim / q;
        const double fwd = (q - 1) * a + (q - 1) * w + (q - 1) * tokens_mb * out_dim / q;
        const double bwd = (q - 1) * a + (q - 1) * w + (q - 1) * tokens_mb * out_dim / q +
                           (q - 1) * tokens_mb * in_dim / q + (q - 1) / q * in_dim / q * out_dim / q;
        per_layer += fwd + bwd;
      } else {
        // SUMMA: q broadcasts of an input and a weight block forward and again backward, and q
        // reductions of each block's partial gradients (a broadcast or reduce counts its size on
        // every member).
        const double a = tokens_mb * in_dim / q, w = in_dim / q * out_dim / q;
        per_layer += 3 * q * (a + w);
      }
    }
    // Sparse blocks: the input gathered along the hidden axis and the output reduce-scattered back
    // (forward, and the output's gradient gathered in backward), the experts as 1D tp over q ranks
    // (their input's gradient all-reduced).
    const double sparse_dev = static_cast<double>(m.MoeLayers()) / l.pp;
    per_layer += sparse_dev / layers_dev * 5 * (q - 1) / q * tokens_mb * h;
    const double head = 2 * (q - 1) / q * tokens_mb * V;
    const double recompute = in.activation_checkpointing ? 1.0 / 3.0 : 0;  // Forward again: ~1/3 of it.
    bytes += micro_batches * (layers_dev * per_layer * (1 + recompute) + head) * kBytes;
    if (l.tp_mode == TpMode::k2p5D) bytes += 2.0 * (l.tp_depth - 1) / l.tp_depth * params_dev * kBytes;
  }
  const double width = h / s.heads;  // Attention width on this rank.
  if (l.sp > 1) {
    const double kv = 2 * tokens_mb * width * kBytes;
    const double per_layer = l.sp_mode == SpMode::kRing ? (sp - 1) * kv + 2 * sp * kv
                                                 : 8 * (sp - 1) / sp * tokens_mb * width * kBytes;
    bytes += micro_batches * layers_dev * per_layer * (in.activation_checkpointing ? 1.5 : 1.0);
  }
  if (l.pp > 1) {
    // Per micro-batch, a rank sends an activation forward from each of its v chunks but the model's
    // last and a gradient back from each but the model's first: the busiest rank sends 2v messages
    // when some rank holds only middle chunks (pp ≥ 3), else 2v − 1.
    const double messages = 2.0 * l.pp_chunks - (l.pp == 2 ? 1 : 0);
    bytes += micro_batches * messages * tokens_mb * h / s.hidden * kBytes;
  }
  p.comm_bytes = bytes;
  p.comm_s = bytes / in.device.bandwidth;
  p.step_s = p.compute_s + p.comm_s;

  // Activations kept for backward.
  const double per_token_layer = l.tp_mode == TpMode::k1D ? 5 * h + 16 * h / l.tp : 21 * h / s.hidden;
  const double layers_chunk = L / (l.pp * l.pp_chunks);
  double per_chunk = layers_chunk * tokens_mb * per_token_layer * kBytes;
  if (in.activation_checkpointing) {
    per_chunk = layers_chunk * tokens_mb * h / s.hidden * kBytes + tokens_mb * per_token_layer * kBytes / layers_chunk;
  }
  const double logits = 3 * tokens_mb * V / s.vocab * kBytes;
  // Backward's working set on top of what forward kept: the gradients of one layer's activations
  // (about that layer's saved activations again) and the fresh gradient of the largest weight (an
  // MLP matrix or the tied embedding) before it is added into .grad, with the next one's.
  const double working_layer = tokens_mb * per_token_layer * kBytes;
  const double largest_weight = std::max(4.0 * h * h / s.weights, static_cast<double>(V) * h / s.vocab) * kBytes;
  p.activation_bytes = peak_chunks * per_chunk + logits + working_layer + 2 * largest_weight;
  p.runtime_bytes = in.device.runtime_bytes;
  p.fits = p.memory_bytes() <= in.device.memory_bytes;
  return p;
}

std::vector<Prediction> Plan(const PlanInput& in) {
  std::vector<Prediction> out;
  const int n = in.devices;
  for (int dp : Divisors(n)) {
    // Mixture of Experts: every ep out of dp that divides the experts.
    std::vector<int> eps = {1};
    for (int ep : Divisors(dp)) {
      if (ep > 1 && in.model.IsMoe() && in.model.experts % ep == 0) eps.push_back(ep);
    }
    for (int ep : eps)
    for (int pp : Divisors(n / dp)) {
      for (int tp : Divisors(n / dp / pp)) {
        const int sp = n / dp / pp / tp;
        std::vector<std::pair<TpMode, int>> modes = {{TpMode::k1D, 1}};
        if (tp >= 4) modes.push_back({TpMode::k2D, 1});
        for (int d : Divisors(tp)) {
          if (d >= 2 && tp / d >= 4) modes.push_back({TpMode::k2p5D, d});
        }
        if (tp >= 8) modes.push_back({TpMode::k3D, 1});
        std::vector<SpMode> sp_modes = {SpMode::kRing};
        if (sp > 1) sp_modes.push_back(SpMode::kAllToAll);
        std::vector<std::pair<PipeSchedule, int>> schedules = {{PipeSchedule::kOneFOneB, 1}};
        if (pp > 1) {
          schedules.push_back({PipeSchedule::kInterleaved, 2});
          schedules.push_back({PipeSchedule::kZeroBubbleH1, 1});
          schedules.push_back({PipeSchedule::kZeroBubbleV, 2});
        }
        for (const auto& [mode, depth] : modes) {
          for (SpMode sp_mode : sp_modes) {
            for (const auto& [schedule, chunks] : schedules) {
              Layout l;
              l.dp = dp, l.ep = ep, l.pp = pp, l.tp = tp, l.sp = sp;
              l.tp_mode = mode, l.tp_depth = depth, l.sp_mode = sp_mode, l.pp_schedule = schedule, l.pp_chunks = chunks;
              l.zero_stage = in.zero_stage;
              if (!Invalid(in, l).empty()) continue;
              out.push_back(Predict(in, l));
            }
          }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.step_s < b.step_s : a.memory_bytes() < b.memory_bytes();
  });
  if (out.empty()) return out;
  const Prediction& best = out[0];
  for (size_t k = 0; k < out.size(); ++k) {
    Prediction& p = out[k];
    if (!p.fits) {
      p.verdict = absl::StrFormat("does not fit: %.2f GB > %.2f GB per device", p.memory_bytes() / 1e9,
                                  in.device.memory_bytes / 1e9);
    } else if (k == 0) {
      p.verdict = "chosen: fastest predicted step that fits";
    } else {
      // The component that grew the most against the chosen layout.
      const double extra_comm = p.comm_s - best.comm_s, extra_compute = p.compute_s - best.compute_s;
      std::string why = extra_comm >= extra_compute
                            ? absl::StrFormat("more communication (%.1f MB vs %.1f MB per device)", p.comm_bytes / 1e6,
                                              best.comm_bytes / 1e6)
                            : p.bubble > best.bubble ? absl::StrFormat("pipeline bubble %.0f%%", 100 * p.bubble)
                                                     : "more compute per device";
      p.verdict = absl::StrFormat("%.2f× the chosen step: %s", p.step_s / best.step_s, why);
    }
  }
  return out;
}

}  // namespace tessera::plan
