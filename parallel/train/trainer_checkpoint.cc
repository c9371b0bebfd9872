// Trainer: gathering full tensors over tp and pp, and checkpoints (save, load in any layout,
// sharded optimizer state). The training loop is in trainer.cc.
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>

#include <unistd.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "formats/checkpoint/checkpoint_dir.h"
#include "formats/checkpoint/durable_file.h"
#include "formats/checkpoint/safetensors.h"
#include "formats/model/trainer_state.h"
#include "nlohmann/json.hpp"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/models/model_state.h"
#include "parallel/train/checkpoint_write.h"
#include "parallel/train/status_macros.h"
#include "parallel/train/trainer.h"

namespace tessera::parallel {

using formats::checkpoint::AbortCheckpoint;
using formats::checkpoint::BeginCheckpoint;
using formats::checkpoint::CommitCheckpoint;
using formats::model::FamilyName;
using formats::checkpoint::FileDigest;
using formats::model::ModelPart;
using formats::checkpoint::NewestGoodCheckpoint;
using formats::model::ParamSpec;
using formats::model::ReadTrainerState;
using formats::model::TiedEmbeddingName;
using formats::checkpoint::TmpCheckpointPath;
using formats::model::TpSplit;
using formats::checkpoint::WriteFileDurably;

namespace fs = std::filesystem;

absl::Status Trainer::LocalOptimizerState(std::vector<at::Tensor>* m, std::vector<at::Tensor>* v) {
  TESSERA_RETURN_IF_ERROR(zero_->Gather(ZeroOptimizer::What::kExpAvg, m));
  return zero_->Gather(ZeroOptimizer::What::kExpAvgSq, v);
}

absl::StatusOr<std::map<std::string, at::Tensor>> Trainer::GatherFull(What what) {
  std::vector<at::Tensor> local, m, v;
  if (what == What::kExpAvg || what == What::kExpAvgSq) {
    TESSERA_RETURN_IF_ERROR(LocalOptimizerState(&m, &v));
    local = what == What::kExpAvg ? m : v;
  } else {
    // The fp32 master weights and the reduced (clipped) fp32 gradients.
    TESSERA_RETURN_IF_ERROR(
        zero_->Gather(what == What::kParams ? ZeroOptimizer::What::kParams : ZeroOptimizer::What::kGrads, &local));
  }
  auto full = GatherOverTp(local);
  if (!full.ok()) return full.status();
  // Experts first (each stage's ep rank 0 then holds all of its blocks' experts), then the stages.
  if (groups_.ep->size() > 1 && groups_.tp->rank() == 0) TESSERA_RETURN_IF_ERROR(GatherOverEp(&*full));
  if (layout_ && groups_.tp->rank() == 0 && groups_.ep->rank() == 0) TESSERA_RETURN_IF_ERROR(GatherOverPp(&*full));
  return full;
}

namespace {

// Member s (> 0) of `group` sends the tensors `specs` names from `full`, in that order (tag s); member
// 0, which knows the names and shapes, receives them into `full` (fp32, on the CPU). `what` names the
// gather in errors.
absl::Status CollectFrom(Communicator* group, int s, const std::vector<ParamSpec>& specs,
                         std::map<std::string, at::Tensor>* full, const char* what) {
  for (const ParamSpec& spec : specs) {
    if (group->rank() == s) {
      auto it = full->find(spec.name);
      if (it == full->end()) return absl::InternalError(absl::StrCat(what, ": member ", s, " lacks ", spec.name));
      TESSERA_RETURN_IF_ERROR(group->Send(it->second.to(at::kFloat).cpu().contiguous(), 0, s));
    } else {
      at::Tensor t = at::empty(spec.shape, at::kFloat);
      TESSERA_RETURN_IF_ERROR(group->Recv(t, s, s));
      full->emplace(spec.name, std::move(t));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Trainer::GatherOverEp(std::map<std::string, at::Tensor>* full) {
  Communicator* ep = groups_.ep.get();
  const ModelConfig& c = options_.model;
  // ep rank s > 0 sends its experts' tensors; rank 0 knows their names and shapes from s's part.
  for (int s = 1; s < ep->size(); ++s) {
    if (ep->rank() != 0 && ep->rank() != s) continue;
    ModelPart part = model_->part();
    part.expert_count = c.experts / ep->size();
    part.expert_first = s * part.expert_count;
    std::vector<ParamSpec> experts;
    for (const ParamSpec& spec : TrainedParamSpecs(c, part, groups_.tp->size())) {
      if (spec.expert >= 0) experts.push_back(spec);  // None with LoRA: the experts are frozen.
    }
    TESSERA_RETURN_IF_ERROR(CollectFrom(ep, s, experts, full, "expert gather"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::GatherOverPp(std::map<std::string, at::Tensor>* full) {
  Communicator* pp = groups_.pp.get();
  // Stage s > 0 sends every tensor it holds except the tied embedding (stage 0 has it); stage 0 knows
  // the names and shapes from the layout.
  for (int s = 1; s < pp->size(); ++s) {
    if (pp->rank() != 0 && pp->rank() != s) continue;
    std::vector<ParamSpec> held;
    for (const ParamSpec& spec : TrainedParamSpecs(options_.model, PartOfRank(*layout_, s), groups_.tp->size())) {
      if (spec.name != TiedEmbeddingName(options_.model)) held.push_back(spec);
    }
    TESSERA_RETURN_IF_ERROR(CollectFrom(pp, s, held, full, "pipeline gather"));
  }
  return absl::OkStatus();
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
  if (options_.checkpoint_async) {
    TESSERA_RETURN_IF_ERROR(SnapshotCheckpoint());
    return StartBackgroundCheckpoint();
  }
  CheckpointWrite w;
  TESSERA_RETURN_IF_ERROR(PrepareCheckpoint(w));
  auto remove_uncommitted = absl::MakeCleanup([&] {
    if (groups_.global_rank == 0) AbortCheckpoint(w.tmp);
  });
  return VoteAndCommit(w);
}

absl::Status Trainer::PrepareCheckpoint(CheckpointWrite& w) {
  // A two-phase commit: every rank writes and fsyncs its files into one temporary directory and votes;
  // rank 0 writes the index (every file's size and CRC-32C) and renames the directory into place only
  // when every rank voted yes, and prunes old checkpoints only after that. Failures are kept until
  // every rank has passed the collectives, so that no rank waits forever for one that gave up.
  //
  // 1. This rank's tp-local tensors: the (master) weights, and the moments unless every rank writes
  //    its own shard of them. Collectives over dp when the optimizer is sharded.
  // Per-rank optimizer files are written by plain dp × 1D-tp layouts; pipeline, sequence, grid and
  // expert-parallel layouts gather the sharded state into optimizer.safetensors like unsharded training.
  w.step = step_;
  w.deferred = options_.checkpoint_async;
  // Expert parallelism shards the experts over other groups: gathered too (for now).
  w.sharded_state = zero_->partitioned() && !layout_ && groups_.sp->size() == 1 &&
                    options_.layout.tp_mode == layout::TpMode::k1D && groups_.ep->size() == 1;
  std::vector<at::Tensor> local_params, local_m, local_v;
  TESSERA_RETURN_IF_ERROR(zero_->Gather(ZeroOptimizer::What::kParams, &local_params));
  if (!w.sharded_state) TESSERA_RETURN_IF_ERROR(LocalOptimizerState(&local_m, &local_v));

  // 2. One temporary directory for all ranks, named by rank 0's pid. Small control tensors live on
  //    the model's device (NCCL groups take device tensors only).
  at::Tensor token = at::full({1}, static_cast<int64_t>(getpid()), at::kLong).to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(token, 0));
  const int64_t writer = token.cpu().item<int64_t>();
  w.tmp = TmpCheckpointPath(options_.checkpoint_dir, w.step, writer);
  // Rank 0 begins it, which deletes other writers' temporary directories: only while this attempt
  // still owns the output directory (a superseded straggler must not delete the new attempt's).
  if (groups_.global_rank == 0) {
    w.status = Fence().Check();
    if (w.status.ok()) w.status = BeginCheckpoint(options_.checkpoint_dir, w.step, writer).status();
  }
  // Whatever ends this checkpoint early (a failed gather or collective returns at once), rank 0
  // removes the temporary directory: an uncommitted checkpoint leaves nothing behind to fill the disk.
  // (From here on the caller does, until the commit gives the directory its final name.)
  auto remove_uncommitted = absl::MakeCleanup([&] {
    if (groups_.global_rank == 0) AbortCheckpoint(w.tmp);
  });
  TESSERA_RETURN_IF_ERROR(groups_.world->Barrier());
  if (w.sharded_state) w.Save(OptimizerShardFileName(groups_.dp->rank(), groups_.tp->rank()), zero_->StateShard(), {});

  // 3. dp rank 0's tp group gathers full tensors (with expert parallelism, with the rest of its ep
  //    group: dp ranks 0 .. ep − 1); global rank 0 writes them.
  if (groups_.dp->rank() < groups_.ep->size() && groups_.sp->rank() == 0) {
    TESSERA_RETURN_IF_ERROR(WriteGatheredCheckpointFiles(w, local_params, local_m, local_v));
  }
  std::move(remove_uncommitted).Cancel();
  return absl::OkStatus();
}

at::Tensor Trainer::OwnVote(const CheckpointWrite& w) const {
  const int world = groups_.world->size();
  const int tp = groups_.tp->size();
  const int shards = w.sharded_state ? groups_.dp->size() * tp : 0;
  at::Tensor votes = at::zeros({world + 2 * shards}, at::kLong);
  votes[groups_.global_rank] = w.status.ok() ? 0 : 1;
  if (w.sharded_state && w.status.ok()) {
    const FileDigest& d = w.written.at(OptimizerShardFileName(groups_.dp->rank(), groups_.tp->rank()));
    const int slot = groups_.dp->rank() * tp + groups_.tp->rank();
    votes[world + 2 * slot] = d.bytes;
    votes[world + 2 * slot + 1] = static_cast<int64_t>(d.crc32c);
  }
  return votes;
}

absl::Status Trainer::VoteAndCommit(CheckpointWrite& w) {
  // 4. The votes (OwnVote), summed over every rank.
  at::Tensor all_votes = OwnVote(w).to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->AllReduce(all_votes));
  const at::Tensor votes = all_votes.cpu();

  // 5. Rank 0 commits (index last, then the rename) and tells every rank whether it did.
  at::Tensor committed = at::zeros({1}, at::kLong);
  if (groups_.global_rank == 0) {
    CommitCheckpointFiles(w, votes);
    committed[0] = w.status.ok() ? 1 : 0;
  }
  at::Tensor decision = committed.to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(decision, 0));
  if (w.status.ok() && decision.cpu().item<int64_t>() == 0) {
    w.status = absl::AbortedError("not committed by rank 0 (its log says why)");
  }
  if (!w.status.ok()) {
    return absl::Status(w.status.code(), absl::StrCat("checkpoint of step ", w.step, ": ", w.status.message()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::WriteGatheredCheckpointFiles(CheckpointWrite& w, const std::vector<at::Tensor>& local_params,
                                                   const std::vector<at::Tensor>& local_m,
                                                   const std::vector<at::Tensor>& local_v) {
  // Expert parallelism: the other ranks of dp rank 0's ep group send their experts; then pipeline
  // stages: pp rank 0 collects the other stages' tensors (from their ep rank 0, which has them all).
  const bool ep_gather = groups_.ep->size() > 1 && groups_.tp->rank() == 0;
  const bool pp_gather = layout_ && groups_.tp->rank() == 0 && groups_.ep->rank() == 0;
  auto gathered = GatherOverTp(local_params);
  if (!gathered.ok()) return gathered.status();
  w.params = std::move(*gathered);
  if (ep_gather) TESSERA_RETURN_IF_ERROR(GatherOverEp(&w.params));
  if (pp_gather) TESSERA_RETURN_IF_ERROR(GatherOverPp(&w.params));
  if (!w.sharded_state) {
    auto m = GatherOverTp(local_m);
    if (!m.ok()) return m.status();
    auto v = GatherOverTp(local_v);
    if (!v.ok()) return v.status();
    if (ep_gather) TESSERA_RETURN_IF_ERROR(GatherOverEp(&*m));
    if (ep_gather) TESSERA_RETURN_IF_ERROR(GatherOverEp(&*v));
    if (pp_gather) TESSERA_RETURN_IF_ERROR(GatherOverPp(&*m));
    if (pp_gather) TESSERA_RETURN_IF_ERROR(GatherOverPp(&*v));
    for (auto& [name, t] : *m) w.optimizer.emplace("exp_avg." + name, t);
    for (auto& [name, t] : *v) w.optimizer.emplace("exp_avg_sq." + name, t);
  }
  if (groups_.global_rank == 0) {
    w.Save("model.safetensors", w.params, {{"format", "pt"}});
    if (!w.sharded_state) w.Save("optimizer.safetensors", w.optimizer, {});
    w.SaveText("trainer_state.json", TrainerStateJson(w.sharded_state).dump(2) + "\n");
    if (dpo()) {
      // DPO's reference log-probabilities [pairs, 2] (chosen, rejected; −inf: not scored) of the
      // training pairs and of the validation pairs: a resume keeps them, as the initial weights are gone.
      std::map<std::string, at::Tensor> tables;
      for (const PairSet* set : {&train_pairs_, &valid_pairs_}) {
        if (!set->data) continue;
        tables[set == &train_pairs_ ? "logps" : "valid_logps"] =
            at::tensor(set->reference, at::TensorOptions().dtype(at::kDouble)).view({set->count, 2});
      }
      w.Save("reference.safetensors", tables, ReferenceMetadata());
    }
  }
  return absl::OkStatus();
}

void Trainer::CommitCheckpointFiles(CheckpointWrite& w, const at::Tensor& votes) {
  const int world = groups_.world->size();
  const int tp = groups_.tp->size();
  std::string failed;
  for (int r = 0; r < world; ++r) {
    if (votes[r].item<int64_t>() != 0) absl::StrAppend(&failed, failed.empty() ? "" : ", ", r);
  }
  if (w.status.ok() && !failed.empty()) {
    w.status = absl::AbortedError(absl::StrCat("rank(s) ", failed, " could not write their files (their logs say why)"));
  }
  if (w.status.ok()) {
    for (int d = 0; d < groups_.dp->size() && w.sharded_state; ++d) {
      for (int t = 0; t < tp; ++t) {
        const int slot = d * tp + t;
        w.written[OptimizerShardFileName(d, t)] = FileDigest{votes[world + 2 * slot].item<int64_t>(),
                                                    static_cast<uint32_t>(votes[world + 2 * slot + 1].item<int64_t>())};
      }
    }
    nlohmann::json index = {{"format", "tessera-checkpoint"}, {"version", 2}, {"weight_map", nlohmann::json::object()},
                            {"files", nlohmann::json::object()}};
    for (auto& [name, t] : w.params) index["weight_map"][name] = "model.safetensors";
    for (auto& [name, t] : w.optimizer) index["weight_map"][name] = "optimizer.safetensors";
    if (w.sharded_state) {
      nlohmann::json files = nlohmann::json::array();
      for (int d = 0; d < groups_.dp->size(); ++d) {
        for (int t = 0; t < tp; ++t) files.push_back(OptimizerShardFileName(d, t));
      }
      index["optimizer_shards"] = files;
    }
    for (const auto& [name, d] : w.written) index["files"][name] = {{"bytes", d.bytes}, {"crc32c", d.crc32c}};
    w.status = WriteFileDurably(w.tmp + "/index.json", index.dump(2) + "\n").status();
  }
  // The rename and the pruning only while this attempt still owns the output directory: checked before
  // the temporary directory's fsync, and again (inside the commit) after it, before the rename, and
  // before the pruning.
  if (w.status.ok()) w.status = Fence().Check();
  if (w.status.ok()) {
    w.status = CommitCheckpoint(options_.checkpoint_dir, w.tmp, w.step, options_.checkpoint_keep,
                                [this] { return Fence().Check(); });
  }
  if (!w.status.ok()) AbortCheckpoint(w.tmp);
}

nlohmann::json Trainer::DataStateJson() const {
  const int64_t next = step_ * options_.global_batch;
  nlohmann::json d = {{"next_sample", next}, {"shuffle", options_.data.shuffle}, {"seed", options_.data.seed}};
  if (data_ != nullptr && data_->blended()) {
    // Each source's position: how many of its samples the blend has taken before next_sample.
    auto counts = data_->BlendCountsAt(next);
    if (counts.ok()) {
      nlohmann::json sources = nlohmann::json::array();
      for (size_t s = 0; s < options_.blend.size(); ++s) {
        sources.push_back({{"path", options_.blend[s].data.path}, {"weight", options_.blend[s].weight},
                           {"samples_taken", (*counts)[s]}});
      }
      d["blend"] = sources;
    }
  }
  return d;
}

nlohmann::json Trainer::TrainerStateJson(bool sharded_state) const {
  const auto& c = options_.model;
  const layout::ParallelLayout& l = options_.layout;
  nlohmann::json optimizer_state = {{"name", "adamw"}, {"step", adam_step_}, {"sharded", sharded_state}};
  if (sharded_state) {
    nlohmann::json files = nlohmann::json::array();
    for (int d = 0; d < options_.layout.dp; ++d) {
      for (int t = 0; t < options_.layout.tp; ++t) files.push_back(OptimizerShardFileName(d, t));
    }
    optimizer_state["shards"] = files;
  }
  nlohmann::json state = {
      {"format", "tessera-checkpoint"},
      {"version", 1},
      {"step", step_},
      {"samples_seen", step_ * options_.global_batch},
      {"data", DataStateJson()},
      {"model", {{"family", FamilyName(c.family)}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
                 {"kv_heads", c.KvHeads()}, {"ffn_hidden", c.FfnHidden()}, {"vocab", c.vocab}, {"seq_len", c.seq_len},
                 {"norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta}, {"tie_embeddings", c.family == ModelFamily::kGpt2 || c.tie_embeddings},
                 {"head", c.score_head ? "score" : "lm"},
                 {"activation", c.family != ModelFamily::kGpt2 ? "silu" : c.gelu_tanh ? "gelu_tanh" : "gelu"},
                 {"qkv_bias", c.qkv_bias}, {"qk_norm", c.qk_norm}, {"experts", c.experts},
                 {"experts_per_token", c.experts_per_token}, {"moe_ffn_hidden", c.MoeFfnHidden()},
                 {"shared_expert_ffn_hidden", c.shared_expert_ffn_hidden}, {"norm_topk_prob", c.norm_topk_prob},
                 {"moe_every", c.moe_every}, {"dense_layers", c.dense_layers},
                 {"capacity_factor", c.capacity_factor}, {"router_bias_rate", c.router_bias_rate},
                 {"router_jitter", c.router_jitter},
                 // LoRA: model.safetensors holds the adapters only; the base is the job's init_from or
                 // pretrained, named here.
                 {"lora", c.lora.enabled() ? nlohmann::json{{"rank", c.lora.rank}, {"alpha", c.lora.alpha},
                                                            {"targets", c.lora.targets},
                                                            {"dropout", c.lora.dropout},
                                                            {"base", options_.pretrained.empty() ? options_.init_from
                                                                                                 : options_.pretrained}}
                                           : nlohmann::json(nullptr)},
                 {"rope_scaling", c.rope_scaling.enabled()
                                      ? nlohmann::json{{"factor", c.rope_scaling.factor},
                                                       {"low_freq_factor", c.rope_scaling.low_freq_factor},
                                                       {"high_freq_factor", c.rope_scaling.high_freq_factor},
                                                       {"original_max_positions", c.rope_scaling.original_max_positions}}
                                      : nlohmann::json(nullptr)}}},
      {"mesh", {{"sp_mode", layout::Name(l.sp_mode)}, {"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"sp", l.sp},
                {"order", layout::OrderName(l.order)}, {"pp_schedule", layout::Name(l.pp_schedule)},
                {"pp_chunks", l.pp_chunks}}},
      {"optimizer", optimizer_state},
      {"zero_stage", static_cast<int>(l.zero_stage)},
      {"precision", layout::Name(options_.precision)},
      {"loss_scale", {{"scale", loss_scale_}, {"good_steps", good_steps_}}},
      {"rng", {{"init_seed", options_.seed},
               {"note", "every later draw (router jitter, LoRA dropout) derives from init_seed and the micro-batch's "
                        "first sample: nothing to restore"}}},
  };
  if (router_bias_.defined()) {
    // Loss-free balancing's biases (the same on every rank): one list per block, empty for dense ones.
    const at::Tensor bias = router_bias_.to(at::kDouble).cpu();
    nlohmann::json rows = nlohmann::json::array();
    for (int layer = 0; layer < c.layers; ++layer) {
      std::vector<double> row;
      if (c.IsMoeLayer(layer)) row.assign(bias[layer].data_ptr<double>(), bias[layer].data_ptr<double>() + c.experts);
      rows.push_back(row);
    }
    state["router_bias"] = rows;
  }
  return state;
}

absl::StatusOr<int64_t> Trainer::AgreeOnResumeStep() {
  // Rank 0 could not read a checkpoint (not damage): every rank fails this attempt; a later one retries.
  constexpr int64_t kUnreadable = -2;
  absl::Status unreadable;
  at::Tensor step = at::full({1}, int64_t{-1}, at::kLong);
  if (groups_.global_rank == 0) {
    std::vector<absl::Status> damaged;
    auto found = NewestGoodCheckpoint(options_.checkpoint_dir, &damaged);
    for (const absl::Status& s : damaged) {
      Warn(absl::StrCat(s.message(), "; set aside as .damaged, resuming from an older one"));
    }
    const std::optional<std::pair<int64_t, std::string>> good = found.ok() ? *found : std::nullopt;
    if (!found.ok()) {
      unreadable = found.status();
      step[0] = kUnreadable;
    } else if (good.has_value()) {
      step[0] = good->first;
    } else if (!damaged.empty()) {
      Warn(absl::StrCat("no undamaged checkpoint left in ", options_.checkpoint_dir, "; starting over"));
    }
  }
  at::Tensor agreed = step.to(device_);
  TESSERA_RETURN_IF_ERROR(groups_.world->Broadcast(agreed, 0));
  const int64_t resume = agreed.cpu().item<int64_t>();
  if (resume == kUnreadable) {
    return groups_.global_rank == 0 ? unreadable
                                    : absl::UnavailableError("rank 0 could not read the job's checkpoints (its log says why)");
  }
  return resume;
}

absl::Status Trainer::CheckModelMatches(const ModelConfig& saved, const std::string& what, bool reference) const {
  const ModelConfig& c = options_.model;
  if (saved.family != c.family) {
    return absl::FailedPreconditionError(absl::StrCat(what, " was written for model.family ", FamilyName(saved.family),
                                                      ", the spec says ", FamilyName(c.family)));
  }
  // The sizes first, then what follows from them (a wider model also has a wider MLP).
  for (const auto& [key, had, want] : std::vector<std::tuple<const char*, int, int>>{
           {"layers", saved.layers, c.layers}, {"hidden", saved.hidden, c.hidden}, {"heads", saved.heads, c.heads},
           {"vocab", saved.vocab, c.vocab}, {"seq_len", reference ? c.seq_len : saved.seq_len, c.seq_len},
           {"kv_heads", saved.KvHeads(), c.KvHeads()}, {"ffn_hidden", saved.FfnHidden(), c.FfnHidden()},
           {"experts", saved.experts, c.experts}, {"moe_ffn_hidden", saved.IsMoe() ? saved.MoeFfnHidden() : 0,
                                                   c.IsMoe() ? c.MoeFfnHidden() : 0},
           {"shared_expert_ffn_hidden", saved.shared_expert_ffn_hidden, c.shared_expert_ffn_hidden},
           {"qk_norm", saved.qk_norm, c.qk_norm},
           {"qkv_bias", reference ? saved.qkv_bias : c.qkv_bias, c.qkv_bias},
           {"tie_embeddings", reference ? saved.tie_embeddings : c.tie_embeddings, c.tie_embeddings}}) {
    if (had != want) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " was written for model.", key, " ", had, ", the spec says ", want));
    }
  }
  if (reference) {
    // What else changes the forward pass: the reference is built from the spec's model (NewModel), so
    // a model that computes otherwise is refused, not scored as another (TRL's ref_model runs its own).
    for (const auto& [key, had, want] : std::vector<std::tuple<const char*, double, double>>{
             {"norm_eps", saved.norm_eps, c.norm_eps},
             {"rope_theta", saved.rope_theta, c.rope_theta},
             {"gelu_tanh", saved.gelu_tanh ? 1.0 : 0.0, c.gelu_tanh ? 1.0 : 0.0}}) {
      if (had != want) {
        return absl::FailedPreconditionError(
            absl::StrCat(what, " was written for model.", key, " ", had, ", the spec says ", want));
      }
    }
    if (!(saved.rope_scaling == c.rope_scaling)) {
      return absl::FailedPreconditionError(absl::StrCat(what, "'s rope_scaling differs from the spec's model"));
    }
  }
  if (saved.score_head != c.score_head) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, saved.score_head ? " is a reward model (a score head)" : " is a language model (an LM head)",
        ", this job trains ", c.score_head ? "a reward model (train.objective reward)" : "a language model"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadCheckpoint(const std::string& path) {
  auto state = ReadTrainerState(path);
  if (!state.ok()) return state.status();
  TESSERA_RETURN_IF_ERROR(CheckModelMatches(state->model, absl::StrCat("checkpoint ", path), /*reference=*/false));
  // What changes the forward pass, as tessera generate applies it (model_state.h): the trained
  // parameters, and loss-free balancing's biases (a checkpoint without them starts them at 0).
  TESSERA_RETURN_IF_ERROR(ApplyCheckpointState(path, Decoder::LoadWhat::kTrainable, state->router_bias, *model_, router_bias_));
  step_ = state->step;
  adam_step_ = state->optimizer_step;
  if (dpo()) TESSERA_RETURN_IF_ERROR(LoadReference(path + "/reference.safetensors"));
  if (data_ && data_->blended()) {
    // The blend continues from the saved positions when the checkpoint has them for as many
    // sources; otherwise (a checkpoint from before the blend) from its definition at next_sample.
    const int64_t next = step_ * options_.global_batch;
    if (state->blend_samples_taken.size() == options_.blend.size() && state->next_sample == next) {
      if (absl::Status st = data_->RestoreBlend(next, state->blend_samples_taken); !st.ok()) {
        return absl::DataLossError(absl::StrCat(path, "/trainer_state.json: data.blend: ", st.message()));
      }
    }
  }
  const auto saved_precision = layout::ParsePrecision(state->precision);  // Not ok: "" (before precisions).
  if (options_.precision == layout::Precision::kFp16 && saved_precision.ok() &&
      *saved_precision == layout::Precision::kFp16 && state->loss_scale.has_value()) {
    loss_scale_ = *state->loss_scale;
    good_steps_ = state->good_steps;
  }
  pending_m_.clear();
  pending_v_.clear();
  if (state->optimizer_sharded) {
    if (state->mesh_tp < 1) return absl::DataLossError(absl::StrCat(path, "/trainer_state.json lacks mesh.tp"));
    return LoadShardedOptimizer(path, state->mesh_tp);
  }
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
    pending_m_.push_back(ShardOf(ps[k], m->second.to(at::kFloat), r, n));
    pending_v_.push_back(ShardOf(ps[k], v->second.to(at::kFloat), r, n));
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadShardedOptimizer(const std::string& path, int saved_tp) {
  // Files of every saved dp rank, for the saved tp ranks this rank needs. Sharded checkpoints are
  // written by 1D layouts (ZeRO does not run with other tp modes).
  const bool same_tp = saved_tp == groups_.tp->size() && options_.layout.tp_mode == layout::TpMode::k1D;
  std::map<std::string, TpSplit> saved_split;
  for (const ParamSpec& spec : TrainedParamSpecs(options_.model, model_->part(), saved_tp)) {
    saved_split[spec.name] = spec.split;
  }
  std::vector<int> tp_ranks;
  for (int t = 0; t < saved_tp; ++t) {
    if (!same_tp || t == groups_.tp->rank()) tp_ranks.push_back(t);
  }
  std::map<int, std::vector<std::map<std::string, at::Tensor>>> files;  // By saved tp rank.
  for (int t : tp_ranks) {
    for (int d = 0;; ++d) {
      const std::string file = path + "/" + OptimizerShardFileName(d, t);
      if (!fs::exists(file)) break;
      auto tensors = LoadTensors(file);
      if (!tensors.ok()) return tensors.status();
      files[t].push_back(std::move(*tensors));
    }
    if (files[t].empty()) return absl::DataLossError(absl::StrCat(path, " lacks ", OptimizerShardFileName(0, t)));
  }
  auto& ps = model_->params();
  for (Param& p : ps) {
    std::vector<at::Tensor> parts_m, parts_v;
    Param saved = p;
    saved.split = saved_split.at(p.name);
    const std::vector<int64_t> shape = PartShape(saved, saved_tp);
    for (int t : tp_ranks) {
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      at::Tensor m = at::zeros({numel}), v = at::zeros({numel});
      int64_t covered = 0;
      for (auto& f : files[t]) {
        auto range = f.find("range." + p.name);
        if (range == f.end()) continue;
        const int64_t a = range->second[0].item<int64_t>(), b = range->second[1].item<int64_t>();
        auto fm = f.find("exp_avg." + p.name), fv = f.find("exp_avg_sq." + p.name);
        if (a < 0 || b > numel || a >= b || fm == f.end() || fv == f.end() || fm->second.numel() != b - a ||
            fv->second.numel() != b - a) {
          return absl::DataLossError(absl::StrCat(path, ": the optimizer shard of ", p.name, " (tp rank ", t,
                                                  ") is malformed"));
        }
        m.narrow(0, a, b - a).copy_(fm->second.reshape({-1}));
        v.narrow(0, a, b - a).copy_(fv->second.reshape({-1}));
        covered += b - a;
      }
      if (covered != numel) {
        return absl::DataLossError(absl::StrCat(path, ": the optimizer shards of ", p.name, " (tp rank ", t,
                                                ") cover ", covered, " of ", numel, " elements"));
      }
      parts_m.push_back(m.view(shape));
      parts_v.push_back(v.view(shape));
    }
    if (same_tp) {
      pending_m_.push_back(parts_m[0]);
      pending_v_.push_back(parts_v[0]);
    } else {
      const int r = groups_.tp->rank(), n = groups_.tp->size();
      pending_m_.push_back(ShardOf(p, JoinShards(saved, parts_m), r, n));
      pending_v_.push_back(ShardOf(p, JoinShards(saved, parts_v), r, n));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::parallel
