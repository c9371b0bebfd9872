// The trainer's preference data (train.objective dpo or reward, trainer.h): pairs as rows of SFT
// data's encoding, DPO's reference log-probabilities and the pass that scores them before training,
// a reward model's margins; the reference's file in a checkpoint (reference.safetensors).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "formats/checkpoint/safetensors.h"
#include "formats/model/checkpoint_model.h"
#include "formats/model/hf_config.h"
#include "parallel/models/hf_weights.h"
#include "parallel/models/model_state.h"
#include "parallel/objectives/dpo_objective.h"
#include "parallel/objectives/reward_objective.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

using formats::data::PreferencePair;

std::vector<int64_t> Trainer::PairsOf(int64_t first, int a, int accum) const {
  // Pair j of the global batch for dp rank d, micro-batch a, row i: d·micro·accum + a·micro + i (as
  // ReadMicroBatch's samples), wrapping around the dataset.
  const int micro = options_.micro_batch;
  std::vector<int64_t> out;
  for (int i = 0; i < micro; ++i) {
    const int64_t g = first + static_cast<int64_t>(groups_.dp->rank()) * micro * accum + static_cast<int64_t>(a) * micro + i;
    out.push_back(PairOf(g));
  }
  return out;
}

int64_t Trainer::PairOf(int64_t g) const {
  const int64_t n = pairs_->pairs();
  if (!options_.data.shuffle) return g % n;
  const int64_t epoch = g / n;
  if (epoch != permutation_epoch_) {
    permutation_ = formats::data::TokenDataset::Permutation(n, options_.data.seed + static_cast<uint64_t>(epoch));
    permutation_epoch_ = epoch;
  }
  return permutation_[g % n];
}

int64_t Trainer::PairsUsed() const {
  // min(pairs, steps · global_batch) without forming a product that could overflow (steps < 2^40,
  // global_batch < 2^24 by the spec's limits: 2^64 would wrap).
  const int64_t n = pairs_->pairs(), batch = options_.global_batch;
  return options_.steps >= (n + batch - 1) / batch ? n : options_.steps * batch;
}

absl::Status Trainer::CheckPairs() {
  // Every rank reads the same pairs: a bad one stops every rank here, before any collective, with the
  // same message. The fingerprint (FNV-1a over every cut pair's lengths and ids, whether this job
  // reads it or not) ties the reference log-probabilities kept in checkpoints to this data and cut.
  const int64_t limit = PairLimit();
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
  };
  const int64_t used = PairsUsed();
  std::vector<bool> read(pairs_->pairs(), false);
  for (int64_t g = 0; g < used; ++g) read[PairOf(g)] = true;
  for (int64_t p = 0; p < pairs_->pairs(); ++p) {
    auto pair = pairs_->Pair(p, options_.preference_cut);
    if (!pair.ok()) return absl::Status(pair.status().code(), absl::StrCat("data.path: ", pair.status().message()));
    for (const std::vector<int32_t>* seq : {&pair->prompt, &pair->chosen, &pair->rejected}) {
      mix(seq->size());
      for (int32_t id : *seq) mix(static_cast<uint32_t>(id));
    }
    for (int side = 0; side < 2 && read[p]; ++side) {
      const size_t completion = side == 0 ? pair->chosen.size() : pair->rejected.size();
      if (static_cast<int64_t>(pair->prompt.size() + completion) > limit) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.path ", options_.data.path, ": pair ", p, " has ", pair->prompt.size(), " prompt and ", completion,
            side == 0 ? " chosen" : " rejected", " tokens, more than ", reward() ? "model.seq_len = " : "model.seq_len + 1 = ",
            limit, " (cut them with data.max_prompt_tokens and data.max_completion_tokens)"));
      }
    }
  }
  pairs_fingerprint_ = h;
  return absl::OkStatus();
}

absl::Status Trainer::CheckReference(const std::string& where) const {
  // Every pair the job reads has its two log-probabilities: finite and at most 0 (sums or means of
  // log-probabilities).
  const int64_t used = PairsUsed();
  for (int64_t g = 0; g < used; ++g) {
    const int64_t p = PairOf(g);
    for (const double v : {reference_[2 * p], reference_[2 * p + 1]}) {
      if (std::isinf(v) && v < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            where, ": pair ", p, " has no reference log-probability: the job reads ", used,
            " pairs (train.steps × train.global_batch, at most data.path's ", pairs_->pairs(),
            "; which ones, data.shuffle and data.seed decide), not those scored before the first step; the "
            "reference cannot be scored again after it — start a new job (a new output_dir) to train on other pairs"));
      }
      if (!std::isfinite(v) || v > 0) {
        return absl::DataLossError(absl::StrCat(where, ": pair ", p, "'s reference log-probability is ", v,
                                                ", not a finite number at most 0"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Trainer::ReadPairs(int64_t first, int a, int accum) {
  const int64_t T = options_.model.seq_len;
  const std::vector<int64_t> pairs = PairsOf(first, a, accum);
  std::vector<int64_t> rows(pairs.size() * 2 * (T + 1), -1);  // Padding: token 0, untrained.
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto pair = pairs_->Pair(pairs[i], options_.preference_cut);
    if (!pair.ok()) return pair.status();
    for (int side = 0; side < 2; ++side) {
      const std::vector<int32_t>& completion = side == 0 ? pair->chosen : pair->rejected;
      const int64_t length = static_cast<int64_t>(pair->prompt.size() + completion.size());
      if (length > PairLimit()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data.path ", options_.data.path, ": pair ", pairs[i], " has ", pair->prompt.size(), " prompt and ",
            completion.size(), side == 0 ? " chosen" : " rejected", " tokens, more than ", PairLimit(),
            " (cut them with data.max_prompt_tokens and data.max_completion_tokens)"));
      }
      int64_t* row = rows.data() + (2 * i + side) * (T + 1);
      if (reward()) {
        WriteRewardRow(pair->prompt, completion, row);  // length + 1 <= seq_len + 1 entries.
        continue;
      }
      // The prompt's tokens are no trained targets (the first token is never a target); the
      // completion's are.
      const size_t P = pair->prompt.size();
      for (size_t t = 0; t < P; ++t) row[t] = t == 0 ? pair->prompt[t] : -int64_t{pair->prompt[t]} - 1;
      for (size_t t = 0; t < completion.size(); ++t) row[P + t] = completion[t];
    }
  }
  at::Tensor window = at::from_blob(rows.data(), {static_cast<int64_t>(pairs.size() * 2), T + 1}, at::kLong);
  // Sequence parallelism: this rank's block of positions (and the target after its last), as ReadTokens.
  const int64_t sp = groups_.sp->size();
  if (sp > 1) window = window.narrow(1, groups_.sp->rank() * (T / sp), T / sp + 1);
  return window.to(device_, false, true);
}

absl::StatusOr<at::Tensor> Trainer::MarginsOf(int64_t first, int a, int accum) const {
  std::vector<double> values;
  for (int64_t p : PairsOf(first, a, accum)) {
    values.insert(values.end(), {pairs_->margin(p), pairs_->margin(p)});  // Finite (PreferenceDataset::Open).
  }
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(device_);
}

absl::StatusOr<at::Tensor> Trainer::ReferenceOf(int64_t first, int a, int accum) const {
  const std::vector<int64_t> pairs = PairsOf(first, a, accum);
  std::vector<double> values;
  for (int64_t p : pairs) {
    for (int side = 0; side < 2; ++side) {
      const double v = reference_[2 * p + side];
      if (!std::isfinite(v)) {
        return absl::InternalError(absl::StrCat("pair ", p, " has no reference log-probability"));
      }
      values.push_back(v);
    }
  }
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(device_);
}

absl::StatusOr<std::unique_ptr<Decoder>> Trainer::LoadReferenceModel() const {
  const std::string& path = options_.dpo.reference;
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("dpo.reference ", path, ": ", s.message()));
  };
  std::unique_ptr<Decoder> ref = NewModel();
  if (std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
    // A transformers directory: its config agrees with the spec's model, then every tensor is read
    // (mapped: this rank copies its own parts).
    auto hf = formats::model::ReadHfConfig(path);
    if (!hf.ok()) return fail(hf.status());
    TESSERA_RETURN_IF_ERROR(CheckModelMatches(hf->config, absl::StrCat("dpo.reference ", path), /*reference=*/true));
    auto weights = OpenHfWeights(path, options_.model);
    absl::Status s = weights.ok() ? ref->LoadFull(weights->tensors) : weights.status();
    if (!s.ok()) return fail(s);
  } else {
    // A tessera checkpoint (or the newest of a checkpoint directory), verified against its index.
    auto checkpoint = formats::model::ReadCheckpointModel(path);
    if (!checkpoint.ok()) return fail(checkpoint.status());
    if (checkpoint->config.lora.enabled()) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat(checkpoint->path, " holds LoRA adapters only: export the model merged (tessera export --merge) "
                       "and give that directory")));
    }
    TESSERA_RETURN_IF_ERROR(
        CheckModelMatches(checkpoint->config, absl::StrCat("dpo.reference ", checkpoint->path), /*reference=*/true));
    absl::Status s = ApplyCheckpointState(checkpoint->path, Decoder::LoadWhat::kModel, checkpoint->router_bias, *ref,
                                          at::Tensor());
    if (!s.ok()) return fail(s);
  }
  // Scored in the job's precision, as the policy's own forward would be.
  for (Param& p : ref->params()) p.value = p.value.detach().to(param_dtype_);
  return ref;
}

absl::Status Trainer::ScoreReference() {
  const int accum = static_cast<int>(options_.global_batch / (static_cast<int64_t>(options_.micro_batch) * groups_.dp->size()));
  const int64_t n = pairs_->pairs();
  reference_.assign(2 * n, -std::numeric_limits<double>::infinity());
  // The pairs the job reads (steps · global_batch of them, wrapping), each scored once: global pairs
  // [0, used) in global batches, the last one wrapping onto pairs already scored.
  const int64_t used = PairsUsed();
  auto scorer = std::make_shared<SequenceLogps>(&reference_, options_.dpo.loss_type == layout::DpoLossType::kIpo);
  // The model scored: the policy itself with its initial weights (under LoRA the base model, the
  // adapters off, as TRL with peft), or dpo.reference's, built like it and freed after the pass.
  std::unique_ptr<Decoder> other;
  std::unique_ptr<PipelineRunner> other_pipeline;
  PipelineRunner* runner = pipeline_.get();
  if (!options_.dpo.reference.empty()) {
    auto ref = LoadReferenceModel();
    if (!ref.ok()) return ref.status();
    other = std::move(*ref);
    other->set_objective(scorer);
    auto created = PipelineRunner::Create(other.get(), layout_ ? *layout_ : *one_stage_, groups_.pp, pipeline_options_);
    if (!created.ok()) return created.status();
    other_pipeline = std::move(*created);
    runner = other_pipeline.get();
  }
  model_->set_objective(scorer);
  model_->set_adapters_enabled(false);
  auto restore = absl::MakeCleanup([&] {
    model_->set_objective(objective_);
    model_->set_adapters_enabled(true);
  });
  at::NoGradGuard no_grad;
  model_->set_dropout_seed(std::nullopt);
  for (int64_t first = 0; first < used; first += options_.global_batch) {
    auto rows_of = [&](int a) -> absl::StatusOr<at::Tensor> {
      std::vector<double> where;
      for (int64_t p : PairsOf(first, a, accum)) where.insert(where.end(), {2.0 * p, 2.0 * p + 1});
      return at::tensor(where, at::TensorOptions().dtype(at::kDouble));
    };
    auto sum = runner->RunForwardOnly([&](int a) { return ReadPairs(first, a, accum); }, nullptr, rows_of);
    if (!sum.ok()) {
      return absl::Status(sum.status().code(), absl::StrCat("scoring the reference: ", sum.status().message()));
    }
  }
  if (!other) zero_->ReleaseGatheredUnits();  // ZeRO-3: the units a forward pass without backward left gathered.
  // Each row was scored by the ranks holding the head of its dp replica (tp ranks alike): the largest
  // over every rank is its value (−inf elsewhere).
  at::Tensor table = at::from_blob(reference_.data(), {2 * n}, at::kDouble).to(device_, false, true);
  TESSERA_RETURN_IF_ERROR(groups_.world->AllReduce(table, ReduceOp::kMax));
  table = table.cpu().contiguous();
  std::copy(table.data_ptr<double>(), table.data_ptr<double>() + 2 * n, reference_.begin());
  // The same table on every rank after the reduction: the same verdict everywhere.
  return CheckReference("scoring the reference");
}

std::map<std::string, std::string> Trainer::ReferenceMetadata() const {
  return {{"format", "tessera-dpo-reference"},
          {"pairs", absl::StrCat(pairs_->pairs())},
          {"pairs_fingerprint", absl::StrFormat("%016x", pairs_fingerprint_)},
          {"per_token_mean", options_.dpo.loss_type == layout::DpoLossType::kIpo ? "true" : "false"},
          {"reference", options_.dpo.reference.empty() ? "initial" : options_.dpo.reference}};
}

absl::Status Trainer::LoadReference(const std::string& file) {
  // What the log-probabilities were scored from must be what this job reads: the same pairs, cut the
  // same way, summed or averaged as its loss type needs. Every rank reads the file: the same verdict.
  std::map<std::string, std::string> metadata;
  auto tensors = formats::checkpoint::ReadSafetensors(file, &metadata);
  if (!tensors.ok()) {
    return absl::DataLossError(absl::StrCat(file, ": ", tensors.status().message(),
                                            " (a checkpoint of a dpo job keeps its reference log-probabilities there)"));
  }
  const std::map<std::string, std::string> want = ReferenceMetadata();
  for (const auto& [key, value] : want) {
    auto it = metadata.find(key);
    // Checkpoints from before dpo.reference took paths scored the initial weights.
    const std::string had = it != metadata.end() ? it->second.substr(0, 4096) : key == "reference" ? "initial" : "(none)";
    if (had == value) continue;
    const char* why = key == "per_token_mean" ? "dpo.loss_type changed"
                      : key == "reference"    ? "dpo.reference changed"
                      : key == "format"       ? "not DPO reference log-probabilities"
                                              : "data.path's pairs or their cut (data.max_prompt_tokens, "
                                                "data.max_completion_tokens) changed";
    return absl::FailedPreconditionError(absl::StrCat(file, ": ", key, " ", had, ", this job's ", value, ": ", why,
                                                      " since the reference was scored; a job scores its reference "
                                                      "once, before its first step — start a new job"));
  }
  auto it = tensors->find("logps");
  if (it == tensors->end() || it->second.dtype != "F64" || it->second.shape != std::vector<int64_t>{pairs_->pairs(), 2}) {
    return absl::DataLossError(absl::StrCat(file, ": expected logps [", pairs_->pairs(), ", 2] F64"));
  }
  reference_.resize(2 * pairs_->pairs());
  std::memcpy(reference_.data(), it->second.bytes.data(), reference_.size() * sizeof(double));
  return CheckReference(file);
}

}  // namespace tessera::parallel
