// Trainer: one training step (trainer.h) — the micro-batches' forwards and backwards through the
// pipeline, the loss and gradient norm reduced over the job, the optimizer update, loss-free
// balancing's router biases, and the step's statistics.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>

#include <sys/resource.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "parallel/device/live_bytes.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {
namespace {

// Peak resident memory since the last ResetPeakResident() (VmHWM), falling back to the process's
// lifetime peak.
int64_t PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

}  // namespace

absl::StatusOr<Trainer::LossSums> Trainer::ForwardBackward(int accum) {
  LossSums sums;
  auto unset_positions = absl::MakeCleanup([&] { model_->set_positions({}); });  // Validation is never packed.
  if (data_) TESSERA_RETURN_IF_ERROR(WeighTrainedTargets(*data_, step_ * options_.global_batch, accum, &trained_targets_));
  RECORD_USER_SCOPE("tessera::train::forward_backward");
  // Gradients of the last backward pass of this stage start their dp reduction inside it. Each
  // micro-batch's loss weighs LossWeight (a Mixture of Experts' balancing loss too: PipelineRunner).
  zero_->SetSyncThisPass(false);
  auto sum = pipeline_->RunStep([&](int a) {
                                  if (grpo()) return GrpoTokensOf(a);
                                  return pairs_ ? ReadPairs(train_pairs_, step_ * options_.global_batch, a, accum)
                                                : ReadTokens(*data_, step_ * options_.global_batch, a, accum);
                                },
                                LossWeight(accum), [&] { zero_->SetSyncThisPass(true); });
  if (!sum.ok()) return absl::Status(sum.status().code(), absl::StrCat("step ", step_ + 1, ": ", sum.status().message()));
  sums.lm = *sum;
  sums.aux = pipeline_->aux_sum();
  sums.expert_load = pipeline_->expert_load();
  if (objective_) sums.metrics = objective_->TakeMetrics();
  return sums;
}

absl::Status Trainer::AverageOverSampleAxes(at::Tensor& means) {
  // Each grid chunk's objective metrics are means over its own pairs (its loss is already the whole
  // micro-batch's, the same on every chunk: averaging leaves it).
  for (Communicator* axis : model_->SampleAxes()) {
    if (axis->size() > 1) TESSERA_RETURN_IF_ERROR(axis->AllReduce(means, ReduceOp::kAvg));
  }
  return absl::OkStatus();
}

absl::Status Trainer::ReduceLossAndNorm(LossSums& sums, int accum, StepStats* s, double* raw_norm) {
  // Mean cross-entropy and balancing loss of this rank's micro-batches.
  // Then the objective's metrics, averaged as the loss.
  std::vector<double> means_of = {sums.lm / accum, sums.aux / accum};
  for (double m : sums.metrics) means_of.push_back(m / accum);
  at::Tensor mean_loss = at::tensor(means_of, at::TensorOptions().dtype(at::kDouble)).to(device_);
  if (!sums.metrics.empty()) TESSERA_RETURN_IF_ERROR(AverageOverSampleAxes(mean_loss));
  {
    // Only the last stage has the loss; every stage's gradients add to the norm (wte counted once).
    RECORD_USER_SCOPE("tessera::train::grad_norm");
    TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(mean_loss, ReduceOp::kSum));
    std::vector<std::string> skip;
    if (model_->part().head && !model_->part().embedding && !model_->tied_embedding().empty()) {
      skip.push_back(model_->tied_embedding());
    }
    auto sq = zero_->GradSquaredSum(skip);
    if (!sq.ok()) return sq.status();
    at::Tensor total = at::full({1}, *sq, at::TensorOptions().dtype(at::kDouble).device(device_));
    TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(total, ReduceOp::kSum));
    *raw_norm = std::sqrt(total.item<double>());
  }
  // Over dp × sp: each sequence block's mean weighs the same.
  if (groups_.dp_sp->size() > 1) TESSERA_RETURN_IF_ERROR(groups_.dp_sp->AllReduce(mean_loss, ReduceOp::kAvg));
  const at::Tensor means = mean_loss.cpu();
  const double lm = means[0].item<double>(), aux = means[1].item<double>();
  s->loss = lm;
  if (objective_) {
    const std::vector<std::string> names = objective_->metric_names();
    for (size_t i = 0; i < names.size() && i < sums.metrics.size(); ++i) {
      s->objective_metrics.emplace_back(names[i], means[2 + static_cast<int64_t>(i)].item<double>());
    }
  }
  if (options_.model.IsMoe()) {
    s->loss = lm + options_.model.aux_loss_coef * aux;
    s->lm_loss = lm;
    s->aux_loss = aux;
    // Tokens per expert of every sparse block ([layers, E]; stages hold different blocks), summed over
    // the grid's sample axes, the stages and the data-parallel ranks.
    const ModelConfig& c = options_.model;
    at::Tensor load = sums.expert_load.defined()
                          ? sums.expert_load.to(device_).contiguous()
                          : at::zeros({c.layers, c.experts}, at::TensorOptions().dtype(at::kDouble).device(device_));
    for (Communicator* g : model_->SampleAxes()) TESSERA_RETURN_IF_ERROR(g->AllReduce(load, ReduceOp::kSum));
    TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(load, ReduceOp::kSum));
    if (groups_.dp_sp->size() > 1) TESSERA_RETURN_IF_ERROR(groups_.dp_sp->AllReduce(load, ReduceOp::kSum));
    load = load.cpu();
    step_load_ = load;
    for (int layer = 0; layer < c.layers; ++layer) {
      if (!c.IsMoeLayer(layer)) continue;
      const at::Tensor row = load[layer];
      s->expert_imbalance.push_back((row.max() / row.mean().clamp_min(1e-30)).item<double>());
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::Update(double norm, double lr, StepStats* s) {
  if (options_.precision == layout::Precision::kFp16 && !std::isfinite(norm)) {
    // Overflow in the scaled gradients: no update; a smaller scale for the next step.
    s->skipped = true;
    loss_scale_ = std::max(1.0, loss_scale_ / 2);
    good_steps_ = 0;
    return absl::OkStatus();
  }
  // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1.
  const double coef = options_.grad_clip > 0 ? std::min(1.0, options_.grad_clip / (norm + 1e-6)) : 1.0;
  ++adam_step_;
  RECORD_USER_SCOPE("tessera::train::optimizer");
  zero_->ScaleGradients(coef / loss_scale_);
  TESSERA_RETURN_IF_ERROR(zero_->Step(lr, adam_step_));
  if (options_.precision == layout::Precision::kFp16 && ++good_steps_ >= options_.loss_scale_window) {
    loss_scale_ *= 2;
    good_steps_ = 0;
  }
  return absl::OkStatus();
}

double Trainer::LossWeight(int accum) const {
  // Every micro-batch's loss (a sequence block's, under sp) weighs the same in the step's objective,
  // whichever rank runs it; the data-parallel reductions then sum (zero_optimizer.h). So a gradient
  // has the same magnitude in every layout at every point of the step — one process's accumulation,
  // dp's partial sums, ZeRO's reduce-scatters — and fp16 overflows where one process's does.
  return loss_scale_ / (static_cast<double>(accum) * groups_.dp_sp->size());
}

uint64_t Trainer::NoiseSeed(int a, int accum) const {
  // The global index of the micro-batch's first sample (ReadMicroBatch's numbering) mixed with the
  // job's seed: the same micro-batch draws the same noise in every layout.
  const uint64_t first = static_cast<uint64_t>(step_ * options_.global_batch +
                                               static_cast<int64_t>(groups_.dp->rank()) * options_.micro_batch * accum +
                                               static_cast<int64_t>(a) * options_.micro_batch);
  uint64_t h = 0x94d049bb133111ebull ^ options_.seed;
  h = (h ^ first) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

void Trainer::UpdateRouterBias() {
  // DeepSeek-V3's auxiliary-loss-free balancing (torchtitan's expert_bias update): experts below the
  // block's mean load get more likely to be chosen, those above less, by a fixed step.
  const ModelConfig& c = options_.model;
  at::NoGradGuard no_grad;
  for (int layer = 0; layer < c.layers; ++layer) {
    if (!c.IsMoeLayer(layer)) continue;
    const at::Tensor load = step_load_[layer];
    const at::Tensor move = at::sign(load.mean() - load).to(at::kFloat) * c.router_bias_rate;
    router_bias_[layer].add_(move.to(device_));
  }
}

absl::StatusOr<StepStats> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const int accum = Accumulation();
  // dp_sp is the dp group itself when sp = 1.
  auto all_reduced = [&] {
    int64_t n = groups_.dp_sp->bytes_all_reduced() + groups_.tp->bytes_all_reduced();
    if (groups_.dp_sp != groups_.dp) n += groups_.dp->bytes_all_reduced();
    if (groups_.embed && groups_.embed->size() > 1) n += groups_.embed->bytes_all_reduced();
    return n;
  };
  const int64_t bytes_before = all_reduced();
  const int64_t communicated_before = BytesCommunicated();
  StepStats s;
  s.loss_scale = loss_scale_;
  ResetPeakLiveBytes();
  zero_->ZeroGrad();
  zero_->ResetPeak();
  if (grpo()) {
    if (step_ % options_.grpo.num_iterations == 0) {
      TESSERA_RETURN_IF_ERROR(GenerateRollouts());
    } else {
      if (grpo_rows_.rows == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "step ", step_ + 1, " trains on the completions of the generation at step ",
            step_ / options_.grpo.num_iterations * options_.grpo.num_iterations + 1,
            ", which this run did not sample (it resumed inside a generation: grpo.num_iterations ",
            options_.grpo.num_iterations, " changed?); resume from a checkpoint at a multiple of it"));
      }
      // grpo.num_iterations: the generation's rows again (nothing sampled for this step).
      for (auto& [name, value] : grpo_completion_metrics_) {
        if (name == "generation_seconds" || name == "generated_tokens_per_s") value = 0;
      }
    }
  }
  auto sums = ForwardBackward(accum);
  if (!sums.ok()) return sums.status();
  {
    RECORD_USER_SCOPE("tessera::train::reduce_gradients");
    TESSERA_RETURN_IF_ERROR(zero_->ReduceGradients());
  }
  double raw_norm = 0;
  TESSERA_RETURN_IF_ERROR(ReduceLossAndNorm(*sums, accum, &s, &raw_norm));
  s.grad_norm = raw_norm / loss_scale_;
  LrScheduleOptions lr_options = options_.lr;
  lr_options.steps = options_.steps;
  s.lr = LearningRate(lr_options, step_);
  TESSERA_RETURN_IF_ERROR(Update(s.grad_norm, s.lr, &s));
  if (router_bias_.defined() && !s.skipped) UpdateRouterBias();
  ++step_;
  s.step = step_;
  s.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // DPO: a pair is two sequences; GRPO: a prompt is num_generations.
  s.tokens = static_cast<int64_t>(options_.global_batch) * (pairs_ ? 2 : 1) *
             (grpo() ? options_.grpo.num_generations : 1) * options_.model.seq_len;
  if (grpo()) {
    // The rewards' numbers, the objective's (already in), then the completions'.
    s.objective_metrics.insert(s.objective_metrics.begin(), grpo_metrics_.begin(), grpo_metrics_.end());
    s.objective_metrics.insert(s.objective_metrics.end(), grpo_completion_metrics_.begin(),
                               grpo_completion_metrics_.end());
  }
  if (data_ && data_->sft()) s.trained_tokens = trained_targets_;
  s.tokens_per_s = s.tokens / s.step_seconds;
  s.bytes_all_reduced = all_reduced() - bytes_before;
  s.bytes_communicated = BytesCommunicated() - communicated_before;
  s.rss_peak_bytes = PeakResidentBytes();
  if (LiveBytesCounted()) s.live_peak_bytes = PeakLiveBytes();
  if (layout_) {  // Pipeline parallelism.
    s.pipeline_wait_s = pipeline_->wait_seconds();
    s.weight_pending_peak_bytes = pipeline_->weight_pending_peak_bytes();
    auto bubble = PipelineBubble();
    if (!bubble.ok()) return bubble.status();
    s.pipeline_bubble = *bubble;
    if (++pipeline_steps_ == kScheduleFromStep) TESSERA_RETURN_IF_ERROR(ScheduleFromMeasuredCosts());
  }
  s.optimizer_state_bytes = zero_->state_bytes();
  s.frozen_param_bytes = model_->frozen_bytes();
  s.model_state_bytes = zero_->peak_model_state_bytes();
  return s;
}

}  // namespace tessera::parallel
