// Everything a Trainer needs, as plain values (no torch, no proto): the rank process fills it from
// the job spec (worker/rank/spec_to_options.cc).
#ifndef TESSERA_PARALLEL_TRAIN_TRAINER_OPTIONS_H_
#define TESSERA_PARALLEL_TRAIN_TRAINER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/checkpoint/attempt_fence.h"
#include "formats/data/preference_dataset.h"
#include "formats/data/token_dataset.h"
#include "formats/data/training_data.h"
#include "parallel/models/model_config.h"
#include "parallel/objectives/grpo_loss_options.h"
#include "layout/modes.h"
#include "layout/parallel_layout.h"
#include "parallel/device/device_options.h"
#include "parallel/optim/lr_schedule.h"
#include "rewards/advantages.h"
#include "rewards/reward_set.h"

namespace tessera::parallel {

class Objective;  // parallel/objectives/objective.h

struct TrainerOptions {
  ModelConfig model;
  std::string init_from;            // Optional safetensors file of full tensors (documented names).
  std::string lora_init_from;       // model.lora.init_from: a PEFT adapter directory to start from.
  std::string pretrained;           // Optional transformers model directory (parallel/models/hf_weights.h).
  formats::data::TokenDatasetOptions data;
  std::vector<formats::data::BlendSource> blend;  // Non-empty: these sources mixed by weight instead of data.path.
  // Validation (Trainer::Evaluate): valid_data.path names its own token stream (read in order), or
  // valid_fraction > 0 holds out the tail of data.path (of each blend source, blended by the same
  // weights; token_dataset.h, "Held-out tail"). Neither: no validation.
  formats::data::TokenDatasetOptions valid_data;
  double valid_fraction = 0;
  int64_t eval_every = 0;           // Evaluate after every N-th step; 0: only after the last step.
  int64_t log_every = 0;            // A progress line on stderr every N steps and at the last; 0: none.
  // Peak FLOP/s of one device: steps.jsonl reports mfu = tokens/s · model FLOPs per token / (this ·
  // world size). 0: no mfu.
  double peak_flops_per_device = 0;
  int eval_batches = 10;            // Each evaluation: this many global batches of validation samples.
  // Sizes, rank order and modes of every parallel axis, and the ZeRO stage (layout/parallel_layout.h);
  // the process groups the Trainer gets must have been built from the same layout.
  layout::ParallelLayout layout;
  DeviceOptions device;             // cpu, or cuda:local_rank (parallel/device/device.h).
  int64_t dp_bucket_bytes = 25 << 20;
  bool zero_reduce_every_pass = true;  // Stages 2–3: reduce-scatter in every backward pass, not once a step.
  bool offload_optimizer = false;   // Master weights and moments in host memory, update on the host.
  layout::Precision precision = layout::Precision::kFp32;  // Parameters and activations; fp32 masters.
  // With bf16 precision (train.precision fp8): the blocks' linear GEMMs in FP8 (Decoder::set_fp8).
  std::optional<layout::Fp8Options> fp8;
  // What each micro-batch's loss is (parallel/objectives; Decoder::set_objective), in training and
  // evaluation alike. Null: the mean cross-entropy.
  std::shared_ptr<const Objective> objective;
  // train.objective dpo (docs/post-training.md): data.path is a preference dataset (its pairs cut as
  // preference_cut says; data.shuffle permutes them per epoch as it permutes SFT samples), micro_batch
  // and global_batch count pairs, and the loss is DPO's against the reference — the initial weights or
  // dpo.reference's, scored over the pairs before the first step and kept in the checkpoints.
  // `objective` (tests) must be null then.
  layout::Objective objective_kind = layout::Objective::kCrossEntropy;
  struct Dpo {
    double beta = 0.1;
    layout::DpoLossType loss_type = layout::DpoLossType::kSigmoid;
    double label_smoothing = 0;
    // Empty: the reference is the initial weights. Else a tessera checkpoint (a step directory or a
    // checkpoint directory: its newest) or a transformers model directory of the job's model.
    std::string reference;
  } dpo;
  // train.objective reward (docs/post-training.md): data.path as for dpo; the model's head is a score
  // head (the Trainer sets model.score_head) and the loss RewardTrainer's with this centring weight.
  struct Reward {
    double center_coefficient = 0;
  } reward;
  // dpo, reward: data.max_prompt_tokens and max_completion_tokens; grpo: data.max_prompt_tokens.
  formats::data::PreferenceTruncation preference_cut;
  // train.objective grpo (docs/post-training.md "GRPO"): data.path is a prompt dataset
  // (formats/data/prompt_dataset.h); global_batch counts prompts (generation k — step k at
  // num_iterations 1 — takes prompts k·B … k·B+B−1, wrapping, or data.shuffle's permutation of each
  // epoch), each sampled num_generations times by the
  // ranks that train on it; micro_batch counts completions. TRL 0.24's GRPOTrainer definitions.
  struct Grpo {
    int num_generations = 8;
    int64_t max_completion_tokens = 256;
    double temperature = 1;
    double top_p = 1;
    int top_k = 0;
    GrpoLossOptions loss;  // normalizer: set per step by the Trainer.
    rewards::RewardScale scale_rewards = rewards::RewardScale::kGroup;
    int num_iterations = 1;
    bool mask_truncated_completions = false;
    std::vector<rewards::RewardFunctionOptions> rewards;
  } grpo;
  double initial_loss_scale = 65536;  // fp16: dynamic loss scaling starts here,
  int loss_scale_window = 1000;       // doubles after this many steps without overflow, halves on one.

  int64_t steps = 100;              // Total optimizer steps of the job.
  int micro_batch = 8;
  int global_batch = 8;             // micro_batch × accumulation × dp.
  LrScheduleOptions lr;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;           // 0 disables.
  uint64_t seed = 1234;             // Weight initialisation.
  bool activation_checkpointing = false;  // Recompute each block in backward (less activation memory).
  bool fused_kernels = true;        // CUDA: fused layer norm, bias+GELU, cross-entropy, AdamW (kernels/fused_ops.h).

  std::string checkpoint_dir;       // Resumes from its newest checkpoint when there is one.
  int64_t checkpoint_every = 0;     // 0: only at the end.
  int checkpoint_keep = 2;
  // Snapshot at the checkpoint step, write and commit in the background (Trainer::SaveCheckpoint).
  bool checkpoint_async = false;
  // Tests: called on the background thread before it writes a checkpoint (may block it).
  std::function<void()> before_background_write;

  std::string output_dir;           // steps.jsonl (written by global rank 0) and debug/.
  // A cluster attempt's fencing token (formats/checkpoint/attempt_fence.h): rank 0 claims output_dir
  // for it at the start and checks it before every checkpoint commit or prune and every steps.jsonl
  // write, so that a superseded attempt stops instead of writing. attempt 0 (`tessera run`): unfenced.
  formats::checkpoint::FenceToken fence;
  int64_t dump_at_step = 0;         // > 0: after that step, write full weights and gradients to
                                    // output_dir/debug/step_N.safetensors (a debugging aid).
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_TRAIN_TRAINER_OPTIONS_H_
