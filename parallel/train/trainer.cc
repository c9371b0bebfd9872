#include "parallel/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "parallel/checkpoint/checkpoint_dir.h"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/device/device.h"
#include "parallel/optim/lr_schedule.h"
#include "nlohmann/json.hpp"

namespace tessera::parallel {

namespace fs = std::filesystem;

#define TESSERA_RETURN_IF_ERROR(expr) \
  do {                                \
    absl::Status _st = (expr);        \
    if (!_st.ok()) return _st;        \
  } while (0)

Trainer::Trainer(const TrainerOptions& options, ProcessGroups groups)
    : options_(options),
      groups_(std::move(groups)),
      adam_(AdamWOptions{options.beta1, options.beta2, options.eps, options.weight_decay}) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options, ProcessGroups groups) {
  std::unique_ptr<Trainer> t(new Trainer(options, std::move(groups)));
  TESSERA_RETURN_IF_ERROR(t->Init());
  return t;
}

absl::Status Trainer::Init() {
  const auto& m = options_.model;
  if (m.heads % groups_.tp->size() != 0 || m.vocab % groups_.tp->size() != 0) {
    return absl::InvalidArgumentError("tp must divide model.heads and model.vocab");
  }
  if (options_.global_batch % (options_.micro_batch * groups_.dp->size()) != 0) {
    return absl::InvalidArgumentError("global_batch must be a multiple of micro_batch × dp");
  }
  TokenDatasetOptions data = options_.data;
  data.seq_len = m.seq_len;
  data.vocab = m.vocab;
  auto ds = TokenDataset::Open(data);
  if (!ds.ok()) return ds.status();
  data_ = std::move(*ds);
  auto device = SelectDevice(options_.device);
  if (!device.ok()) return device.status();
  device_ = *device;
  model_ = std::make_unique<Gpt>(m, groups_.tp, options_.seed, device_);
  model_->set_activation_checkpointing(options_.activation_checkpointing);
  model_->set_fused_kernels(options_.fused_kernels);
  adam_state_.resize(model_->params().size());

  auto checkpoints = ListCheckpoints(options_.checkpoint_dir);
  if (!checkpoints.empty()) {
    TESSERA_RETURN_IF_ERROR(LoadCheckpoint(checkpoints.back().second));
  } else if (!options_.init_from.empty()) {
    auto full = LoadTensors(options_.init_from);
    if (!full.ok()) return full.status();
    absl::Status s = model_->LoadFull(*full);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("model.init_from ", options_.init_from, ": ", s.message()));
  }
  std::vector<at::Tensor> values;
  std::vector<bool> decay;
  for (Param& p : model_->params()) values.push_back(p.value), decay.push_back(p.weight_decay);
  buckets_ = std::make_unique<GradBuckets>(values, groups_.dp, GradBucketsOptions{options_.dp_bucket_bytes});
  if (options_.zero_stage == 1) {
    if (!device_.is_cpu()) return absl::UnimplementedError("parallel.zero_stage 1 runs on CPU parameters only (for now)");
    sharded_ = std::make_unique<ShardedAdamW>(values, decay, groups_.dp,
                                              AdamWOptions{options_.beta1, options_.beta2, options_.eps,
                                                           options_.weight_decay});
    if (!pending_m_.empty()) sharded_->LoadState(pending_m_, pending_v_);
  }
  pending_m_.clear();
  pending_v_.clear();
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::ClipGradients() {
  // Sums stay on the device (one host sync at the end, not one per tensor).
  at::Tensor replicated = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  at::Tensor sharded = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (Param& p : model_->params()) {
    // One pass per tensor (fp32 with ATen's cascaded summation), squared and summed in double.
    at::Tensor sq = p.value.grad().norm().to(at::kDouble).square();
    if (p.split == TpSplit::kReplicated) {
      replicated += sq;
    } else {
      sharded += sq;
    }
  }
  if (groups_.tp->size() > 1) TESSERA_RETURN_IF_ERROR(groups_.tp->AllReduce(sharded, ReduceOp::kSum));
  const double norm = std::sqrt(replicated.item<double>() + sharded.item<double>());
  if (options_.grad_clip > 0) {
    // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), clamped to 1.
    const double coef = std::min(1.0, options_.grad_clip / (norm + 1e-6));
    if (coef < 1.0) {
      at::NoGradGuard no_grad;
      for (Param& p : model_->params()) p.value.mutable_grad().mul_(coef);
    }
  }
  return norm;
}

absl::StatusOr<StepStats> Trainer::Step() {
  const auto start = std::chrono::steady_clock::now();
  const int dp = groups_.dp->size();
  const int dp_rank = groups_.dp->rank();
  const int micro = options_.micro_batch;
  const int accum = options_.global_batch / (micro * dp);
  const int64_t T = options_.model.seq_len;
  const int64_t bytes_before = groups_.dp->bytes_all_reduced() + groups_.tp->bytes_all_reduced();
  buckets_->ZeroGrad();
  double loss_sum = 0;
  for (int a = 0; a < accum; ++a) {
    // Global sample j of this step for dp rank d, micro-batch a, row i: d·micro·accum + a·micro + i.
    std::vector<int64_t> tokens;
    tokens.reserve(micro * (T + 1));
    for (int i = 0; i < micro; ++i) {
      const int64_t g = step_ * options_.global_batch + dp_rank * micro * accum + a * micro + i;
      TESSERA_RETURN_IF_ERROR(data_->Read(g, &tokens));
    }
    at::Tensor batch = at::from_blob(tokens.data(), {micro, T + 1}, at::kLong).to(device_, /*non_blocking=*/false,
                                                                                 /*copy=*/true);
    buckets_->SetSyncThisPass(a == accum - 1);
    at::Tensor loss = model_->Loss(batch.narrow(1, 0, T), batch.narrow(1, 1, T));
    (loss / accum).backward();
    loss_sum += loss.item<double>();
  }
  TESSERA_RETURN_IF_ERROR(buckets_->Finish());
  at::Tensor mean_loss = at::full({1}, loss_sum / accum, at::TensorOptions().dtype(at::kDouble).device(device_));
  if (dp > 1) TESSERA_RETURN_IF_ERROR(groups_.dp->AllReduce(mean_loss, ReduceOp::kAvg));
  auto norm = ClipGradients();
  if (!norm.ok()) return norm.status();

  LrScheduleOptions lr_options = options_.lr;
  lr_options.steps = options_.steps;
  const double lr = LearningRate(lr_options, step_);
  auto& params = model_->params();
  if (sharded_) {
    TESSERA_RETURN_IF_ERROR(sharded_->Step(lr, step_ + 1));
  } else {
    std::vector<at::Tensor> values, grads;
    std::vector<bool> decay;
    for (Param& p : params) values.push_back(p.value), grads.push_back(p.value.grad()), decay.push_back(p.weight_decay);
    adam_.UpdateAll(values, grads, adam_state_, decay, lr, step_ + 1, options_.fused_kernels);
  }
  ++step_;
  StepStats s;
  s.step = step_;
  s.loss = mean_loss.item<double>();
  s.lr = lr;
  s.grad_norm = *norm;
  s.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.tokens = static_cast<int64_t>(options_.global_batch) * T;
  s.tokens_per_s = s.tokens / s.step_seconds;
  s.bytes_all_reduced = groups_.dp->bytes_all_reduced() + groups_.tp->bytes_all_reduced() - bytes_before;
  if (sharded_) {
    s.optimizer_state_bytes = sharded_->state_bytes();
  } else {
    for (const AdamWState& a : adam_state_) s.optimizer_state_bytes += 2 * a.exp_avg.numel() * a.exp_avg.element_size();
  }
  return s;
}

absl::Status Trainer::Run(const std::function<void(const StepStats&)>& on_step) {
  if (groups_.global_rank == 0) TESSERA_RETURN_IF_ERROR(TrimStepLog());
  while (step_ < options_.steps) {
    auto stats = Step();
    if (!stats.ok()) return stats.status();
    if (groups_.global_rank == 0) TESSERA_RETURN_IF_ERROR(AppendStepLog(*stats));
    if (on_step) on_step(*stats);
    if (options_.dump_at_step == step_) TESSERA_RETURN_IF_ERROR(DumpDebug());
    const bool periodic = options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0;
    if (periodic || step_ == options_.steps) TESSERA_RETURN_IF_ERROR(SaveCheckpoint());
  }
  return groups_.world->Barrier();
}

absl::Status Trainer::LocalOptimizerState(std::vector<at::Tensor>* m, std::vector<at::Tensor>* v) {
  if (sharded_) return sharded_->GatherState(m, v);
  m->clear();
  v->clear();
  for (const AdamWState& a : adam_state_) m->push_back(a.exp_avg), v->push_back(a.exp_avg_sq);
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, at::Tensor>> Trainer::GatherFull(What what) {
  auto& params = model_->params();
  std::vector<at::Tensor> local, m, v;
  if (what == What::kExpAvg || what == What::kExpAvgSq) {
    TESSERA_RETURN_IF_ERROR(LocalOptimizerState(&m, &v));
    return GatherOverTp(what == What::kExpAvg ? m : v);
  }
  for (Param& p : params) local.push_back(what == What::kParams ? p.value : p.value.grad());
  return GatherOverTp(local);
}

absl::StatusOr<std::map<std::string, at::Tensor>> Trainer::GatherOverTp(const std::vector<at::Tensor>& local) {
  std::map<std::string, at::Tensor> out;
  auto& params = model_->params();
  for (size_t k = 0; k < params.size(); ++k) {
    at::Tensor part = local[k].defined() ? local[k] : at::zeros_like(params[k].value);
    at::Tensor full;
    TESSERA_RETURN_IF_ERROR(GatherFullTensor(params[k], part, groups_.tp.get(), &full));
    out.emplace(params[k].name, std::move(full));
  }
  return out;
}

absl::Status Trainer::SaveCheckpoint() {
  // Every dp rank takes part in gathering a sharded optimizer state; then dp rank 0's tp group
  // gathers the full tensors and global rank 0 writes them.
  std::vector<at::Tensor> local_m, local_v;
  TESSERA_RETURN_IF_ERROR(LocalOptimizerState(&local_m, &local_v));
  if (groups_.dp->rank() != 0) return groups_.world->Barrier();
  auto params = GatherFull(What::kParams);
  if (!params.ok()) return params.status();
  auto m = GatherOverTp(local_m);
  if (!m.ok()) return m.status();
  auto v = GatherOverTp(local_v);
  if (!v.ok()) return v.status();
  if (groups_.global_rank == 0) {
    auto tmp = BeginCheckpoint(options_.checkpoint_dir, step_);
    if (!tmp.ok()) return tmp.status();
    std::map<std::string, at::Tensor> optimizer;
    for (auto& [name, t] : *m) optimizer.emplace("exp_avg." + name, t);
    for (auto& [name, t] : *v) optimizer.emplace("exp_avg_sq." + name, t);
    TESSERA_RETURN_IF_ERROR(SaveTensors(*tmp + "/model.safetensors", *params, {{"format", "pt"}}));
    TESSERA_RETURN_IF_ERROR(SaveTensors(*tmp + "/optimizer.safetensors", optimizer));
    const auto& c = options_.model;
    nlohmann::json state = {
        {"format", "tessera-checkpoint"},
        {"version", 1},
        {"step", step_},
        {"samples_seen", step_ * options_.global_batch},
        {"data", {{"next_sample", step_ * options_.global_batch}, {"shuffle", options_.data.shuffle},
                  {"seed", options_.data.seed}}},
        {"model", {{"family", "gpt"}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
                   {"vocab", c.vocab}, {"seq_len", c.seq_len}}},
        {"mesh", {{"dp", options_.mesh.dp}, {"tp", options_.mesh.tp}, {"pp", options_.mesh.pp},
                  {"sp", options_.mesh.sp}, {"order", options_.mesh.order}}},
        {"optimizer", {{"name", "adamw"}, {"step", step_}}},
        {"rng", {{"init_seed", options_.seed}, {"note", "no randomness after initialisation (dropout 0)"}}},
    };
    std::ofstream(*tmp + "/trainer_state.json") << state.dump(2) << "\n";
    nlohmann::json index = {{"format", "tessera-checkpoint"}, {"version", 1}, {"weight_map", nlohmann::json::object()}};
    for (auto& [name, t] : *params) index["weight_map"][name] = "model.safetensors";
    for (auto& [name, t] : optimizer) index["weight_map"][name] = "optimizer.safetensors";
    std::ofstream(*tmp + "/index.json") << index.dump(2) << "\n";
    TESSERA_RETURN_IF_ERROR(CommitCheckpoint(options_.checkpoint_dir, *tmp, step_, options_.checkpoint_keep));
  }
  return groups_.world->Barrier();
}

absl::Status Trainer::LoadCheckpoint(const std::string& path) {
  std::ifstream in(path + "/trainer_state.json");
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.contains("step") || !state.contains("model")) {
    return absl::DataLossError(absl::StrCat(path, "/trainer_state.json is missing or not valid"));
  }
  const auto& c = options_.model;
  for (const auto& [key, want] : std::map<std::string, int>{{"layers", c.layers}, {"hidden", c.hidden},
                                                            {"heads", c.heads}, {"vocab", c.vocab},
                                                            {"seq_len", c.seq_len}}) {
    if (state["model"].value(key, -1) != want) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " was written for model.", key, " ",
                                                        state["model"].value(key, -1), ", the spec says ", want));
    }
  }
  auto params = LoadTensors(path + "/model.safetensors");
  if (!params.ok()) return params.status();
  TESSERA_RETURN_IF_ERROR(model_->LoadFull(*params));
  auto optimizer = LoadTensors(path + "/optimizer.safetensors");
  if (!optimizer.ok()) return optimizer.status();
  auto& ps = model_->params();
  for (size_t k = 0; k < ps.size(); ++k) {
    auto m = optimizer->find("exp_avg." + ps[k].name);
    auto v = optimizer->find("exp_avg_sq." + ps[k].name);
    if (m == optimizer->end() || v == optimizer->end()) {
      return absl::DataLossError(absl::StrCat(path, "/optimizer.safetensors lacks the state of ", ps[k].name));
    }
    const int r = groups_.tp->rank(), n = groups_.tp->size();
    adam_state_[k].exp_avg = ShardOf(ps[k], m->second, r, n).to(device_);
    adam_state_[k].exp_avg_sq = ShardOf(ps[k], v->second, r, n).to(device_);
    pending_m_.push_back(adam_state_[k].exp_avg);
    pending_v_.push_back(adam_state_[k].exp_avg_sq);
  }
  if (options_.zero_stage == 1) adam_state_.assign(ps.size(), AdamWState{});  // The sharded optimizer keeps them.
  step_ = state["step"].get<int64_t>();
  return absl::OkStatus();
}

absl::Status Trainer::TrimStepLog() {
  const std::string path = options_.output_dir + "/steps.jsonl";
  std::error_code ec;
  fs::create_directories(options_.output_dir, ec);
  std::ifstream in(path);
  std::stringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", int64_t{0}) <= step_) kept << line << "\n";
  }
  in.close();
  std::ofstream(path, std::ios::trunc) << kept.str();
  return absl::OkStatus();
}

absl::Status Trainer::AppendStepLog(const StepStats& s) {
  nlohmann::json j = {{"step", s.step}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm},
                      {"tokens_per_s", s.tokens_per_s}, {"step_seconds", s.step_seconds}, {"tokens", s.tokens},
                      {"bytes_all_reduced", s.bytes_all_reduced}, {"optimizer_state_bytes", s.optimizer_state_bytes}};
  std::ofstream out(options_.output_dir + "/steps.jsonl", std::ios::app);
  out << j.dump() << "\n";
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat(options_.output_dir, "/steps.jsonl: write failed"));
  return absl::OkStatus();
}

absl::Status Trainer::DumpDebug() {
  auto params = GatherFull(What::kParams);
  if (!params.ok()) return params.status();
  auto grads = GatherFull(What::kGrads);
  if (!grads.ok()) return grads.status();
  if (groups_.global_rank != 0) return absl::OkStatus();
  std::map<std::string, at::Tensor> all;
  for (auto& [name, t] : *params) all.emplace("param." + name, t);
  for (auto& [name, t] : *grads) all.emplace("grad." + name, t);
  std::error_code ec;
  fs::create_directories(options_.output_dir + "/debug", ec);
  return SaveTensors(absl::StrCat(options_.output_dir, "/debug/step_", step_, ".safetensors"), all);
}

}  // namespace tessera::parallel
