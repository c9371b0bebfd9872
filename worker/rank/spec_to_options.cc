#include "worker/rank/spec_to_options.h"

#include "spec/data_options_of.h"
#include "spec/layout_of.h"
#include "spec/model_config_of.h"

namespace tessera::rank {

parallel::TrainerOptions ToTrainerOptions(const v1::JobSpec& spec) {
  parallel::TrainerOptions o;
  const auto& m = spec.model();
  o.model = spec::ModelConfigOf(m);
  o.init_from = m.init_from();
  o.lora_init_from = m.lora().init_from();
  o.pretrained = m.pretrained();
  o.data = spec::DataOptionsOf(spec);
  o.blend = spec::BlendOf(spec);
  o.valid_data = spec::ValidDataOptionsOf(spec);
  o.valid_fraction = spec.data().valid_fraction();
  const auto& p = spec.parallel();
  o.layout = spec::LayoutOf(spec);
  o.device.kind = spec.device() == v1::DEVICE_CUDA ? parallel::DeviceKind::kCuda : parallel::DeviceKind::kCpu;
  o.dp_bucket_bytes = static_cast<int64_t>(p.dp_bucket_mb() * (1 << 20));
  o.zero_reduce_every_pass = p.zero_grad_reduce() != v1::ZERO_GRAD_REDUCE_STEP;
  const auto& t = spec.train();
  o.steps = t.steps();
  o.micro_batch = t.micro_batch();
  o.global_batch = t.global_batch();
  o.lr = {t.lr(), t.min_lr(), t.warmup_steps(), t.steps(), t.schedule() != v1::LR_SCHEDULE_CONSTANT};
  o.beta1 = t.betas(0);
  o.beta2 = t.betas(1);
  o.eps = t.eps();
  o.weight_decay = t.weight_decay();
  o.grad_clip = t.grad_clip();
  o.seed = t.seed();
  o.activation_checkpointing = t.activation_checkpointing();
  o.fused_kernels = t.fused_kernels();
  o.precision = spec::PrecisionOf(spec);
  if (t.precision() == v1::PRECISION_FP8) {
    layout::Fp8Options f;
    f.recipe = t.fp8().recipe() == v1::FP8_RECIPE_ROWWISE ? layout::Fp8Recipe::kRowwise : layout::Fp8Recipe::kTensorwise;
    if (t.fp8().min_dim() != 0) f.min_dim = t.fp8().min_dim();  // 0: the default (validate.cc).
    f.filter.assign(t.fp8().filter().begin(), t.fp8().filter().end());
    o.fp8 = std::move(f);
  }
  o.initial_loss_scale = t.initial_loss_scale();
  o.loss_scale_window = t.loss_scale_window();
  o.eval_every = t.eval_every();
  o.log_every = t.log_every();
  o.eval_batches = t.eval_batches();
  o.offload_optimizer = spec.optimizer().offload() == v1::OFFLOAD_CPU;
  o.checkpoint_dir = spec.checkpoint().dir();
  o.checkpoint_every = spec.checkpoint().every_steps();
  o.checkpoint_keep = spec.checkpoint().keep();
  o.checkpoint_async = spec.checkpoint().async();
  o.output_dir = spec.output_dir();
  if (t.objective() == v1::OBJECTIVE_DPO) {
    o.objective_kind = layout::Objective::kDpo;
    o.dpo.beta = spec.dpo().beta();
    o.dpo.loss_type = spec.dpo().loss_type() == v1::DPO_LOSS_TYPE_IPO ? layout::DpoLossType::kIpo : layout::DpoLossType::kSigmoid;
    o.dpo.label_smoothing = spec.dpo().label_smoothing();
    if (spec.dpo().reference() != "initial") o.dpo.reference = spec.dpo().reference();
    o.preference_cut = {spec.data().max_prompt_tokens(), spec.data().max_completion_tokens()};
  }
  if (t.objective() == v1::OBJECTIVE_REWARD) {
    o.objective_kind = layout::Objective::kReward;
    o.reward.center_coefficient = spec.reward_model().center_coefficient();
    o.preference_cut = {spec.data().max_prompt_tokens(), spec.data().max_completion_tokens()};
  }
  if (t.objective() == v1::OBJECTIVE_GRPO) {
    o.objective_kind = layout::Objective::kGrpo;
    o.preference_cut = {spec.data().max_prompt_tokens(), 0};  // Prompts cut from the left.
    const v1::GrpoSpec& g = spec.grpo();
    o.grpo.num_generations = g.num_generations();
    o.grpo.max_completion_tokens = g.max_completion_tokens();
    o.grpo.temperature = g.temperature();
    o.grpo.top_p = g.top_p();
    o.grpo.top_k = g.top_k();
    o.grpo.loss.type = g.loss_type() == v1::GRPO_LOSS_TYPE_GRPO      ? parallel::GrpoLossType::kGrpo
                       : g.loss_type() == v1::GRPO_LOSS_TYPE_BNPO    ? parallel::GrpoLossType::kBnpo
                       : g.loss_type() == v1::GRPO_LOSS_TYPE_DR_GRPO ? parallel::GrpoLossType::kDrGrpo
                                                                     : parallel::GrpoLossType::kDapo;
    o.grpo.loss.beta = g.beta();
    o.grpo.loss.epsilon = g.epsilon();
    o.grpo.loss.epsilon_high = g.has_epsilon_high() ? g.epsilon_high() : g.epsilon();
    o.grpo.loss.max_completion_tokens = g.max_completion_tokens();
    o.grpo.scale_rewards = g.scale_rewards() == v1::REWARD_SCALE_BATCH  ? rewards::RewardScale::kBatch
                           : g.scale_rewards() == v1::REWARD_SCALE_NONE ? rewards::RewardScale::kNone
                                                                        : rewards::RewardScale::kGroup;
    o.grpo.num_iterations = g.num_iterations();
    o.grpo.mask_truncated_completions = g.mask_truncated_completions();
    for (const v1::RewardSpec& r : g.rewards()) {
      rewards::RewardFunctionOptions f;
      f.name = r.name();
      f.weight = r.has_weight() ? r.weight() : 1.0;
      switch (r.kind()) {
        case v1::REWARD_KIND_REGEX:
          f.kind = rewards::RewardKind::kRegex;
          f.pattern = r.pattern();
          break;
        case v1::REWARD_KIND_LENGTH:
          f.kind = rewards::RewardKind::kLength;
          f.max_tokens = r.max_tokens();
          f.soft_cache = r.soft_cache();
          break;
        case v1::REWARD_KIND_PROGRAM:
          f.kind = rewards::RewardKind::kProgram;
          f.program.argv.assign(r.command().begin(), r.command().end());
          if (r.timeout_s() > 0) f.program.timeout = absl::Seconds(r.timeout_s());
          break;
        case v1::REWARD_KIND_MODEL:
          f.kind = rewards::RewardKind::kModel;
          f.model_path = r.path();
          break;
        default:  // exact_answer.
          f.kind = rewards::RewardKind::kExactAnswer;
          if (!r.field().empty()) f.field = r.field();
      }
      o.grpo.rewards.push_back(std::move(f));
    }
  }
  return o;
}

}  // namespace tessera::rank
