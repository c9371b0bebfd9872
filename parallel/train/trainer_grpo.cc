// Trainer: train.objective grpo (trainer.h; docs/post-training.md "GRPO") — each step samples its
// completions in the ranks that train on them, scores them on rank 0, and trains GrpoObjective on
// their rows:
//   0. grpo.num_iterations μ: steps k·μ … k·μ + μ − 1 train on the completions of generation k (the
//      first samples them, the others reuse its rows; π_old the sampler's log-probabilities).
//   1. Prompts: the generation's global batch of B prompts (global prompt g = k·B + j, the prompt
//      dataset's g mod N or data.shuffle's permutation of its epoch); dp rank d takes j in
//      [d·B/dp, (d+1)·B/dp). Every rank of a 1D tensor-parallel group samples the same completions in
//      lockstep (generate.h).
//   2. Sampling: grpo.num_generations completions of each prompt, drawn with a seed of the job's seed,
//      the generation and j only — a resumed job samples what the uninterrupted one sampled, in any layout
//      whose weights are the same.
//   3. Rewards (trainer_grpo_rewards.cc): the completions gathered over dp, decoded on global rank 0 and
//      scored there by the reward functions (one RewardSet for the job, its programs kept running, its
//      reward models loaded there); the rewards broadcast
//      to every rank, which computes the advantages (rewards/advantages.h), the same everywhere. A
//      failure to score fails the step on every rank (rank 0's error names the function and
//      completion), never a step trained on missing rewards.
//   4. Rows: this rank's completions as GRPO rows (grpo_rows.h), micro_batch rows per micro-batch.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/steplog/rollout_log.h"
#include "common/userfs/user_files.h"
#include "formats/data/token_dataset.h"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/models/generate.h"
#include "parallel/models/hf_weights.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"
#include "rewards/advantages.h"

namespace tessera::parallel {
namespace {

constexpr char kRolloutLog[] = "rollouts.jsonl";

// The sampler's seed of the step's prompt j: the job's seed, the step and j mixed (SplitMix64 steps).
uint64_t PromptSeed(uint64_t seed, int64_t step, int64_t j) {
  uint64_t h = seed ^ 0x6772706f5f736565ull;  // "grpo_see"
  for (uint64_t v : {static_cast<uint64_t>(step), static_cast<uint64_t>(j)}) {
    h = SampleSeed(h ^ v, 0);
  }
  return h;
}

}  // namespace

absl::Status Trainer::OpenPrompts() {
  const std::string& path = options_.data.path;
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("data.path ", path, ": ", s.message()));
  };
  auto prompts = formats::data::PromptDataset::Open(path, options_.model.vocab);
  if (!prompts.ok()) return fail(prompts.status());
  prompts_ = *std::move(prompts);
  auto json = prompts_->ReadTokenizerJson();
  if (!json.ok()) return fail(json.status());
  auto tokenizer = formats::data::Tokenizer::FromJson(*json, prompts_->tokenizer_path());
  if (!tokenizer.ok()) return fail(tokenizer.status());
  prompt_tokenizer_ = *std::move(tokenizer);
  // Every prompt the job reads leaves room for a whole completion: prompt + max_completion_tokens
  // ids in a row of seq_len + 1 (the sampler reads the prompt and all but the last new token).
  // The job reads the prompts of ⌈steps / num_iterations⌉ generations of B (at most every prompt;
  // computed without overflow). Each is read whole here, on every rank, before any collective: a
  // damaged line fails every rank with its own message, not one rank's peers with a lost connection.
  const int64_t n = prompts_->prompts(), B = options_.global_batch, mu = options_.grpo.num_iterations;
  const int64_t generations = options_.steps / mu + (options_.steps % mu != 0 ? 1 : 0);
  const int64_t read = generations > n / B ? n : std::min<int64_t>(n, generations * B);
  const int64_t room = options_.model.seq_len + 1 - options_.grpo.max_completion_tokens;
  const int64_t cut = options_.preference_cut.max_prompt;  // data.max_prompt_tokens (0: none).
  for (int64_t g = 0; g < read; ++g) {
    const int64_t i = options_.data.shuffle ? PromptOf(g) : g;
    if (auto row = prompts_->Row(i); !row.ok()) return fail(row.status());
    longest_scored_ = std::max<int64_t>(longest_scored_, prompts_->length(i) + options_.grpo.max_completion_tokens);
    const int64_t length = cut > 0 ? std::min<int64_t>(cut, prompts_->length(i)) : prompts_->length(i);
    if (length > room) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.path ", path, ": prompt ", i, " has ", length, cut > 0 ? " tokens (after data.max_prompt_tokens)" : " tokens",
          "; with grpo.max_completion_tokens ",
          options_.grpo.max_completion_tokens, " a row holds at most model.seq_len + 1 = ", options_.model.seq_len + 1,
          " ids, so prompts may have ", std::max<int64_t>(room, 0),
          " (shorten the prompts, lower grpo.max_completion_tokens or raise model.seq_len)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<formats::data::PromptRow> Trainer::ReadPrompt(int64_t i) const {
  auto row = prompts_->Row(i);
  if (!row.ok()) return row.status();
  const int64_t cut = options_.preference_cut.max_prompt;
  // Cut from the left, as TRL's max_prompt_length; the rewards still see the whole prompt's text (TRL
  // gives its reward functions the dataset's prompts).
  if (cut > 0 && static_cast<int64_t>(row->ids.size()) > cut) options_.preference_cut.CutPrompt(&row->ids);
  return row;
}

absl::Status Trainer::CreateGrpoReference() {
  // grpo.beta > 0: the KL term's frozen reference, the initial model (TRL's ref_model); under LoRA the
  // base model itself, the adapters off (TRL with peft), so nothing is built.
  if (options_.grpo.loss.beta == 0 || options_.model.lora.enabled()) return absl::OkStatus();
  std::unique_ptr<Decoder> ref = NewModel();  // The seed's weights, as model_'s before any were loaded.
  TESSERA_RETURN_IF_ERROR(LoadStartingWeights(*ref));
  // Scored in the job's precision, as the policy's own forward is.
  for (Param& p : ref->params()) p.value = p.value.detach().to(param_dtype_);
  grpo_reference_ = std::move(ref);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> Trainer::ReferenceLogps(const std::vector<int64_t>& prompt,
                                                            const std::vector<int64_t>& completion) {
  Decoder& ref = grpo_reference_ ? *grpo_reference_ : *model_;
  if (!grpo_reference_) model_->set_adapters_enabled(false);
  auto restore = absl::MakeCleanup([&] { model_->set_adapters_enabled(true); });
  // The whole sequence but its last token, in one pass: the logits at the prompt's last position and
  // at every completion token but the last predict the completion.
  std::vector<int64_t> sequence = prompt;
  sequence.insert(sequence.end(), completion.begin(), completion.end() - 1);
  GenerateOptions o;
  o.max_new_tokens = 0;
  at::Tensor logits;
  auto done = Sample(ref, sequence, o, nullptr, &logits);
  if (!done.ok()) return done.status();
  const int64_t P = static_cast<int64_t>(prompt.size()), C = static_cast<int64_t>(completion.size());
  // As the sampler's: log-softmax of the fp32 logits / T, in float64.
  const at::Tensor scores = logits.narrow(0, P - 1, C).to(at::kFloat) / options_.grpo.temperature;
  const at::Tensor logps = at::log_softmax(scores.to(at::kDouble), -1)
                               .gather(1, at::tensor(completion, at::kLong).unsqueeze(1))
                               .squeeze(1)
                               .contiguous();
  return std::vector<double>(logps.data_ptr<double>(), logps.data_ptr<double>() + C);
}

int64_t Trainer::PromptOf(int64_t g) const {
  const int64_t n = prompts_->prompts();
  if (!options_.data.shuffle) return g % n;
  const int64_t epoch = g / n;
  if (epoch != prompt_permutation_epoch_) {
    prompt_permutation_ = formats::data::TokenDataset::Permutation(n, options_.data.seed + static_cast<uint64_t>(epoch));
    prompt_permutation_epoch_ = epoch;
  }
  return prompt_permutation_[g % n];
}

int Trainer::GrpoAccumulation() const {
  const int64_t rows = static_cast<int64_t>(options_.global_batch) / groups_.dp->size() * options_.grpo.num_generations;
  return static_cast<int>(rows / options_.micro_batch);
}

absl::Status Trainer::GenerateRollouts() {
  const auto start = std::chrono::steady_clock::now();
  const int G = options_.grpo.num_generations;
  const int64_t B = options_.global_batch, dp = groups_.dp->size();
  const int64_t local = B / dp, first_j = groups_.dp->rank() * local;
  const int64_t C = options_.grpo.max_completion_tokens;
  // Generation k serves steps k·μ … k·μ + μ − 1 (grpo.num_iterations μ) and takes prompts k·B … k·B + B − 1.
  const int64_t generation = step_ / options_.grpo.num_iterations;
  // ZeRO-3: the parameters gathered once for the sampler's (and the LoRA reference's) many forward
  // passes, freed before the training forwards (which gather unit by unit).
  TESSERA_RETURN_IF_ERROR(zero_->HoldGathered(true));
  auto unhold = absl::MakeCleanup([this] { zero_->HoldGathered(false).IgnoreError(); });
  // 1–2. This rank's prompts and their completions.
  std::vector<formats::data::PromptRow> rows(local);
  std::vector<Completion> completions;
  completions.reserve(local * G);
  {
    at::NoGradGuard no_grad;
    model_->set_dropout_seed(std::nullopt);
    GenerateOptions o;
    o.max_new_tokens = static_cast<int>(C);
    o.temperature = options_.grpo.temperature;
    o.top_k = options_.grpo.top_k;
    o.top_p = options_.grpo.top_p;
    o.stop_token = prompts_->stop_token();
    o.num_samples = G;
    // The rank's prompts as one batch (SampleBatch), each drawn with its own seed.
    std::vector<std::vector<int64_t>> ids(local);
    std::vector<uint64_t> seeds(local);
    for (int64_t j = 0; j < local; ++j) {
      auto row = ReadPrompt(PromptOf(generation * B + first_j + j));
      if (!row.ok()) return row.status();
      rows[j] = *std::move(row);
      ids[j].assign(rows[j].ids.begin(), rows[j].ids.end());
      seeds[j] = PromptSeed(options_.seed, generation, first_j + j);
    }
    auto drawn = SampleBatch(*model_, ids, seeds, o);
    if (!drawn.ok()) {
      return absl::Status(drawn.status().code(), absl::StrCat("step ", step_ + 1, ": sampling: ", drawn.status().message()));
    }
    for (std::vector<Completion>& group : *drawn) {
      for (Completion& c : group) completions.push_back(std::move(c));
    }
  }
  const double generation_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // 3. Every completion to every rank of this tp slice: [n, C + 2] ids (length, truncated, ids, −1
  // padding) and [n, C] log-probabilities.
  const int64_t n = local * G;
  at::Tensor ids = at::full({n, C + 2}, -1, at::kLong), logps = at::zeros({n, C}, at::kDouble);
  {
    auto id_out = ids.accessor<int64_t, 2>();
    auto logp_out = logps.accessor<double, 2>();
    for (int64_t c = 0; c < n; ++c) {
      const Completion& done = completions[c];
      id_out[c][0] = static_cast<int64_t>(done.tokens.size());
      id_out[c][1] = done.truncated ? 1 : 0;
      for (size_t k = 0; k < done.tokens.size(); ++k) {
        id_out[c][2 + static_cast<int64_t>(k)] = done.tokens[k];
        logp_out[c][static_cast<int64_t>(k)] = done.logprobs[k];
      }
    }
  }
  at::Tensor all_ids = ids, all_logps = logps;
  if (dp > 1) {
    at::Tensor in_ids = ids.to(device_), in_logps = logps.to(device_);
    at::Tensor out_ids = at::empty({dp * n, C + 2}, in_ids.options());
    at::Tensor out_logps = at::empty({dp * n, C}, in_logps.options());
    TESSERA_RETURN_IF_ERROR(groups_.dp->AllGather(in_ids, out_ids));
    TESSERA_RETURN_IF_ERROR(groups_.dp->AllGather(in_logps, out_logps));
    all_ids = out_ids.cpu();
    all_logps = out_logps.cpu();
  }
  const int64_t total = B * G;
  all_ids = all_ids.contiguous();
  all_logps = all_logps.contiguous();
  const auto id_at = all_ids.accessor<int64_t, 2>();
  const auto logp_at = all_logps.accessor<double, 2>();
  // A peer's length is checked before it is used (a wrong one would index past the row).
  for (int64_t c = 0; c < total; ++c) {
    if (id_at[c][0] < 1 || id_at[c][0] > C) {
      return absl::InternalError(absl::StrCat("step ", step_ + 1, ": completion ", c, " arrived with length ", id_at[c][0]));
    }
  }
  auto length_of = [&](int64_t c) { return id_at[c][0]; };
  auto truncated_of = [&](int64_t c) { return id_at[c][1] != 0; };
  auto tokens_of = [&](int64_t c) {
    std::vector<int64_t> t(static_cast<size_t>(length_of(c)));
    for (size_t k = 0; k < t.size(); ++k) t[k] = id_at[c][2 + static_cast<int64_t>(k)];
    return t;
  };
  // Rank 0 scores every completion (its prompts read once); the others wait for its verdict.
  const size_t F = options_.grpo.rewards.size();
  std::vector<formats::data::PromptRow> step_prompts;  // Rank 0: the generation's B prompts (ids cut),
  std::vector<std::vector<int32_t>> whole_ids;          // and their whole ids (what a reward model scores).
  std::vector<rewards::ScoredCompletion> batch;
  absl::Status prepared = absl::OkStatus();
  if (groups_.global_rank == 0) {
    for (int64_t j = 0; j < B && prepared.ok(); ++j) {
      auto whole = prompts_->Row(PromptOf(generation * B + j));
      if (!whole.ok()) {
        prepared = whole.status();
        break;
      }
      whole_ids.push_back(whole->ids);
      options_.preference_cut.CutPrompt(&whole->ids);  // ReadPrompt's cut, on the row read once.
      step_prompts.push_back(*std::move(whole));
    }
    batch.resize(static_cast<size_t>(total));
    for (int64_t c = 0; c < total && prepared.ok(); ++c) {
      const formats::data::PromptRow& prompt = step_prompts[c / G];
      batch[c].prompt = prompt.text;
      batch[c].completion = CompletionText(tokens_of(c));
      batch[c].completion_tokens = length_of(c);
      batch[c].fields = prompt.fields;
      // As TRL's reward models see the whole prompt (data.max_prompt_tokens cuts only the policy's).
      batch[c].prompt_ids = whole_ids[c / G];
      for (int64_t t : tokens_of(c)) batch[c].completion_ids.push_back(static_cast<int32_t>(t));
    }
  }
  auto scored = ScoreOnRankZero(std::move(batch), total, prepared);
  if (!scored.ok()) return absl::Status(scored.status().code(), absl::StrCat("step ", step_ + 1, ": the rewards: ",
                                                                             scored.status().message()));
  const std::vector<std::vector<double>>& per_function = *scored;
  std::vector<double> weights;
  for (size_t f = 0; f < F; ++f) weights.push_back(options_.grpo.rewards[f].weight);
  auto advantages = rewards::ComputeAdvantages(per_function, {G, options_.grpo.scale_rewards, weights});
  if (!advantages.ok()) {
    return absl::Status(advantages.status().code(),
                        absl::StrCat("step ", step_ + 1, ": the advantages: ", advantages.status().message()));
  }
  // 4. This rank's rows.
  std::vector<Rollout> rollouts(static_cast<size_t>(n));
  // dapo's count: every completion token of the step over the job, masked truncated ones too (TRL's
  // num_items_in_batch is counted before mask_truncated_completions masks them).
  int64_t trained = 0;
  for (int64_t c = 0; c < total; ++c) trained += length_of(c);
  for (int64_t c = 0; c < n; ++c) {
    Rollout& r = rollouts[c];
    const std::vector<int32_t>& prompt = rows[c / G].ids;
    r.prompt.assign(prompt.begin(), prompt.end());
    r.completion.assign(completions[c].tokens.begin(), completions[c].tokens.end());
    r.logprobs = completions[c].logprobs;
    r.advantage = advantages->advantages[first_j * G + c];
    if (options_.grpo.loss.beta != 0) {
      at::NoGradGuard no_grad;
      auto ref = ReferenceLogps(std::vector<int64_t>(prompt.begin(), prompt.end()), completions[c].tokens);
      if (!ref.ok()) return ref.status();
      r.ref_logprobs = *std::move(ref);
    }
  }
  std::move(unhold).Invoke();
  auto made = MakeGrpoRows(rollouts, options_.model.seq_len);
  if (!made.ok()) return made.status();
  grpo_rows_ = *std::move(made);
  if (options_.grpo.mask_truncated_completions) {
    // A truncated completion adds no loss: its targets untrained (SFT data's −id − 1).
    const int64_t width = options_.model.seq_len + 1;
    for (int64_t c = 0; c < n; ++c) {
      if (!completions[c].truncated) continue;
      for (int64_t t = 1; t < width; ++t) {
        int64_t& id = grpo_rows_.tokens[c * width + t];
        if (id >= 0) id = -id - 1;
      }
    }
  }
  // dapo: the step's loss is the sum over every completion token / their number; each micro-batch's
  // loss weighs 1 / (accum · dp) in the step (LossWeight), so its normalizer is that count over
  // accum · dp (TRL clamps nothing: at least one token here, so that a step of masked completions is 0).
  grpo_objective_->set_normalizer(static_cast<double>(std::max<int64_t>(trained, 1)) /
                                  (static_cast<double>(GrpoAccumulation()) * dp));
  // The step log's numbers (StepStats::objective_metrics gets them after the step's own).
  grpo_metrics_.clear();
  grpo_metrics_.emplace_back("reward", advantages->reward);
  grpo_metrics_.emplace_back("reward_std", advantages->reward_std);
  grpo_metrics_.emplace_back("frac_reward_zero_std", advantages->frac_reward_zero_std);
  for (size_t f = 0; f < F; ++f) {
    grpo_metrics_.emplace_back("reward_" + options_.grpo.rewards[f].name, advantages->function_mean[f]);
  }
  int64_t generated = 0, longest = 0, truncated = 0;
  for (int64_t c = 0; c < total; ++c) {
    generated += length_of(c);
    longest = std::max(longest, length_of(c));
    truncated += truncated_of(c) ? 1 : 0;
  }
  grpo_completion_metrics_ = {{"completion_length", static_cast<double>(generated) / total},
                              {"completion_length_max", static_cast<double>(longest)},
                              {"truncated_fraction", static_cast<double>(truncated) / total},
                              {"generation_seconds", generation_seconds},
                              {"generated_tokens_per_s", generated / std::max(generation_seconds, 1e-9)}};
  grpo_generated_tokens_ = generated;
  // rollouts.jsonl: every completion of the step, in batch order.
  if (groups_.global_rank == 0) {
    std::string lines;
    for (int64_t c = 0; c < total; ++c) {
      steplog::RolloutRecord r;
      r.step = step_ + 1;
      r.prompt_index = c / G;
      r.sample = c % G;
      r.prompt_ids.assign(step_prompts[c / G].ids.begin(), step_prompts[c / G].ids.end());
      r.completion_ids = tokens_of(c);
      for (int64_t k = 0; k < length_of(c); ++k) r.logprobs.push_back(logp_at[c][k]);
      for (size_t f = 0; f < F; ++f) r.rewards.emplace_back(options_.grpo.rewards[f].name, per_function[f][c]);
      r.reward = advantages->rewards[c];
      r.advantage = advantages->advantages[c];
      r.truncated = truncated_of(c);
      lines += steplog::FormatRolloutLine(r) + "\n";
    }
    TESSERA_RETURN_IF_ERROR(Fence().Check());
    auto out = userfs::OpenUnder(options_.output_dir, kRolloutLog, {userfs::Access::kAppend});
    if (!out.ok()) return out.status();
    if (absl::Status w = userfs::WriteAll(out->get(), lines); !w.ok()) {
      return absl::InternalError(absl::StrCat(options_.output_dir, "/", kRolloutLog, ": ", w.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::TrimRolloutLog() {
  auto dropped = steplog::TrimJsonLinesToStep(options_.output_dir, kRolloutLog, step_);
  return dropped.ok() ? absl::OkStatus() : dropped.status();
}

absl::StatusOr<at::Tensor> Trainer::GrpoTokensOf(int a) const {
  const int64_t micro = options_.micro_batch, width = options_.model.seq_len + 1;
  std::vector<int64_t> part(grpo_rows_.tokens.begin() + a * micro * width,
                            grpo_rows_.tokens.begin() + (a + 1) * micro * width);
  return at::tensor(part, at::kLong).view({micro, width}).to(device_);
}

absl::StatusOr<at::Tensor> Trainer::GrpoDataOf(int a) const {
  const int64_t micro = options_.micro_batch, width = 2 * options_.model.seq_len + 1;
  std::vector<double> part(grpo_rows_.data.begin() + a * micro * width, grpo_rows_.data.begin() + (a + 1) * micro * width);
  return at::tensor(part, at::kDouble).view({micro, width}).to(device_);
}

}  // namespace tessera::parallel
