// The trainer's preference data (train.objective dpo or reward, trainer.h): the pairs trained on and
// validated on, as rows of SFT data's encoding; DPO's reference log-probabilities and the pass that
// scores them before training; a reward model's margins; the evaluation on pairs; the reference's file
// in a checkpoint (reference.safetensors).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

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
#include "formats/model/family.h"
#include "formats/model/hf_config.h"
#include "parallel/models/hf_weights.h"
#include "parallel/models/model_state.h"
#include "parallel/objectives/dpo_objective.h"
#include "parallel/objectives/reward_objective.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

using formats::data::PreferenceDataset;
using formats::data::PreferencePair;

int64_t Trainer::PairSet::PairOf(int64_t g, uint64_t seed) const {
  if (!shuffle) return g % count;
  const int64_t epoch = g / count;
  if (epoch != permutation_epoch) {
    permutation = formats::data::TokenDataset::Permutation(count, seed + static_cast<uint64_t>(epoch));
    permutation_epoch = epoch;
  }
  return permutation[g % count];
}

std::vector<int64_t> Trainer::PairsOf(const PairSet& set, int64_t first, int a, int accum) const {
  // Pair j of the global batch for dp rank d, micro-batch a, row i: d·micro·accum + a·micro + i (as
  // ReadMicroBatch's samples), wrapping around the set.
  const int micro = options_.micro_batch;
  std::vector<int64_t> out;
  for (int i = 0; i < micro; ++i) {
    const int64_t g = first + static_cast<int64_t>(groups_.dp->rank()) * micro * accum + static_cast<int64_t>(a) * micro + i;
    out.push_back(set.PairOf(g, options_.data.seed));
  }
  return out;
}

absl::Status Trainer::OpenPairs() {
  auto open = [&](const std::string& field, const std::string& path) -> absl::StatusOr<std::unique_ptr<PreferenceDataset>> {
    auto pairs = PreferenceDataset::Open(path, options_.model.vocab);
    if (!pairs.ok()) return absl::Status(pairs.status().code(), absl::StrCat(field, ": ", pairs.status().message()));
    if ((*pairs)->pairs() == 0) return absl::InvalidArgumentError(absl::StrCat(field, " ", path, " has no pairs"));
    return std::move(*pairs);
  };
  auto opened = open("data.path", options_.data.path);
  if (!opened.ok()) return opened.status();
  pairs_ = std::move(*opened);
  const int64_t n = pairs_->pairs();
  // data.valid_fraction f: the last ⌊n·f⌋ pairs are validation's, never trained on (as token windows).
  int64_t held = 0;
  if (options_.valid_fraction > 0) {
    held = static_cast<int64_t>(std::floor(static_cast<long double>(n) * options_.valid_fraction));
    if (held < 1 || held >= n) {
      return absl::InvalidArgumentError(absl::StrCat("data.valid_fraction ", options_.valid_fraction, " of data.path ",
                                                     options_.data.path, "'s ", n, " pairs leaves ",
                                                     held < 1 ? "no validation pair" : "no training pair"));
    }
  }
  // The global pairs a run of `batches` global batches reads of a set of `count`: min(count, batches ·
  // global_batch) without forming a product that could overflow (steps < 2^40, global_batch < 2^24 by
  // the spec's limits: 2^64 would wrap).
  auto reads = [&](int64_t count, int64_t batches) {
    const int64_t batch = options_.global_batch;
    return batches >= (count + batch - 1) / batch ? count : batches * batch;
  };
  train_pairs_ = PairSet{.data = pairs_.get(), .first = 0, .count = n - held, .shuffle = options_.data.shuffle,
                         .field = "data.path", .path = options_.data.path};
  train_pairs_.read = reads(train_pairs_.count, options_.steps);
  if (!options_.valid_data.path.empty()) {
    auto valid = open("data.valid_path", options_.valid_data.path);
    if (!valid.ok()) return valid.status();
    valid_file_ = std::move(*valid);
    valid_pairs_ = PairSet{.data = valid_file_.get(), .first = 0, .count = valid_file_->pairs(),
                           .field = "data.valid_path", .path = options_.valid_data.path};
  } else if (held > 0) {
    valid_pairs_ = PairSet{.data = pairs_.get(), .first = n - held, .count = held,
                           .field = "data.path (its held-out tail)", .path = options_.data.path};
  }
  if (valid_pairs_.data) {
    if (options_.eval_batches < 1) {
      return absl::InvalidArgumentError(absl::StrCat("train.eval_batches ", options_.eval_batches, " must be at least 1"));
    }
    valid_pairs_.read = reads(valid_pairs_.count, options_.eval_batches);
    TESSERA_RETURN_IF_ERROR(CheckPairs(valid_pairs_));
  }
  return CheckPairs(train_pairs_);
}

absl::Status Trainer::CheckPairs(PairSet& set) {
  // Every rank reads the same pairs: a bad one stops every rank here, before any collective, with the
  // same message. The fingerprint (FNV-1a over every cut pair's lengths and ids, whether this job
  // reads it or not) ties the reference log-probabilities kept in checkpoints to this data and cut.
  const int64_t limit = PairLimit();
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
  };
  std::vector<bool> read(set.count, false);
  for (int64_t g = 0; g < set.read; ++g) read[set.PairOf(g, options_.data.seed)] = true;
  for (int64_t i = 0; i < set.count; ++i) {
    const int64_t p = set.first + i;
    auto pair = set.data->Pair(p, options_.preference_cut);
    if (!pair.ok()) return absl::Status(pair.status().code(), absl::StrCat(set.field, ": ", pair.status().message()));
    for (const std::vector<int32_t>* seq : {&pair->prompt, &pair->chosen, &pair->rejected}) {
      mix(seq->size());
      for (int32_t id : *seq) mix(static_cast<uint32_t>(id));
    }
    for (int side = 0; side < 2 && read[i]; ++side) {
      const size_t completion = side == 0 ? pair->chosen.size() : pair->rejected.size();
      if (static_cast<int64_t>(pair->prompt.size() + completion) > limit) {
        return absl::InvalidArgumentError(absl::StrCat(
            set.field, " ", set.path, ": pair ", p, " has ", pair->prompt.size(), " prompt and ", completion,
            side == 0 ? " chosen" : " rejected", " tokens, more than ", reward() ? "model.seq_len = " : "model.seq_len + 1 = ",
            limit, " (cut them with data.max_prompt_tokens and data.max_completion_tokens)"));
      }
    }
  }
  set.fingerprint = h;
  return absl::OkStatus();
}

absl::Status Trainer::CheckReference(const PairSet& set, const std::string& where) const {
  // Every pair the job reads has its two log-probabilities: finite and at most 0 (sums or means of
  // log-probabilities).
  for (int64_t g = 0; g < set.read; ++g) {
    const int64_t i = set.PairOf(g, options_.data.seed);
    for (const double v : {set.reference[2 * i], set.reference[2 * i + 1]}) {
      if (std::isinf(v) && v < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            where, ": ", set.field, " pair ", set.first + i, " has no reference log-probability: the job reads ",
            set.read, " pairs (", &set == &valid_pairs_ ? "train.eval_batches" : "train.steps",
            " × train.global_batch, at most ", set.count,
            "; which ones, data.shuffle and data.seed decide), not those scored before the first step; the "
            "reference cannot be scored again after it — start a new job (a new output_dir) to train on other pairs"));
      }
      if (!std::isfinite(v) || v > 0) {
        return absl::DataLossError(absl::StrCat(where, ": ", set.field, " pair ", set.first + i,
                                                "'s reference log-probability is ", v, ", not a finite number at most 0"));
      }
    }
  }
  return absl::OkStatus();
}

bool Trainer::SharedPromptRows() const {
  const layout::ParallelLayout& l = options_.layout;
  return (dpo() || reward()) && options_.device.kind == layout::DeviceKind::kCpu && l.pp == 1 && l.sp == 1 && l.tp_mode == layout::TpMode::k1D && !options_.model.IsMoe() &&
         options_.model.lora.dropout == 0;
}


absl::Status Trainer::CheckRowPair(const PairSet& set, int64_t p, const PreferencePair& pair) const {
  for (const std::vector<int32_t>* completion : {&pair.chosen, &pair.rejected}) {
    if (static_cast<int64_t>(pair.prompt.size() + completion->size()) > PairLimit() || completion->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          set.field, " ", set.path, ": pair ", p, " has ", pair.prompt.size(), " prompt and ", completion->size(),
          completion == &pair.chosen ? " chosen" : " rejected", " tokens: not 1 to ", PairLimit(),
          " in all (cut them with data.max_prompt_tokens and data.max_completion_tokens)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Trainer::PairPositionsOf(const PairSet& set, int64_t first, int a, int accum) {
  const int64_t T = options_.model.seq_len;
  const std::vector<int64_t> pairs = PairsOf(set, first, a, accum);
  std::vector<int64_t> rows(pairs.size() * 2 * (T + 1)), positions(pairs.size() * (2 * T + 1), 0);
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto pair = set.data->Pair(set.first + pairs[i], options_.preference_cut);
    if (!pair.ok()) return pair.status();
    TESSERA_RETURN_IF_ERROR(CheckRowPair(set, set.first + pairs[i], *pair));
    WriteSharedPromptRow(pair->prompt, pair->chosen, pair->rejected, T, SharedRowTargets(),
                         rows.data() + i * 2 * (T + 1), positions.data() + i * (2 * T + 1));
  }
  return at::from_blob(positions.data(), {static_cast<int64_t>(pairs.size()), 2 * T + 1}, at::kLong).to(device_, false, true);
}

absl::StatusOr<at::Tensor> Trainer::ReadPairs(const PairSet& set, int64_t first, int a, int accum,
                                              at::Tensor* counted) {
  const int64_t T = options_.model.seq_len;
  const std::vector<int64_t> pairs = PairsOf(set, first, a, accum);
  if (SharedPromptRows()) {
    // Lengths are checked as for two rows (CheckPairs): prompt + each completion ≤ PairLimit(), so
    // the row's P + C + R + 1 entries (DPO; + 2 for a reward model, whose limit is seq_len) fit
    // 2·seq_len + 2.
    std::vector<int64_t> rows(pairs.size() * 2 * (T + 1), -1);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const int64_t p = set.first + pairs[i];
      auto pair = set.data->Pair(p, options_.preference_cut);
      if (!pair.ok()) return pair.status();
      TESSERA_RETURN_IF_ERROR(CheckRowPair(set, p, *pair));
      WriteSharedPromptRow(pair->prompt, pair->chosen, pair->rejected, T, SharedRowTargets(),
                           rows.data() + i * 2 * (T + 1), nullptr);
    }
    return at::from_blob(rows.data(), {static_cast<int64_t>(pairs.size()), 2 * (T + 1)}, at::kLong)
        .to(device_, false, true);
  }
  std::vector<int64_t> rows(pairs.size() * 2 * (T + 1), -1);  // Padding: token 0, untrained.
  std::vector<uint8_t> real(counted != nullptr ? pairs.size() * 2 * T : 0, 0);  // Input positions < length.
  for (size_t i = 0; i < pairs.size(); ++i) {
    const int64_t p = set.first + pairs[i];
    auto pair = set.data->Pair(p, options_.preference_cut);
    if (!pair.ok()) return pair.status();
    for (int side = 0; side < 2; ++side) {
      const std::vector<int32_t>& completion = side == 0 ? pair->chosen : pair->rejected;
      const int64_t length = static_cast<int64_t>(pair->prompt.size() + completion.size());
      if (length > PairLimit()) {
        return absl::InvalidArgumentError(absl::StrCat(
            set.field, " ", set.path, ": pair ", p, " has ", pair->prompt.size(), " prompt and ",
            completion.size(), side == 0 ? " chosen" : " rejected", " tokens, more than ", PairLimit(),
            " (cut them with data.max_prompt_tokens and data.max_completion_tokens)"));
      }
      int64_t* row = rows.data() + (2 * i + side) * (T + 1);
      if (counted != nullptr) std::fill_n(real.data() + (2 * i + side) * T, std::min(length, T), uint8_t{1});
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
  if (counted != nullptr) {
    at::Tensor inputs = at::from_blob(real.data(), {static_cast<int64_t>(pairs.size() * 2), T}, at::kByte);
    if (sp > 1) inputs = inputs.narrow(1, groups_.sp->rank() * (T / sp), T / sp);
    *counted = SampleChunkOf(inputs).to(device_, at::kDouble);
  }
  return SampleChunkOf(window).to(device_, false, true);
}

std::function<absl::StatusOr<at::Tensor>(int)> Trainer::PositionsOf(const PairSet& set, int64_t first, int accum) {
  if (!SharedPromptRows()) return nullptr;
  return [this, &set, first, accum](int a) { return PairPositionsOf(set, first, a, accum); };
}

absl::StatusOr<at::Tensor> Trainer::CountedOf(const PairSet& set, int64_t first, int a, int accum) {
  at::Tensor counted;
  auto rows = ReadPairs(set, first, a, accum, &counted);
  if (!rows.ok()) return rows.status();
  return counted;
}

absl::StatusOr<at::Tensor> Trainer::MarginsOf(const PairSet& set, int64_t first, int a, int accum) const {
  std::vector<double> values;
  for (int64_t i : PairsOf(set, first, a, accum)) {
    const double m = set.data->margin(set.first + i);  // Finite (PreferenceDataset::Open); 0 without.
    values.insert(values.end(), {m, m});
    TESSERA_RETURN_IF_ERROR(AppendRejectedStart(set, i, &values));
  }
  return PairValuesOf(std::move(values));
}

absl::StatusOr<at::Tensor> Trainer::ReferenceOf(const PairSet& set, int64_t first, int a, int accum) const {
  std::vector<double> values;
  for (int64_t i : PairsOf(set, first, a, accum)) {
    for (int side = 0; side < 2; ++side) {
      const double v = set.reference[2 * i + side];
      if (!std::isfinite(v)) {
        return absl::InternalError(absl::StrCat(set.field, " pair ", set.first + i, " has no reference log-probability"));
      }
      values.push_back(v);
    }
    TESSERA_RETURN_IF_ERROR(AppendRejectedStart(set, i, &values));
  }
  return PairValuesOf(std::move(values));
}

absl::Status Trainer::AppendRejectedStart(const PairSet& set, int64_t i, std::vector<double>* values) const {
  if (!SharedPromptRows()) return absl::OkStatus();
  auto pair = set.data->Pair(set.first + i, options_.preference_cut);
  if (!pair.ok()) return pair.status();
  values->push_back(static_cast<double>(RejectedStart(*pair)));
  return absl::OkStatus();
}

at::Tensor Trainer::PairValuesOf(std::vector<double> values) const {
  at::Tensor t = at::tensor(values, at::TensorOptions().dtype(at::kDouble));
  // Shared-prompt rows: a row a pair, three values each (never a grid: SharedPromptRows); else one
  // value a row.
  if (SharedPromptRows()) return t.view({-1, 3}).to(device_);
  return SampleChunkOf(t).to(device_);
}

absl::StatusOr<std::unique_ptr<Decoder>> Trainer::LoadReferenceModel(int64_t* step) const {
  const std::string& path = options_.dpo.reference;
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("dpo.reference ", path, ": ", s.message()));
  };
  *step = -1;
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
    if (formats::model::FamilyOf(options_.model.family).positions == formats::model::PositionKind::kLearned &&
        checkpoint->config.seq_len != options_.model.seq_len) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          checkpoint->path, " was written for model.seq_len ", checkpoint->config.seq_len, ", the spec says ",
          options_.model.seq_len, " (learned positions: one row each)")));
    }
    *step = checkpoint->step;
    absl::Status s = ApplyCheckpointState(checkpoint->path, Decoder::LoadWhat::kModel, checkpoint->router_bias, *ref,
                                          at::Tensor());
    if (!s.ok()) return fail(s);
  }
  // Scored in the job's precision, as the policy's own forward would be.
  for (Param& p : ref->params()) p.value = p.value.detach().to(param_dtype_);
  return ref;
}

absl::Status Trainer::ScoreReference() {
  // The model scored: the policy itself with its initial weights (under LoRA the base model, the
  // adapters off, as TRL with peft), or dpo.reference's, built like it and freed after the pass.
  std::unique_ptr<Decoder> other;
  std::unique_ptr<PipelineRunner> other_pipeline;
  PipelineRunner* runner = pipeline_.get();
  Decoder* model = model_.get();
  if (!options_.dpo.reference.empty()) {
    int64_t step = -1;
    auto ref = LoadReferenceModel(&step);
    // One verdict on every rank before the pass's collectives: each rank loads (and checks) only its
    // own part, and each resolves a checkpoint directory to its newest step itself.
    at::Tensor votes = at::tensor(std::vector<double>{ref.ok() ? 0.0 : 1.0, static_cast<double>(step),
                                                      -static_cast<double>(step)},
                                  at::TensorOptions().dtype(at::kDouble))
                           .to(device_);
    TESSERA_RETURN_IF_ERROR(groups_.world->AllReduce(votes, ReduceOp::kMax));
    votes = votes.cpu();
    if (votes[0].item<double>() > 0) {
      return ref.ok() ? absl::UnavailableError("another rank could not load dpo.reference (its log says why)")
                      : ref.status();
    }
    if (votes[1].item<double>() != -votes[2].item<double>()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dpo.reference ", options_.dpo.reference, ": the ranks read different checkpoints of it (steps ",
          static_cast<int64_t>(-votes[2].item<double>()), " and ", static_cast<int64_t>(votes[1].item<double>()),
          "): it changed while the job started; give one step directory (step_NNNNNNNN)"));
    }
    other = std::move(*ref);
    auto created = PipelineRunner::Create(other.get(), layout_ ? *layout_ : *one_stage_, groups_.pp, pipeline_options_);
    if (!created.ok()) return created.status();
    other_pipeline = std::move(*created);
    runner = other_pipeline.get();
    model = other.get();
  }
  model_->set_adapters_enabled(false);
  auto restore = absl::MakeCleanup([&] {
    model_->set_objective(objective_);
    model_->set_adapters_enabled(true);
  });
  at::NoGradGuard no_grad;
  model_->set_dropout_seed(std::nullopt);
  TESSERA_RETURN_IF_ERROR(ScoreSet(*runner, *model, train_pairs_));
  if (valid_pairs_.data) TESSERA_RETURN_IF_ERROR(ScoreSet(*runner, *model, valid_pairs_));
  if (!other) zero_->ReleaseGatheredUnits();  // ZeRO-3: the units a forward pass without backward left gathered.
  // The same tables on every rank after the reductions: the same verdict everywhere.
  TESSERA_RETURN_IF_ERROR(CheckReference(train_pairs_, "scoring the reference"));
  return valid_pairs_.data ? CheckReference(valid_pairs_, "scoring the reference") : absl::OkStatus();
}

absl::Status Trainer::ScoreSet(PipelineRunner& runner, Decoder& model, PairSet& set) {
  const int accum = Accumulation();
  auto unset_positions = absl::MakeCleanup([&] { model.set_positions({}); });  // Shared-prompt rows' (the pipeline sets them).
  set.reference.assign(2 * set.count, -std::numeric_limits<double>::infinity());
  model.set_objective(std::make_shared<SequenceLogps>(&set.reference, PairRowsOf(),
                                                      options_.dpo.loss_type == layout::DpoLossType::kIpo));
  // The pairs the job reads of the set, each scored once: global pairs [0, read) in global batches,
  // the last one wrapping onto pairs already scored.
  for (int64_t first = 0; first < set.read; first += options_.global_batch) {
    auto rows_of = [&](int a) -> absl::StatusOr<at::Tensor> {
      std::vector<double> where;
      for (int64_t i : PairsOf(set, first, a, accum)) {
        where.insert(where.end(), {2.0 * i, 2.0 * i + 1});
        TESSERA_RETURN_IF_ERROR(AppendRejectedStart(set, i, &where));
      }
      return PairValuesOf(std::move(where));
    };
    auto sum = runner.RunForwardOnly([&](int a) { return ReadPairs(set, first, a, accum); }, PositionsOf(set, first, accum),
                                     rows_of);
    if (!sum.ok()) {
      return absl::Status(sum.status().code(), absl::StrCat("scoring the reference: ", sum.status().message()));
    }
  }
  // Each row was scored by the ranks holding the head of its dp replica (tp ranks alike): the largest
  // over every rank is its value (−inf elsewhere).
  at::Tensor table = at::from_blob(set.reference.data(), {2 * set.count}, at::kDouble).to(device_, false, true);
  TESSERA_RETURN_IF_ERROR(groups_.world->AllReduce(table, ReduceOp::kMax));
  table = table.cpu().contiguous();
  std::copy(table.data_ptr<double>(), table.data_ptr<double>() + 2 * set.count, set.reference.begin());
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::EvaluatePairs() {
  const int accum = Accumulation();
  at::NoGradGuard no_grad;
  model_->set_dropout_seed(std::nullopt);  // Evaluation: no dropout.
  auto unset_positions = absl::MakeCleanup([&] { model_->set_positions({}); });  // Shared-prompt rows'.
  const PairSet& set = valid_pairs_;
  if (objective_) objective_->TakeMetrics();  // Only this evaluation's.
  const std::vector<std::string> names = objective_ ? objective_->metric_names() : std::vector<std::string>{};
  // Per global batch: the mean loss and metrics over its pairs (each micro-batch's are means over its
  // pairs, all of the same size), summed over the batches.
  at::Tensor total = at::zeros({1 + static_cast<int64_t>(names.size())}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (int k = 0; k < options_.eval_batches; ++k) {
    const int64_t first = static_cast<int64_t>(k) * options_.global_batch;
    std::function<absl::StatusOr<at::Tensor>(int)> sample_data;
    if (dpo()) {
      sample_data = [&](int a) { return ReferenceOf(set, first, a, accum); };
    } else if (set.data->has_margins() || SharedPromptRows()) {
      sample_data = [&](int a) { return MarginsOf(set, first, a, accum); };
    }
    RECORD_USER_SCOPE("tessera::train::evaluate");
    auto sum = pipeline_->RunForwardOnly([&](int a) { return ReadPairs(set, first, a, accum); },
                                         PositionsOf(set, first, accum), sample_data);
    if (!sum.ok()) {
      return absl::Status(sum.status().code(), absl::StrCat("evaluation after step ", step_, ": ", sum.status().message()));
    }
    std::vector<double> means = {*sum / accum};
    if (objective_) {
      for (double m : objective_->TakeMetrics()) means.push_back(m / accum);
    }
    means.resize(1 + names.size(), 0.0);
    at::Tensor batch = at::tensor(means, at::TensorOptions().dtype(at::kDouble)).to(device_);
    // As a training step's loss: the head's stage has it; each dp × sp replica's mean weighs the same
    // (and each grid chunk's metrics: ReduceLossAndNorm).
    TESSERA_RETURN_IF_ERROR(AverageOverSampleAxes(batch));
    TESSERA_RETURN_IF_ERROR(groups_.pp->AllReduce(batch, ReduceOp::kSum));
    if (groups_.dp_sp->size() > 1) TESSERA_RETURN_IF_ERROR(groups_.dp_sp->AllReduce(batch, ReduceOp::kAvg));
    total += batch;
  }
  zero_->ReleaseGatheredUnits();  // ZeRO-3: the units a forward pass without backward left gathered.
  const at::Tensor mean = (total / options_.eval_batches).cpu();
  eval_metrics_.clear();
  for (size_t i = 0; i < names.size(); ++i) {
    eval_metrics_.emplace_back("val_" + names[i], mean[1 + static_cast<int64_t>(i)].item<double>());
  }
  return mean[0].item<double>();
}

std::map<std::string, std::string> Trainer::ReferenceMetadata() const {
  std::map<std::string, std::string> m = {
      {"format", "tessera-dpo-reference"},
      {"pairs", absl::StrCat(train_pairs_.count)},
      {"pairs_fingerprint", absl::StrFormat("%016x", train_pairs_.fingerprint)},
      {"per_token_mean", options_.dpo.loss_type == layout::DpoLossType::kIpo ? "true" : "false"},
      {"reference", options_.dpo.reference.empty() ? "initial" : options_.dpo.reference}};
  if (valid_pairs_.data) {
    m["valid_pairs"] = absl::StrCat(valid_pairs_.count);
    m["valid_pairs_fingerprint"] = absl::StrFormat("%016x", valid_pairs_.fingerprint);
  }
  return m;
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
    const char* why = key == "per_token_mean"             ? "dpo.loss_type changed"
                      : key == "reference"                ? "dpo.reference changed"
                      : key == "format"                   ? "not DPO reference log-probabilities"
                      : key.rfind("valid_", 0) == 0       ? "the validation pairs (data.valid_path, "
                                                            "data.valid_fraction) or their cut changed"
                                                          : "data.path's pairs, their cut (data.max_prompt_tokens, "
                                                            "data.max_completion_tokens) or data.valid_fraction changed";
    return absl::FailedPreconditionError(absl::StrCat(file, ": ", key, " ", had, ", this job's ", value, ": ", why,
                                                      " since the reference was scored; a job scores its reference "
                                                      "once, before its first step — start a new job"));
  }
  for (PairSet* set : {&train_pairs_, &valid_pairs_}) {
    if (!set->data) continue;
    const char* name = set == &train_pairs_ ? "logps" : "valid_logps";
    auto it = tensors->find(name);
    if (it == tensors->end() || it->second.dtype != "F64" || it->second.shape != std::vector<int64_t>{set->count, 2}) {
      return absl::DataLossError(absl::StrCat(file, ": expected ", name, " [", set->count, ", 2] F64"));
    }
    set->reference.resize(2 * set->count);
    std::memcpy(set->reference.data(), it->second.bytes.data(), set->reference.size() * sizeof(double));
    TESSERA_RETURN_IF_ERROR(CheckReference(*set, file));
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
