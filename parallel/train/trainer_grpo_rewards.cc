// Trainer: a GRPO step's rewards (trainer_grpo.cc's phase 3) — global rank 0 decodes the completions
// and scores them with the job's reward functions while the other ranks wait for its verdict, and the
// reward models of `kind: model` that it holds for that.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/text/utf8.h"
#include "formats/model/family.h"
#include "parallel/models/load_model.h"
#include "parallel/models/reward_scoring.h"
#include "parallel/objectives/reward_objective.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

absl::Status Trainer::OpenRewards() {
  // Rank 0 starts the programs and loads the reward models (on the job's device); every rank learns
  // its verdict before the first collective of training, so a failure there is every rank's error.
  absl::Status opened = absl::OkStatus();
  if (groups_.global_rank == 0) {
    opened = LoadRewardModels();
    if (opened.ok()) {
      auto set = rewards::RewardSet::Create(
          options_.grpo.rewards, [this](size_t f, const std::vector<rewards::ScoredCompletion>& batch) {
            return ScoreWithRewardModel(*reward_models_.at(f), batch);
          });
      if (set.ok()) {
        rewards_ = *std::move(set);
      } else {
        opened = set.status();
      }
    }
  }
  at::Tensor failed = at::full({1}, opened.ok() ? 0.0 : 1.0, at::TensorOptions().dtype(at::kDouble)).to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->AllReduce(failed, ReduceOp::kMax));
  if (!opened.ok()) return opened;
  if (failed.cpu().item<double>() > 0) {
    return absl::FailedPreconditionError("rank 0 could not start the reward functions (its error names the reward)");
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadRewardModels() {
  for (size_t f = 0; f < options_.grpo.rewards.size(); ++f) {
    const rewards::RewardFunctionOptions& r = options_.grpo.rewards[f];
    if (r.kind != rewards::RewardKind::kModel) continue;
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("grpo.rewards[", f, "] (", r.name, "): ", r.model_path, ": ", why));
    };
    auto loaded = LoadModelForInference(r.model_path, device_, "");
    if (!loaded.ok()) return fail(std::string(loaded.status().message()));
    const ModelConfig& c = loaded->model->config();
    if (!c.score_head) {
      return fail("not a reward model (its head is an LM head): give a checkpoint of train.objective reward or a "
                  "transformers *ForSequenceClassification directory");
    }
    // It scores the policy's ids: the prompt dataset's tokenizer must be its own.
    if (c.vocab != options_.model.vocab) {
      return fail(absl::StrCat("its vocabulary is ", c.vocab, " ids, the policy's ", options_.model.vocab,
                               ": a reward model scores the prompts' and completions' ids, so it needs their tokenizer"));
    }
    if (formats::model::FamilyOf(c.family).positions == formats::model::PositionKind::kLearned &&
        c.seq_len < longest_scored_) {
      return fail(absl::StrCat("its ", c.seq_len, " learned positions are fewer than the ", longest_scored_,
                               " tokens of the longest prompt it may score with a whole completion"));
    }
    reward_models_[f] = std::move(loaded->model);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> Trainer::ScoreWithRewardModel(Decoder& model,
                                                                  const std::vector<rewards::ScoredCompletion>& batch) {
  // Each completion as `train.objective: reward` trained on it: the prompt's ids and the completion's
  // (its stop token included), scored at the last token; in forward passes of kScoreRows rows.
  constexpr size_t kScoreRows = 64;
  std::vector<double> scores(batch.size(), std::nan(""));
  model.set_objective(std::make_shared<SequenceScores>(&scores));
  model.set_masked_targets(true);
  for (size_t first = 0; first < batch.size(); first += kScoreRows) {
    std::vector<ScoredSequence> seqs;
    for (size_t i = first; i < std::min(batch.size(), first + kScoreRows); ++i) {
      seqs.push_back({&batch[i].prompt_ids, &batch[i].completion_ids, static_cast<int64_t>(i)});
    }
    TESSERA_RETURN_IF_ERROR(ScoreSequences(model, seqs));
  }
  return scores;
}

std::string Trainer::CompletionText(const std::vector<int64_t>& ids) const {
  // transformers' decode(skip_special_tokens=True) of the ids before the stop token: special tokens and
  // ids the tokenizer does not have (a model's vocabulary padded past it) left out, invalid UTF-8
  // replaced.
  std::vector<int32_t> kept;
  for (int64_t t : ids) {
    if (t == prompts_->stop_token()) break;
    bool special = false;
    for (const auto& added : prompt_tokenizer_->added_tokens()) special |= added.special && added.id == t;
    if (special || t >= prompt_tokenizer_->vocab_size()) continue;
    kept.push_back(static_cast<int32_t>(t));
  }
  auto text = prompt_tokenizer_->Decode(kept);
  if (!text.ok()) {  // An id inside the range the tokenizer lacks: each kept alone if it decodes.
    std::string joined;
    for (int32_t t : kept) {
      if (auto piece = prompt_tokenizer_->Decode({t}); piece.ok()) joined += *piece;
    }
    text = joined;
  }
  return text::Utf8Lossy(*text);
}

absl::StatusOr<std::vector<std::vector<double>>> Trainer::ScoreOnRankZero(std::vector<rewards::ScoredCompletion> batch,
                                                                          int64_t total, const absl::Status& prepared) {
  // Phases, broadcast from rank 0 (1 number): 2 still scoring (every kHeartbeat, so that no rank's
  // wait reaches the collective timeout however long the reward programs take: each has its own
  // timeout_s), 0 scored (the rewards follow), 1 failed (its message follows).
  constexpr auto kHeartbeat = std::chrono::seconds(5);
  constexpr int64_t kMessageBytes = 4096;
  const size_t F = options_.grpo.rewards.size();
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  absl::StatusOr<std::vector<std::vector<double>>> result =
      prepared.ok() ? absl::StatusOr<std::vector<std::vector<double>>>(std::vector<std::vector<double>>()) : prepared;
  double phase = 2;
  if (groups_.global_rank == 0) {
    if (prepared.ok()) {
      auto scoring = std::async(std::launch::async, [&]() -> absl::StatusOr<std::vector<std::vector<double>>> {
        try {
          return rewards_->Score(batch);
        } catch (const std::exception& e) {  // Torch's errors (a device's memory) become rank 0's message.
          return absl::InternalError(e.what());
        }
      });
      while (scoring.wait_for(kHeartbeat) != std::future_status::ready) {
        at::Tensor still = at::full({1}, 2.0, f64).to(device_);
        TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(still, 0));
      }
      result = scoring.get();
    }
    phase = result.ok() ? 0 : 1;
    at::Tensor done = at::full({1}, phase, f64).to(device_);
    TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(done, 0));
  } else {
    while (phase == 2) {
      at::Tensor got = at::zeros({1}, f64).to(device_);
      TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(got, 0));
      phase = got.cpu().item<double>();
    }
  }
  if (phase == 1) {
    // Rank 0's message on every rank (whichever rank's error the user is shown names the cause).
    std::string message = groups_.global_rank == 0 ? std::string(result.status().message()) : std::string();
    message.resize(kMessageBytes, '\0');
    at::Tensor bytes = at::from_blob(message.data(), {kMessageBytes}, at::kByte).clone().to(device_);
    TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(bytes, 0));
    const at::Tensor cpu = bytes.cpu().contiguous();
    std::string text(reinterpret_cast<const char*>(cpu.data_ptr<uint8_t>()), kMessageBytes);
    text.resize(std::strlen(text.c_str()));
    const absl::StatusCode code = groups_.global_rank == 0 ? result.status().code() : absl::StatusCode::kInvalidArgument;
    return absl::Status(code, groups_.global_rank == 0 ? text : absl::StrCat("(rank 0) ", text));
  }
  at::Tensor values = at::zeros({static_cast<int64_t>(F) * total}, f64);
  if (groups_.global_rank == 0) {
    for (size_t f = 0; f < F; ++f) {
      for (int64_t c = 0; c < total; ++c) values[static_cast<int64_t>(f) * total + c] = (*result)[f][c];
    }
  }
  values = values.to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(values, 0));
  const at::Tensor cpu = values.cpu().contiguous();
  const double* got = cpu.data_ptr<double>();
  std::vector<std::vector<double>> per_function(F, std::vector<double>(static_cast<size_t>(total)));
  for (size_t f = 0; f < F; ++f) std::copy(got + f * total, got + (f + 1) * total, per_function[f].begin());
  return per_function;
}

}  // namespace tessera::parallel
