#include "layout/check_layout.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "layout/tp_grid.h"

namespace tessera::layout {

int64_t MicroBatchesPerStep(const BatchShape& batch, int64_t dp) {
  const int64_t per_pass = batch.micro_batch * dp;  // Both below 2^31 (spec limits): exact.
  if (per_pass < 1 || batch.global_batch < 1 || batch.global_batch % per_pass != 0) return 0;
  return batch.global_batch / per_pass;
}

namespace {

using Problems = std::vector<LayoutProblem>;

void Add(Problems* out, std::string field, std::string message) {
  out->push_back({std::move(field), std::move(message)});
}

// 1D (Megatron): heads split over tp; the vocabulary padded to a multiple of tp inside the model (so
// that it need not divide it) but every rank must still hold a real row; grouped key/value heads
// either split over tp or, when fewer than tp, each rank uses the one it needs.
void OneDimensional(const ModelConfig& m, int tp, Problems* out) {
  if (m.heads >= 1 && m.heads % tp != 0) {
    Add(out, "parallel.tp", absl::StrCat(tp, " does not divide model.heads ", m.heads));
  }
  if (tp >= 2 && m.vocab >= 1) {
    const int64_t per = (int64_t{m.vocab} + tp - 1) / tp;
    if ((tp - 1) * per >= m.vocab) {
      Add(out, "parallel.tp", absl::StrCat(tp, " ranks of ", per, " vocabulary rows each leave the last without a real one",
                                           " (model.vocab ", m.vocab, ")"));
    }
  }
  const int kv = m.KvHeads();
  if (kv != m.heads && kv >= 1 && kv % tp != 0 && tp % kv != 0) {
    Add(out, "parallel.tp", absl::StrCat(tp, " and model.kv_heads ", kv,
                                         ": one must divide the other (key/value heads are split over tp, or each "
                                         "rank uses one of them)"));
  }
}

// The grid modes: tp must form the grid, and what the grid splits must divide evenly.
void Grid(const ModelConfig& m, TpMode mode, int tp, int depth, int64_t micro_batch, Problems* out) {
  const TpGrid g = TpGridOf(mode, tp, depth);
  if (!g.Formed()) {
    switch (mode) {
      case TpMode::k2D:
        Add(out, "parallel.tp", absl::StrCat(tp, " with tp_mode 2d must be a square q² ≥ 4 (4, 9, 16, ...)"));
        break;
      case TpMode::k2p5D:
        Add(out, "parallel.tp", absl::StrCat(tp, " with tp_mode 2.5d must be tp_depth·q² = ", g.depth, "·q² with q ≥ 2"));
        break;
      default:
        Add(out, "parallel.tp", absl::StrCat(tp, " with tp_mode 3d must be a cube q³ ≥ 8 (8, 27, 64, ...)"));
        break;
    }
    return;
  }
  // Key/value heads and the MLP width only when they are not already implied by heads and hidden
  // (GPT-2: kv_heads = heads, ffn = 4·hidden), so that one cause gives one problem.
  const bool hidden_ok = m.hidden >= 1 && m.hidden % g.HiddenSplit() == 0;
  std::vector<std::tuple<std::string, int64_t, int64_t>> divisible = {
      {"model.heads", m.heads, g.HeadSplit()},
      {"model.vocab", m.vocab, g.VocabSplit()},
      {"model.hidden", m.hidden, g.HiddenSplit()}};
  if (m.KvHeads() != m.heads) divisible.push_back({"model.kv_heads", m.KvHeads(), g.HeadSplit()});
  if (hidden_ok) divisible.push_back({"model.ffn_hidden", m.FfnHidden(), g.HiddenSplit()});
  if (micro_batch > 0) divisible.push_back({"train.micro_batch", micro_batch, g.SampleSplit()});
  for (const auto& [field, value, by] : divisible) {
    if (value >= 1 && value % by != 0) {
      Add(out, field, absl::StrCat(value, " is not a multiple of ", by, " (tp_mode ", Name(mode), ", tp ", tp,
                                   ", grid side q = ", g.q, ")"));
    }
  }
}

void Pipeline(const ModelConfig& m, const ParallelLayout& l, const BatchShape& batch, Problems* out) {
  Problems schedule = ScheduleProblems(l.pp_schedule, l.pp, l.pp_chunks, MicroBatchesPerStep(batch, l.dp));
  out->insert(out->end(), schedule.begin(), schedule.end());
  if (l.pp_chunks < 1) return;
  if (IsZeroBubble(l.pp_schedule) && l.zero_stage == ZeroStage::kParameters) {
    // ZeRO-3 frees a block's gathered weights after its backward, before the deferred W.
    Add(out, "parallel.pp_schedule", absl::StrCat(Name(l.pp_schedule), " needs zero_stage 0, 1 or 2 (ZeRO-3 frees the "
                                                  "gathered weights before W)"));
  }
  Problems stages = StageProblems(m.layers, l.pp, l.pp_chunks, l.pp_layers);
  out->insert(out->end(), stages.begin(), stages.end());
}

void Sequence(const ModelConfig& m, const ParallelLayout& l, Problems* out) {
  if (l.sp <= 1) return;
  if (m.seq_len >= 1 && m.seq_len % l.sp != 0) {
    Add(out, "parallel.sp", absl::StrCat(l.sp, " does not divide model.seq_len ", m.seq_len));
  }
  const TpGrid g = TpGridOf(l.tp_mode, l.tp, l.tp_depth);
  const int split = g.HeadSplit();
  if (l.sp_mode == SpMode::kAllToAll && m.heads >= 1 && split >= 1 && m.heads % split == 0 &&
      (m.heads / split) % l.sp != 0) {
    Add(out, "parallel.sp_mode",
        absl::StrCat("all_to_all splits each rank's model.heads/", l.tp_mode == TpMode::k1D ? "tp" : "q", " = ",
                     m.heads / split, " heads over sp ", l.sp, ", which does not divide them; use ring"));
  }
}

// Mixture of Experts: top-k within the experts; expert parallelism splits the experts over ep ranks
// taken from dp.
void Experts(const ModelConfig& m, const ParallelLayout& l, Problems* out) {
  if (m.experts < 0) Add(out, "model.experts", absl::StrCat(m.experts, " must be at least 0 (0: a dense model)"));
  if (m.experts > 0 && (m.experts_per_token < 1 || m.experts_per_token > m.experts)) {
    Add(out, "model.experts_per_token",
        absl::StrCat(m.experts_per_token, " must be between 1 and model.experts ", m.experts));
  }
  if (m.experts > 0) {
    // Each expert's MLP (and the shared expert's) is split like a dense MLP of 1D tp: over the tp
    // group (1D), or over the grid's hidden axis, of q ranks (grid modes; replicated over the others).
    const TpGrid g = TpGridOf(l.tp_mode, l.tp, l.tp_depth);
    const int split = l.tp_mode == TpMode::k1D ? l.tp : g.q;
    const std::string over = l.tp_mode == TpMode::k1D ? "" : "the grid side q = ";
    if (split > 1 && g.Formed()) {
      if (m.MoeFfnHidden() % split != 0) {
        Add(out, "parallel.tp", absl::StrCat(over, split, " does not divide the experts' width ", m.MoeFfnHidden(),
                                             " (model.moe_ffn_hidden)"));
      }
      if (m.shared_expert_ffn_hidden % split != 0) {
        Add(out, "parallel.tp", absl::StrCat(over, split, " does not divide model.shared_expert_ffn_hidden ",
                                             m.shared_expert_ffn_hidden));
      }
    }
  }
  // Capacity is counted over the tokens of a micro-batch that one rank routes (docs/models.md): sequence
  // parallelism and the grid modes (which split the micro-batch's samples) would count it over a part
  // of them and drop other assignments than one process does.
  if (m.experts > 0 && m.capacity_factor > 0) {
    if (l.sp > 1) {
      Add(out, "model.capacity_factor",
          absl::StrCat("is counted over a micro-batch's tokens, which parallel.sp ", l.sp,
                       " splits over ranks; use 0 (dropless) or sp 1"));
    }
    if (l.tp_mode != TpMode::k1D && l.tp > 1) {
      Add(out, "model.capacity_factor",
          absl::StrCat("is counted over a micro-batch's tokens, whose samples tp_mode ", Name(l.tp_mode),
                       " splits over ranks; use 0 (dropless) or tp_mode 1d"));
    }
  }
  if (l.ep <= 1) return;  // Below 1: AxisProblems.
  if (m.experts == 0) {
    Add(out, "parallel.ep", absl::StrCat(l.ep, " needs a Mixture-of-Experts model (model.experts is 0)"));
  } else if (m.experts > 0 && m.experts % l.ep != 0) {
    Add(out, "parallel.ep", absl::StrCat(l.ep, " does not divide model.experts ", m.experts));
  }
}

// LoRA on a Mixture of Experts: dropout on experts' adapters would need masks per (token, expert) in
// every layout: not built. (A pretrained model's experts are known from its config.json: the spec's
// validation sees them only when the spec states them, the Trainer always.)
void Adapters(const ModelConfig& m, Problems* out) {
  if (!m.lora.enabled() || !(m.lora.dropout > 0) || !(m.IsMoe() || m.family == ModelFamily::kMixtral)) return;
  for (const std::string& t : m.lora.targets) {
    if (LoraConfig::IsMlpModule(t)) {
      Add(out, "model.lora.dropout", absl::StrCat(m.lora.dropout, " with adapters on a Mixture of Experts' MLPs (", t,
                                                  ") is not supported yet (0, or attention targets only)"));
      return;
    }
  }
}

// What this build runs where. CUDA: ZeRO 1–3, offload and bf16 / fp16 ran on an H100 against the CPU
// losses (tools/gpu/check.sh, bench/RESULTS.md); pipeline, sequence and grid tensor parallelism on
// CUDA need two GPUs, which no session has had. FP8 GEMMs run in the 1D layers' Linear; the grid
// layouts have GEMMs of their own.
void OnTarget(const ParallelLayout& l, const Target& t, Problems* out) {
  if (t.device == DeviceKind::kCuda) {
    if (l.tp_mode != TpMode::k1D) {
      Add(out, "parallel.tp_mode", absl::StrCat(Name(l.tp_mode), " with device cuda is not available yet; use 1d"));
    }
    if (l.pp > 1) Add(out, "parallel.pp", absl::StrCat(l.pp, " with device cuda is not available yet; use 1"));
    if (l.sp > 1) Add(out, "parallel.sp", absl::StrCat(l.sp, " with device cuda is not available yet; use 1"));
  }
  if (t.fp8 && l.tp_mode != TpMode::k1D) {
    Add(out, "train.precision", "fp8 with a grid tensor-parallel mode is not supported yet (use parallel.tp_mode 1d)");
  }
}

// Objectives whose loss is not a mean over targets (DPO: a function of each sample's summed
// log-probability; a reward model: of each pair's two scores) make each sample whole over its sequence
// blocks (objective.h); a grid splits a micro-batch's pairs whole (train.micro_batch, which counts
// pairs then, a multiple of the grid's sample split: Grid above).
void ForObjective(const ModelConfig& m, const ParallelLayout& l, const Target& t, Problems* out) {
  if (t.objective == Objective::kCrossEntropy) return;
  if (t.objective == Objective::kGrpo) {
    // GRPO samples its completions in the ranks (parallel/models/generate.h): the sampler runs the
    // whole model on each rank of a 1D tensor-parallel group (ZeRO-3 gathers it once for the sampling),
    // so the layouts whose ranks hold a part of the layers, of a sequence or of the experts do not train
    // it yet.
    const char* why = " with train.objective grpo is not supported yet: the sampler runs on dp × 1D tp ranks";
    if (l.pp > 1) Add(out, "parallel.pp", absl::StrCat(l.pp, why));
    if (l.sp > 1) Add(out, "parallel.sp", absl::StrCat(l.sp, why));
    if (l.tp_mode != TpMode::k1D) Add(out, "parallel.tp_mode", absl::StrCat(Name(l.tp_mode), why));
    if (l.ep > 1) Add(out, "parallel.ep", absl::StrCat(l.ep, why));
    if (m.IsMoe() && m.aux_loss_coef > 0) {
      Add(out, "model.aux_loss_coef", absl::StrCat(m.aux_loss_coef, " with train.objective grpo is not supported yet: "
                                                   "set 0, or balance the experts with model.router_bias_rate"));
    }
    if (m.IsMoe() && m.capacity_factor > 0) {
      Add(out, "model.capacity_factor", absl::StrCat(m.capacity_factor, " with train.objective grpo is not supported "
                                                     "yet (the sampler's padding would take experts' capacity): use 0, "
                                                     "dropless"));
    }
    return;
  }
  // A Mixture of Experts: the routers' statistics (the balancing loss, loss-free balancing's loads)
  // leave the pairs' padding out (PipelineOptions::counted), as transformers' balancing loss with
  // TRL's attention mask. DPO adds it as TRL's DPOTrainer does (output_router_logits). TRL's reward
  // model trains none: transformers' *ForSequenceClassification returns no balancing loss.
  if (t.objective == Objective::kReward && m.IsMoe() && m.aux_loss_coef > 0) {
    Add(out, "model.aux_loss_coef",
        absl::StrCat(m.aux_loss_coef, ": a reward model trains no balancing loss (transformers' "
                     "*ForSequenceClassification returns none, so TRL's RewardTrainer has none): set 0, or "
                     "balance the experts with model.router_bias_rate"));
  }
}

}  // namespace

std::vector<LayoutProblem> ScheduleProblems(PipeSchedule schedule, int pp, int chunks, int64_t micro_batches) {
  Problems out;
  if (chunks < 1) {
    Add(&out, "parallel.pp_chunks", absl::StrCat(chunks, " must be at least 1"));
  } else if (schedule == PipeSchedule::kInterleaved && chunks < 2) {
    Add(&out, "parallel.pp_chunks", absl::StrCat(chunks, " must be at least 2 with pp_schedule interleaved"));
  } else if (schedule == PipeSchedule::kZeroBubbleV && chunks != 2) {
    Add(&out, "parallel.pp_chunks", absl::StrCat(chunks, " (pp_schedule zbv runs two chunks per stage)"));
  } else if (schedule != PipeSchedule::kInterleaved && schedule != PipeSchedule::kZeroBubbleV && chunks != 1) {
    Add(&out, "parallel.pp_chunks", absl::StrCat(chunks, " needs pp_schedule interleaved (", Name(schedule),
                                                 " runs one chunk per stage)"));
  }
  if (pp > 1 && schedule == PipeSchedule::kInterleaved && micro_batches > 0 && micro_batches % pp != 0) {
    Add(&out, "parallel.pp_schedule",
        absl::StrCat("interleaved needs the micro-batches per step, global_batch/(micro_batch·dp) = ", micro_batches,
                     ", to be a multiple of pp ", pp));
  }
  return out;
}

std::vector<LayoutProblem> StageProblems(int layers, int pp, int chunks, const std::vector<int>& pp_layers) {
  Problems out;
  const int64_t v = int64_t{pp} * chunks;
  if (!pp_layers.empty()) {
    if (static_cast<int64_t>(pp_layers.size()) != v) {
      Add(&out, "parallel.pp_layers", absl::StrCat("has ", pp_layers.size(), " entries, needs pp·pp_chunks = ", v,
                                                   " (one per virtual stage)"));
      return out;
    }
    int64_t sum = 0;
    for (size_t i = 0; i < pp_layers.size(); ++i) {
      if (pp_layers[i] < 1) {
        Add(&out, absl::StrCat("parallel.pp_layers[", i, "]"), absl::StrCat(pp_layers[i], " must be at least 1"));
      }
      sum += pp_layers[i];
    }
    if (sum != layers) {
      Add(&out, "parallel.pp_layers", absl::StrCat("sums to ", sum, " layers, model.layers is ", layers));
    }
  } else if (layers >= 1 && layers < v) {
    Add(&out, "parallel.pp", absl::StrCat("pp·pp_chunks = ", v, " virtual stages need model.layers ≥ ", v, ", it is ",
                                          layers));
  }
  return out;
}

std::vector<LayoutProblem> TensorParallelProblems(const ModelConfig& model, TpMode mode, int tp, int tp_depth,
                                                  int64_t micro_batch) {
  Problems out;
  if (tp < 1) return out;  // LayoutProblems reports the size.
  if (tp_depth < 1) {
    Add(&out, "parallel.tp_depth", absl::StrCat(tp_depth, " must be at least 1"));
    return out;
  }
  if (mode != TpMode::k2p5D && tp_depth > 1) {
    Add(&out, "parallel.tp_depth", absl::StrCat(tp_depth, " applies to tp_mode 2.5d only"));
  }
  if (mode == TpMode::k1D) {
    OneDimensional(model, tp, &out);
  } else {
    Grid(model, mode, tp, tp_depth, micro_batch, &out);
    // The grid modes' linears are SUMMA / 3D blocks without adapters.
    if (model.lora.enabled()) {
      Add(&out, "model.lora", "with a grid tensor-parallel mode is not supported yet (use parallel.tp_mode 1d)");
    }
  }
  return out;
}

std::vector<LayoutProblem> AxisProblems(const ParallelLayout& layout) {
  Problems out;
  for (Axis a : kAxes) {
    if (layout.Size(a) < 1) {
      Add(&out, absl::StrCat("parallel.", AxisName(a)), absl::StrCat(layout.Size(a), " must be at least 1"));
    }
  }
  if (layout.ep < 1) {
    Add(&out, "parallel.ep", absl::StrCat(layout.ep, " must be at least 1"));
  } else if (layout.dp >= 1 && layout.dp % layout.ep != 0) {
    Add(&out, "parallel.ep", absl::StrCat(layout.ep, " does not divide parallel.dp ", layout.dp,
                                          " (expert parallel ranks are taken from the data parallel ones)"));
  }
  return out;
}

std::vector<LayoutProblem> LayoutProblems(const ModelConfig& model, const ParallelLayout& layout,
                                          const BatchShape& batch, const Target& target) {
  Problems out = AxisProblems(layout);
  bool sizes_ok = true;
  for (Axis a : kAxes) sizes_ok &= layout.Size(a) >= 1;
  if (batch.micro_batch < 1) Add(&out, "train.micro_batch", absl::StrCat(batch.micro_batch, " must be at least 1"));
  if (batch.global_batch < 1) Add(&out, "train.global_batch", absl::StrCat(batch.global_batch, " must be at least 1"));
  if (!sizes_ok) return out;
  const int64_t per_pass = batch.micro_batch * layout.dp;  // Both below 2^31: exact.
  if (per_pass >= 1 && batch.global_batch >= 1 && batch.global_batch % per_pass != 0) {
    Add(&out, "train.global_batch",
        absl::StrCat(batch.global_batch, " is not a multiple of micro_batch×dp = ", per_pass));
  }
  Problems tp = TensorParallelProblems(model, layout.tp_mode, layout.tp, layout.tp_depth, batch.micro_batch);
  out.insert(out.end(), tp.begin(), tp.end());
  Pipeline(model, layout, batch, &out);
  Experts(model, layout, &out);
  Sequence(model, layout, &out);
  Adapters(model, &out);
  OnTarget(layout, target, &out);
  ForObjective(model, layout, target, &out);
  return out;
}

absl::Status ToStatus(const std::vector<LayoutProblem>& problems) {
  if (problems.empty()) return absl::OkStatus();
  std::vector<std::string> lines;
  for (const LayoutProblem& p : problems) lines.push_back(absl::StrCat(p.field, ": ", p.message));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

absl::Status CheckLayout(const ModelConfig& model, const ParallelLayout& layout, const BatchShape& batch,
                         const Target& target) {
  return ToStatus(LayoutProblems(model, layout, batch, target));
}

}  // namespace tessera::layout
