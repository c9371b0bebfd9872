#include "parallel/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include <cmath>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/userfs/user_files.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "layout/check_layout.h"
#include "layout/tp_grid.h"
#include "nlohmann/json.hpp"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/device/device.h"
#include "formats/model/peft_adapter.h"
#include "parallel/models/hf_weights.h"
#include "parallel/models/peft_weights.h"
#include "parallel/objectives/dpo_objective.h"
#include "parallel/objectives/reward_objective.h"
#include "parallel/optim/lr_schedule.h"
#include "parallel/train/checkpoint_write.h"  // Complete types of the members the constructor may destroy.
#include "parallel/train/status_macros.h"

namespace tessera::parallel {

using formats::data::BlendSource;
using formats::checkpoint::CheckpointName;
using formats::model::ModelPart;
using formats::model::ReadPeftLoraConfig;
using formats::data::TokenDatasetOptions;
using formats::data::TrainingData;

namespace fs = std::filesystem;

Trainer::Trainer(const TrainerOptions& options, ProcessGroups groups)
    : options_(options), groups_(std::move(groups)) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options, ProcessGroups groups) {
  std::unique_ptr<Trainer> t(new Trainer(options, std::move(groups)));
  TESSERA_RETURN_IF_ERROR(t->Init());
  return t;
}

namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Starts the peak over again from the current resident memory (Linux ≥ 4.0), so that the peak of
// training excludes the start-up (full tensors drawn before sharding, checkpoint loading).
void ResetPeakResident() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int Trainer::Accumulation() const {
  if (grpo()) return GrpoAccumulation();
  return static_cast<int>(
      layout::MicroBatchesPerStep({options_.micro_batch, options_.global_batch}, groups_.dp->size()));
}

absl::Status Trainer::Init() {
  rss_base_bytes_ = ResidentBytes();
  // A cluster attempt takes the output directory before anything is read or written there; a
  // superseded attempt that starts late stops here.
  if (groups_.global_rank == 0) TESSERA_RETURN_IF_ERROR(Fence().Claim());
  // A reward model's head is a score head (the objective decides the head, here and in its checkpoints).
  options_.model.score_head = reward();
  const auto& m = options_.model;
  const layout::ParallelLayout& l = options_.layout;
  // The rules of the layout are CheckLayout's; here only that the process groups are the layout's.
  // (A pretrained model's experts, which LoRA's rules read, are known here first.)
  // GRPO: the layout's samples are the step's completions (spec/layout_of.h BatchOf).
  const int64_t samples = int64_t{options_.global_batch} * (grpo() ? options_.grpo.num_generations : 1);
  TESSERA_RETURN_IF_ERROR(layout::CheckLayout(m, l, {options_.micro_batch, samples},
                                              {options_.device.kind, options_.fp8.has_value(), options_.objective_kind}));
  const bool preference = dpo() || reward();  // Pairs (trainer_preference.cc).
  const layout::TpGrid grid = layout::TpGridOf(l.tp_mode, l.tp, l.tp_depth);
  if (groups_.dp->size() != l.dp || groups_.pp->size() != l.pp || groups_.tp->size() != l.tp ||
      groups_.sp->size() != l.sp || groups_.tp_axes.size() != grid.Axes().size()) {
    return absl::InvalidArgumentError(absl::StrCat("process groups dp ", groups_.dp->size(), ", pp ", groups_.pp->size(),
                                                   ", tp ", groups_.tp->size(), " (", groups_.tp_axes.size(),
                                                   " grid axes), sp ", groups_.sp->size(), " were not built for ",
                                                   l.ToString()));
  }
  at::ScalarType dtype = at::kFloat;
  if (options_.precision == layout::Precision::kBf16) {
    dtype = at::kBFloat16;
  } else if (options_.precision == layout::Precision::kFp16) {
    dtype = at::kHalf;
    loss_scale_ = options_.initial_loss_scale;
  }
  param_dtype_ = dtype;
  TESSERA_RETURN_IF_ERROR(OpenData());
  auto device = SelectDevice(options_.device);
  if (!device.ok()) return device.status();
  device_ = *device;
  if (grpo()) TESSERA_RETURN_IF_ERROR(OpenRewards());
  if (l.pp > 1) {
    auto stages = layout::StageLayout::Create(m.layers, l.pp, l.pp_chunks, l.pp_layers, layout::PlacementOf(l.pp_schedule));
    if (!stages.ok()) return stages.status();
    layout_ = std::make_unique<layout::StageLayout>(*stages);
  } else {
    // One step path for every layout: without pipeline parallelism the whole model is one stage of a
    // one-stage 1F1B pipeline (whatever pp_schedule says: it schedules pp > 1 only).
    auto whole = StageLayout::Create(m.layers, /*pp=*/1, /*chunks=*/1);
    if (!whole.ok()) return whole.status();
    one_stage_ = std::make_unique<StageLayout>(*whole);
  }
  model_ = NewModel();
  if (m.IsMoe() && m.router_bias_rate > 0) {
    router_bias_ = at::zeros({m.layers, m.experts}, at::TensorOptions().dtype(at::kFloat).device(device_));
    model_->set_router_bias(router_bias_);
  }
  objective_ = options_.objective;
  if (dpo()) {
    objective_ = std::make_shared<DpoObjective>(
        DpoLossOptions{options_.dpo.beta, options_.dpo.loss_type, options_.dpo.label_smoothing}, PairRowsOf());
  } else if (reward()) {
    objective_ = std::make_shared<RewardObjective>(options_.reward.center_coefficient, PairRowsOf());
  } else if (grpo()) {
    // π_old is the policy that sampled: at num_iterations 1 its own values, without gradient (TRL).
    // With several iterations per generation, the sampler's log-probabilities (the rows' data).
    grpo_objective_ = std::make_shared<GrpoObjective>(
        options_.grpo.loss, options_.grpo.num_iterations > 1 ? GrpoOldLogps::kGiven : GrpoOldLogps::kPolicy);
    objective_ = grpo_objective_;
    // The loss's log-probabilities are at the sampling temperature (the sampler divides by it itself).
    model_->set_logit_temperature(options_.grpo.temperature);
  }
  if (objective_) model_->set_objective(objective_);

  TESSERA_RETURN_IF_ERROR(LoadInitialWeights());
  if (grpo()) TESSERA_RETURN_IF_ERROR(CreateGrpoReference());
  TESSERA_RETURN_IF_ERROR(CreateOptimizer(dtype));
  if (m.lora.enabled()) model_->CastFrozen(dtype);  // The optimizer casts the adapters.
  ResetPeakResident();
  PipelineOptions& po = pipeline_options_;
  po.schedule = layout_ ? l.pp_schedule : layout::PipeSchedule::kOneFOneB;
  po.micro_batches = Accumulation();
  // Preference objectives: each pair is two rows, or one shared-prompt row (trainer_preference.cc).
  po.micro_batch = (preference && !SharedPromptRows() ? 2 : 1) * options_.micro_batch / model_->SampleChunk().second;
  po.seq_len = m.seq_len / groups_.sp->size();
  po.activation_dtype = dtype;
  po.experts = m.experts;
  po.aux_loss_coef = m.aux_loss_coef;
  po.sp = groups_.sp;
  po.noise_seed = [this, micro_batches = po.micro_batches](int a) { return NoiseSeed(a, micro_batches); };
  if (grpo()) {
    po.sample_data = [this](int a) { return GrpoDataOf(a); };
  } else if (dpo()) {
    po.sample_data = [this, micro_batches = po.micro_batches](int a) {
      return ReferenceOf(train_pairs_, step_ * options_.global_batch, a, micro_batches);
    };
  } else if (reward() && (pairs_->has_margins() || SharedPromptRows())) {
    po.sample_data = [this, micro_batches = po.micro_batches](int a) {
      return MarginsOf(train_pairs_, step_ * options_.global_batch, a, micro_batches);
    };
  }
  if (preference && m.IsMoe()) {
    po.counted = [this, micro_batches = po.micro_batches](int a) {
      return CountedOf(train_pairs_, step_ * options_.global_batch, a, micro_batches);
    };
  } else if (SharedPromptRows()) {
    po.positions = [this, micro_batches = po.micro_batches](int a) {
      return PairPositionsOf(train_pairs_, step_ * options_.global_batch, a, micro_batches);
    };
  } else if (!preference && data_ && data_->packed()) {
    po.positions = [this, micro_batches = po.micro_batches](int a) {
      return ReadPositions(*data_, step_ * options_.global_batch, a, micro_batches);
    };
  }
  auto runner = PipelineRunner::Create(model_.get(), layout_ ? *layout_ : *one_stage_, groups_.pp, po);
  if (!runner.ok()) return runner.status();
  pipeline_ = std::move(*runner);
  // DPO's reference: the initial weights' (or dpo.reference's) log-probabilities, unless the
  // checkpoint resumed had them.
  if (dpo() && train_pairs_.reference.empty()) {
    const auto start = std::chrono::steady_clock::now();
    TESSERA_RETURN_IF_ERROR(ScoreReference());
    reference_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return absl::OkStatus();
}

std::unique_ptr<Decoder> Trainer::NewModel() const {
  const auto& m = options_.model;
  const layout::ParallelLayout& l = options_.layout;
  ModelPart part = layout_ ? PartOfRank(*layout_, groups_.pp->rank()) : ModelPart::Whole(m.layers);
  if (m.IsMoe() && groups_.ep->size() > 1) {
    // Expert parallelism: this rank's E/ep experts of every sparse block.
    part.expert_count = m.experts / groups_.ep->size();
    part.expert_first = groups_.ep->rank() * part.expert_count;
  }
  const layout::TpGrid grid = layout::TpGridOf(l.tp_mode, l.tp, l.tp_depth);
  auto model = l.tp_mode != layout::TpMode::k1D
                   ? std::make_unique<Decoder>(m, part, groups_.tp, grid, groups_.tp_axes, options_.seed, device_)
                   : std::make_unique<Decoder>(m, part, groups_.tp, options_.seed, device_);
  if (dpo() || reward() || grpo() || data_->sft()) {
    // Conversations with untrained targets (docs/fine-tuning.md): the loss of a step is the sum over
    // the global batch's trained targets divided by their number (Step sets each target's weight).
    model->set_masked_targets(true);
  }
  if (l.sp > 1) model->set_sequence_parallel(groups_.sp, l.sp_mode);
  if (groups_.ep->size() > 1) model->set_expert_parallel(groups_.ep);
  model->set_activation_checkpointing(options_.activation_checkpointing);
  model->set_fused_kernels(options_.fused_kernels);
  model->set_fp8(options_.fp8);
  return model;
}

absl::Status Trainer::OpenData() {
  if (dpo() || reward()) return OpenPairs();
  if (grpo()) return OpenPrompts();
  TokenDatasetOptions data = options_.data;
  data.seq_len = options_.model.seq_len;
  data.vocab = options_.model.vocab;
  std::vector<BlendSource> blend = options_.blend;
  for (BlendSource& b : blend) {
    b.data.seq_len = options_.model.seq_len;
    b.data.vocab = options_.model.vocab;
    b.data.shuffle = data.shuffle;
    b.data.seed = data.seed;
  }
  auto opened = TrainingData::OpenWithValidation(data, blend, options_.valid_data, options_.valid_fraction);
  if (!opened.ok()) return opened.status();
  data_ = std::move(opened->train);
  valid_ = std::move(opened->valid);
  if (options_.eval_batches < 1 && valid_) {
    return absl::InvalidArgumentError(absl::StrCat("train.eval_batches ", options_.eval_batches, " must be at least 1"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadPeftAdapter(const std::string& dir) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("model.lora.init_from ", dir, ": ", why));
  };
  auto config = ReadPeftLoraConfig(dir);
  if (!config.ok()) return fail(std::string(config.status().message()));
  const layout::LoraConfig& want = options_.model.lora;
  if (config->rank != want.rank) return fail(absl::StrCat("r ", config->rank, ", model.lora.rank ", want.rank));
  if (config->alpha != want.alpha) {
    return fail(absl::StrCat("lora_alpha ", config->alpha, ", model.lora.alpha ", want.alpha));
  }
  std::vector<std::string> got = config->targets, targets = want.targets;
  std::sort(got.begin(), got.end());
  std::sort(targets.begin(), targets.end());
  if (got != targets) {
    return fail(absl::StrCat("target_modules [", absl::StrJoin(got, ", "), "], model.lora.targets [",
                             absl::StrJoin(targets, ", "), "]"));
  }
  if (config->score_head != options_.model.score_head) {
    return fail(config->score_head
                    ? "the adapters of a reward model (task_type SEQ_CLS, its score head saved), for a model with an LM head"
                    : "adapters without a score head (task_type SEQ_CLS with modules_to_save [\"score\"]: what peft "
                      "saves for a reward model), for train.objective reward");
  }
  absl::Status s = LoadPeftAdapterTensors(*model_, dir);
  return s.ok() ? s : fail(std::string(s.message()));
}

absl::Status Trainer::LoadInitialWeights() {
  // Weights (fp32) and optimizer state come from the newest checkpoint, else init_from or pretrained,
  // else the seed.
  // LoRA: the frozen base always comes from init_from or pretrained (a checkpoint holds the adapters
  // only), then the adapters from lora.init_from, then the checkpoint's.
  // A checkpoint directory below OUTPUT_DIR must not be a link planted there (into another job's
  // directory): refused before anything is read from it.
  TESSERA_RETURN_IF_ERROR(userfs::CheckDirBelow(options_.output_dir, options_.checkpoint_dir));
  auto resume = AgreeOnResumeStep();
  if (!resume.ok()) return resume.status();
  const bool lora = options_.model.lora.enabled();
  if (*resume < 0 || lora) {
    TESSERA_RETURN_IF_ERROR(LoadStartingWeights(*model_));
    if (lora && !options_.lora_init_from.empty()) TESSERA_RETURN_IF_ERROR(LoadPeftAdapter(options_.lora_init_from));
  }
  if (*resume >= 0) {
    TESSERA_RETURN_IF_ERROR(LoadCheckpoint(absl::StrCat(options_.checkpoint_dir, "/", CheckpointName(*resume))));
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadStartingWeights(Decoder& model) const {
  if (!options_.init_from.empty()) {
    auto full = LoadTensors(options_.init_from);
    if (!full.ok()) return full.status();
    absl::Status s = model.LoadFull(*full);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("model.init_from ", options_.init_from, ": ", s.message()));
  } else if (!options_.pretrained.empty()) {
    // Mapped, not read: this rank copies its own parts (its stage's blocks, its tp slices).
    auto weights = OpenHfWeights(options_.pretrained, options_.model);
    absl::Status s = weights.ok() ? model.LoadFull(weights->tensors) : weights.status();
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("model.pretrained: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::CreateOptimizer(at::ScalarType dtype) {
  // One optimizer for every layout: stage 0 (nothing sharded) is the same code as stages 1–3.
  ZeroOptions z;
  z.stage = options_.layout.zero_stage;
  z.reduce_every_pass = options_.zero_reduce_every_pass;
  z.param_dtype = dtype;
  z.offload = options_.offload_optimizer;
  z.adam = AdamWOptions{options_.beta1, options_.beta2, options_.eps, options_.weight_decay};
  z.bucket_bytes = options_.dp_bucket_bytes;
  z.fused = options_.fused_kernels;
  // Gradients summed (and state sharded) over dp × sp, the replicas of every parameter (sequence
  // blocks contribute like separate samples; LossWeight); with pipeline stages, the first and the last stage sum
  // their gradients of the tied embedding (unless one rank holds both: zbv's first).
  // Expert parallelism: the experts' gradients over their own replicas (groups_.expert_dp).
  const bool tied_across_ranks = layout_ && !model_->tied_embedding().empty() && !options_.model.lora.enabled() &&
                                 layout_->RankOfStage(0) != layout_->RankOfStage(layout_->num_virtual_stages() - 1);
  auto zero = ZeroOptimizer::Create(model_.get(), groups_.dp_sp, groups_.tp, z, tied_across_ranks ? groups_.embed : nullptr,
                                    groups_.expert_dp, groups_.ep);
  if (!zero.ok()) return zero.status();
  zero_ = std::move(*zero);
  if (!pending_m_.empty()) TESSERA_RETURN_IF_ERROR(zero_->LoadState(pending_m_, pending_v_));
  pending_m_.clear();
  pending_v_.clear();
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::PipelineBubble() {
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(device_);
  at::Tensor busy = at::full({1}, pipeline_->step_seconds() - pipeline_->wait_seconds(), f64);
  at::Tensor longest = at::full({1}, pipeline_->step_seconds(), f64);
  TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(busy, ReduceOp::kSum));
  TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(longest, ReduceOp::kMax));
  const double span = longest.item<double>() * groups_.pp->size();
  return span > 0 ? std::clamp(1.0 - busy.item<double>() / span, 0.0, 1.0) : 0.0;
}

absl::Status Trainer::ScheduleFromMeasuredCosts() {
  if (!layout::IsZeroBubble(options_.layout.pp_schedule)) return absl::OkStatus();
  // The mean over every rank of the job (each stage has as many): the same bits everywhere, hence the
  // same schedule in every pipeline — tp peers and dp replicas run their collectives in one order.
  const PipeCosts& mine = pipeline_->measured_costs();
  at::Tensor costs = at::tensor({mine.forward, mine.backward, mine.weight}, at::TensorOptions().dtype(at::kDouble)).to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->AllReduce(costs, ReduceOp::kSum));
  costs = costs.cpu();
  const double n = groups_.world->size();
  const PipeCosts mean{costs[0].item<double>() / n, costs[1].item<double>() / n, costs[2].item<double>() / n};
  if (!(mean.forward > 0 && mean.backward > 0 && mean.weight > 0)) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(pipeline_->Reschedule(mean));
  if (groups_.global_rank == 0) {
    std::cerr << absl::StrFormat("tessera: rank 0: %s schedule from measured costs: F %.4f s, B %.4f s, W %.4f s",
                                 layout::Name(options_.layout.pp_schedule), mean.forward, mean.backward, mean.weight)
              << std::endl;
  }
  return absl::OkStatus();
}

bool Trainer::EvaluatesNow() const {
  if (!valid_ && !valid_pairs_.data) return false;
  return step_ == options_.steps || (options_.eval_every > 0 && step_ % options_.eval_every == 0);
}

absl::StatusOr<double> Trainer::Evaluate() {
  if (valid_pairs_.data) return EvaluatePairs();
  if (!valid_) return absl::FailedPreconditionError("the job has no validation data (data.valid_path or data.valid_fraction)");
  const int accum = Accumulation();
  // Every evaluation reads validation samples 0, 1, ... again: a blend starts over.
  if (valid_->blended()) {
    TESSERA_RETURN_IF_ERROR(valid_->RestoreBlend(0, std::vector<int64_t>(valid_->sources(), 0)));
  }
  at::NoGradGuard no_grad;
  auto unset_positions = absl::MakeCleanup([&] { model_->set_positions({}); });
  model_->set_dropout_seed(std::nullopt);  // Evaluation: no dropout.
  // The mean over the batches' targets (SFT data: their trained targets), each batch's loss weighted
  // by its target count.
  at::Tensor total = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  int64_t targets = 0;
  for (int k = 0; k < options_.eval_batches; ++k) {
    const int64_t first = static_cast<int64_t>(k) * options_.global_batch;
    int64_t batch_targets = 0;
    TESSERA_RETURN_IF_ERROR(WeighTrainedTargets(*valid_, first, accum, &batch_targets));
    targets += batch_targets;
    std::function<absl::StatusOr<at::Tensor>(int)> positions;
    if (valid_->packed()) {
      positions = [&](int a) { return ReadPositions(*valid_, first, a, accum); };
    }
    RECORD_USER_SCOPE("tessera::train::evaluate");
    auto sum = pipeline_->RunForwardOnly([&](int a) { return ReadTokens(*valid_, first, a, accum); }, positions);
    if (!sum.ok()) {
      return absl::Status(sum.status().code(), absl::StrCat("evaluation after step ", step_, ": ", sum.status().message()));
    }
    const double loss_sum = *sum;
    // As a training step's loss: the head's stage has it; each dp × sp replica's mean weighs the same.
    at::Tensor mean = at::full({1}, loss_sum / accum, at::TensorOptions().dtype(at::kDouble).device(device_));
    TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(mean, ReduceOp::kSum));
    if (groups_.dp_sp->size() > 1) TESSERA_RETURN_IF_ERROR(groups_.dp_sp->AllReduce(mean, ReduceOp::kAvg));
    total += mean * static_cast<double>(batch_targets);
  }
  // ZeRO-3: the units a forward pass without backward left gathered.
  zero_->ReleaseGatheredUnits();
  return targets > 0 ? total.item<double>() / static_cast<double>(targets) : 0.0;
}

int64_t Trainer::BytesCommunicated() const {
  std::vector<Communicator*> groups = {groups_.world.get(), groups_.dp.get(), groups_.pp.get(), groups_.tp.get(),
                                       groups_.sp.get(), groups_.dp_sp.get(), groups_.embed.get(),
                                       groups_.ep.get(), groups_.expert_dp.get()};
  for (const auto& a : groups_.tp_axes) groups.push_back(a.get());
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  int64_t n = 0;
  for (Communicator* g : groups) {
    if (g) n += g->bytes_communicated();
  }
  return n;
}

}  // namespace tessera::parallel
