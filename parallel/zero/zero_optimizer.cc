#include "parallel/zero/zero_optimizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "parallel/zero/zero_unit.h"

namespace tessera::parallel {

using formats::model::TpSplit;

using Stage = layout::ZeroStage;

namespace {
// Stages 2 and 3 keep only the owned elements' gradients: reduce-scattered every backward pass.
bool GradientsSharded(Stage s) { return s == Stage::kGradients || s == Stage::kParameters; }
}  // namespace
namespace {

// A tensor on the same storage with its own version counter: writes through it (gathers, updates)
// do not count as in-place changes of the parameters that autograd saved for backward.
at::Tensor Alias(const at::Tensor& t) {
  return at::empty({0}, t.options()).set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
}

// Releases the memory behind every tensor on `t`'s storage (they must not be read until
// AllocateStorage gives it memory again).
void FreeStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void AllocateStorage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes && s->data() != nullptr) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

int64_t Bytes(const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

}  // namespace

ZeroOptimizer::ZeroOptimizer(Decoder* model, std::shared_ptr<Communicator> dp, std::shared_ptr<Communicator> tp,
                             const ZeroOptions& options, std::shared_ptr<Communicator> tied,
                             std::shared_ptr<Communicator> expert_dp, std::shared_ptr<Communicator> ep)
    : model_(model),
      dp_(std::move(dp)),
      tp_(std::move(tp)),
      tied_(tied && tied->size() > 1 ? std::move(tied) : nullptr),
      options_(options),
      simd_(kernels::DetectSimd()),
      expert_dp_(ep && ep->size() > 1 ? std::move(expert_dp) : nullptr),
      ep_(ep && ep->size() > 1 ? std::move(ep) : nullptr) {}

ZeroOptimizer::~ZeroOptimizer() {
  for (auto& u : units_) {
    if (u->reduce) u->reduce->Wait().IgnoreError();
    if (u->gather) u->gather->Wait().IgnoreError();
  }
  if (model_->unit_hooks() == this) model_->set_unit_hooks(nullptr);
}

absl::StatusOr<std::unique_ptr<ZeroOptimizer>> ZeroOptimizer::Create(Decoder* model, std::shared_ptr<Communicator> dp,
                                                                     std::shared_ptr<Communicator> tp,
                                                                     const ZeroOptions& options,
                                                                     std::shared_ptr<Communicator> tied,
                                                                     std::shared_ptr<Communicator> expert_dp,
                                                                     std::shared_ptr<Communicator> ep) {
  // A stage made from an int (a bench's flag) that no enumerator has.
  if (absl::Status s = layout::ZeroStageOf(static_cast<int>(options.stage)).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("parallel.zero_stage: ", s.message()));
  }
  if (options.param_dtype != at::kFloat && options.param_dtype != at::kBFloat16 && options.param_dtype != at::kHalf) {
    return absl::InvalidArgumentError("train.precision must be fp32, bf16 or fp16");
  }
  if (ep && ep->size() > 1 && !expert_dp) {
    return absl::InvalidArgumentError("ZeroOptimizer: expert parallelism needs the experts' replica group");
  }
  std::unique_ptr<ZeroOptimizer> z(new ZeroOptimizer(model, std::move(dp), std::move(tp), options, std::move(tied),
                                                     std::move(expert_dp), std::move(ep)));
  if (absl::Status s = z->Init(); !s.ok()) return s;
  return z;
}

absl::Status ZeroOptimizer::Init() {
  at::NoGradGuard no_grad;
  std::vector<Param>& params = model_->params();
  device_ = params.at(0).value.device();
  for (const Param& p : params) {
    if (p.value.scalar_type() != at::kFloat || p.value.device() != device_) {
      return absl::FailedPreconditionError(absl::StrCat("ZeroOptimizer needs fp32 parameters on one device; ", p.name,
                                                        " is not"));
    }
  }
  state_device_ = options_.offload ? c10::Device(c10::kCPU) : device_;
  const bool pinned = options_.offload && !device_.is_cpu();
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  unit_of_.assign(params.size(), 0);
  offset_in_unit_.assign(params.size(), 0);

  // The model's units; with a tied group, wte is split off unit 0 into a unit of its own; with expert
  // parallelism, each block's experts form a unit of their own.
  struct Group {
    int model_unit;
    std::vector<size_t> members;
    bool expert;
  };
  std::vector<Group> groups;
  const std::vector<std::vector<size_t>> model_units = model_->Units();
  of_model_unit_.assign(model_units.size(), {});
  for (size_t m = 0; m < model_units.size(); ++m) {
    std::vector<size_t> rest, experts;
    for (size_t k : model_units[m]) {
      if (tied_ && params[k].name == model_->tied_embedding()) {
        tied_unit_ = static_cast<int>(groups.size());
        groups.push_back({static_cast<int>(m), {k}, false});
      } else {
        (ep_ && params[k].expert ? experts : rest).push_back(k);
      }
    }
    if (!rest.empty()) groups.push_back({static_cast<int>(m), rest, false});
    if (!experts.empty()) groups.push_back({static_cast<int>(m), experts, true});
  }
  if (tied_ && tied_unit_ < 0) return absl::FailedPreconditionError("ZeroOptimizer: a tied group but no tied embedding");
  for (const auto& [model_unit, members, expert] : groups) {
    auto u = std::make_unique<Unit>();
    u->params = members;
    u->model_unit = model_unit;
    u->expert = expert;
    u->group = expert ? expert_dp_.get() : dp_.get();
    u->shards = partitioned() ? u->group->size() : 1;
    u->shard_rank = partitioned() ? u->group->rank() : 0;
    of_model_unit_[model_unit].push_back(units_.size());
    u->offsets.push_back(0);
    for (size_t k : members) {
      unit_of_[k] = units_.size();
      offset_in_unit_[k] = u->offsets.back();
      u->offsets.push_back(u->offsets.back() + params[k].value.numel());
    }
    u->numel = u->offsets.back();
    u->shard = (u->numel + u->shards - 1) / u->shards;
    u->begin = u->shard_rank * u->shard;
    const int64_t padded = u->shard * u->shards;

    // The starting weights, flattened and padded, in fp32.
    std::vector<at::Tensor> pieces;
    for (size_t k : members) pieces.push_back(params[k].value.detach().reshape({-1}));
    if (padded > u->numel) pieces.push_back(at::zeros({padded - u->numel}, f32.device(device_)));
    at::Tensor full32 = at::cat(pieces);

    u->flat = full32.to(options_.param_dtype).contiguous();
    u->flat_alias = Alias(u->flat);
    for (size_t j = 0; j < members.size(); ++j) {
      Param& p = params[members[j]];
      p.value = u->flat.narrow(0, u->offsets[j], p.value.numel()).view(p.value.sizes()).detach().requires_grad_(true);
    }
    at::Tensor owned32 = full32.narrow(0, u->begin, u->shard);
    if (options_.stage == Stage::kParameters) u->param_shard = u->flat.narrow(0, u->begin, u->shard).clone();
    // With offload the optimizer keeps its own host copy (even when the parameters are on the host).
    u->master_is_param = options_.param_dtype == at::kFloat && !options_.offload;
    if (u->master_is_param) {
      u->master = options_.stage == Stage::kParameters ? u->param_shard : u->flat_alias.narrow(0, u->begin, u->shard);
    } else {
      u->master = at::empty({u->shard}, f32.device(state_device_).pinned_memory(pinned));
      u->master.copy_(owned32);
    }
    u->exp_avg = at::zeros({u->shard}, f32.device(state_device_).pinned_memory(pinned));
    u->exp_avg_sq = at::zeros({u->shard}, f32.device(state_device_).pinned_memory(pinned));
    if (options_.stage == Stage::kParameters) {
      FreeStorage(u->flat);
      u->gathered = false;
    }
    units_.push_back(std::move(u));
  }

  if (options_.stage == Stage::kNone || (options_.stage == Stage::kOptimizerState && !partitioned())) {
    std::vector<at::Tensor> values, experts;
    for (Param& p : params) (ep_ && p.expert ? experts : values).push_back(p.value);
    buckets_ = std::make_unique<GradBuckets>(values, dp_, GradBucketsOptions{options_.bucket_bytes});
    if (!experts.empty()) {
      expert_buckets_ = std::make_unique<GradBuckets>(experts, expert_dp_, GradBucketsOptions{options_.bucket_bytes});
    }
  } else {
    for (size_t k = 0; k < params.size(); ++k) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params[k].value);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            MarkReady(k);
            return outputs;
          }));
      accumulators_.push_back(std::move(accumulator));
    }
  }
  model_->set_unit_hooks(this);
  ResetPeak();
  return absl::OkStatus();
}

void ZeroOptimizer::ZeroGrad() {
  if (buckets_) {
    buckets_->ZeroGrad();
    if (expert_buckets_) expert_buckets_->ZeroGrad();
  } else {
    for (Param& p : model_->params()) p.value.mutable_grad() = at::Tensor();
  }
  for (auto& u : units_) u->grad_shard = at::Tensor();
  grad_factor_ = 1.0;
}

void ZeroOptimizer::ReleaseGatheredUnits() {
  if (options_.stage != Stage::kParameters) return;
  for (auto& u : units_) {
    if (u->pending == 0 && (u->gathered || u->gather)) Release(*u);
  }
}

absl::Status ZeroOptimizer::HoldGathered(bool hold) {
  if (options_.stage != Stage::kParameters || hold == held_) return absl::OkStatus();
  at::NoGradGuard no_grad;
  if (hold) {
    for (auto& u : units_) StartGather(*u);
    for (auto& u : units_) {
      if (u->gather) {
        absl::Status s = u->gather->Wait();
        u->gather.reset();
        if (!s.ok()) return s;
      }
      u->gathered = true;
    }
    held_ = true;
    return absl::OkStatus();
  }
  held_ = false;
  for (auto& u : units_) {
    if (u->pending == 0 && (u->gathered || u->gather)) Release(*u);
  }
  return absl::OkStatus();
}

void ZeroOptimizer::SetSyncThisPass(bool sync) {
  sync_ = sync;
  for (auto& u : units_) u->ready = 0;
  if (buckets_) buckets_->SetSyncThisPass(sync);
  if (expert_buckets_) expert_buckets_->SetSyncThisPass(sync);
}

void ZeroOptimizer::MarkReady(size_t k) {
  Unit& u = *units_[unit_of_[k]];
  if (++u.ready < u.params.size()) return;
  u.ready = 0;
  Sample();  // The unit's full gradients exist now.
  if (sync_ || (options_.reduce_every_pass && GradientsSharded(options_.stage))) StartReduce(u);
  if (options_.stage != Stage::kParameters) return;
  // Blocks are gathered again by the gradient hook of their next backward; unit 0 has no such hook
  // and stays until the last forward that used it has gone backward.
  if (u.model_unit == 0) {
    if (u.pending > 0) --u.pending;
    if (u.pending > 0) return;
  }
  Release(u);
}

void ZeroOptimizer::CopyGrads(const Unit& u, int64_t begin, int64_t end, at::Tensor& out) const {
  std::vector<Param>& params = model_->params();
  for (size_t j = 0; j < u.params.size(); ++j) {
    const int64_t a = std::max(begin, u.offsets[j]), b = std::min(end, u.offsets[j + 1]);
    if (a >= b) continue;
    const at::Tensor& g = params[u.params[j]].value.grad();
    at::Tensor dst = out.narrow(0, a - begin, b - a);
    if (g.defined()) {
      dst.copy_(g.reshape({-1}).narrow(0, a - u.offsets[j], b - a));
    } else {
      dst.zero_();
    }
  }
}

void ZeroOptimizer::StartReduce(Unit& u) {
  at::NoGradGuard no_grad;
  if (u.reduce) {  // The previous pass's reduction of this unit is still on its way.
    FinishReduce(u);
    in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), &u));
  }
  // At most kReductionsInFlight full-size gradient buffers exist at a time: the oldest reduction
  // finishes before this one's buffer is made.
  while (in_flight_.size() >= kReductionsInFlight) {
    FinishReduce(*in_flight_.front());
    in_flight_.pop_front();
  }
  const int64_t padded = u.shard * u.shards;
  u.grad_flat = at::zeros({padded}, at::TensorOptions().dtype(options_.param_dtype).device(device_));
  CopyGrads(u, 0, padded, u.grad_flat);
  for (size_t k : u.params) model_->params()[k].value.mutable_grad() = at::Tensor();
  u.incoming = at::empty({u.shard}, u.grad_flat.options());
  if (u.shards == 1) {
    u.incoming.copy_(u.grad_flat);
    u.reduce = DoneWork(absl::OkStatus());
  } else {
    // Summed, as plain data parallelism's buckets are (each micro-batch's loss carries its share of the
    // job's step: the header).
    u.reduce = u.group->ReduceScatterAsync(u.grad_flat, u.incoming, ReduceOp::kSum);
  }
  in_flight_.push_back(&u);
  Sample();
}

void ZeroOptimizer::FinishReduce(Unit& u) {
  if (!u.reduce) return;
  absl::Status s = u.reduce->Wait();
  if (reduce_status_.ok() && !s.ok()) reduce_status_ = s;
  u.reduce.reset();
  u.grad_flat = at::Tensor();
  // The first reduction of a step becomes the owned gradients as they are (one reduction per step:
  // the same sums as plain dp's all-reduce); later ones add to them.
  if (u.grad_shard.defined()) {
    u.grad_shard.add_(u.incoming);
  } else {
    u.grad_shard = u.incoming;
  }
  u.incoming = at::Tensor();
}

absl::Status ZeroOptimizer::ReduceGradients() {
  at::NoGradGuard no_grad;
  absl::Status status;
  if (buckets_) {
    status = buckets_->Finish();  // The parameters' .grad now hold the sums.
    if (expert_buckets_) {
      // Summed over the experts' replicas; each already summed its ep group's tokens.
      absl::Status s = expert_buckets_->Finish();
      if (status.ok()) status = s;
    }
    if (status.ok() && tied_) {
      // Both copies of wte get the sum of the first stage's (lookup) and the last's (head) gradients.
      at::Tensor& g = model_->params()[units_[tied_unit_]->params[0]].value.mutable_grad();
      if (!g.defined()) g = at::zeros_like(model_->params()[units_[tied_unit_]->params[0]].value);
      status = tied_->AllReduce(g, ReduceOp::kSum);
    }
  } else {
    // Units with gradients not reduced yet (a member unused in some pass, or no pass reduced them).
    std::vector<Param>& params = model_->params();
    for (auto& u : units_) {
      const bool local = std::any_of(u->params.begin(), u->params.end(),
                                     [&](size_t k) { return params[k].value.grad().defined(); });
      if (local || (!u->grad_shard.defined() && !u->reduce)) StartReduce(*u);
    }
    for (auto& u : units_) FinishReduce(*u);
    in_flight_.clear();
    status = reduce_status_;
    reduce_status_ = absl::OkStatus();
    // The same owned range of wte on both stages (a unit of its own): sum the two.
    if (status.ok() && tied_) status = tied_->AllReduce(units_[tied_unit_]->grad_shard, ReduceOp::kSum);
  }
  sync_ = false;
  Sample();
  return status;
}

absl::StatusOr<double> ZeroOptimizer::GradNorm() {
  auto sq = GradSquaredSum();
  if (!sq.ok()) return sq.status();
  return std::sqrt(*sq);
}

absl::StatusOr<double> ZeroOptimizer::GradSquaredSum(const std::vector<std::string>& skip) {
  at::NoGradGuard no_grad;
  std::vector<Param>& params = model_->params();
  // Full gradients, as unsharded training.
  if (buckets_ && !expert_buckets_) return GradSquaredSumOverTp(params, tp_.get(), skip);
  if (buckets_) {
    // The experts' part differs between the ranks of the ep group: summed over it.
    std::vector<std::string> skip_experts = skip, skip_rest = skip;
    for (const Param& p : params) (p.expert ? skip_experts : skip_rest).push_back(p.name);
    auto rest = GradSquaredSumOverTp(params, tp_.get(), skip_experts);
    if (!rest.ok()) return rest.status();
    auto experts = GradSquaredSumOverTp(params, tp_.get(), skip_rest);
    if (!experts.ok()) return experts.status();
    at::Tensor sum = at::full({1}, *experts, at::TensorOptions().dtype(at::kDouble).device(device_));
    if (absl::Status s = ep_->AllReduce(sum, ReduceOp::kSum); !s.ok()) return s;
    return *rest + sum.item<double>();
  }
  // [replicated over tp, split over tp] sums of squares of the owned pieces, in double; a tensor
  // partitioned over some tp ranks and copied over the others counts 1/copies on each. The experts'
  // units (expert parallelism) apart: sharded over their own replicas and different on each ep rank.
  at::Tensor sums = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(device_));
  at::Tensor expert_sums = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(device_));
  for (auto& u : units_) {
    for (size_t j = 0; j < u->params.size(); ++j) {
      const Param& p = params[u->params[j]];
      const auto [a, b] = u->Owned(j);
      if (a >= b || std::find(skip.begin(), skip.end(), p.name) != skip.end()) continue;
      at::Tensor sq = u->grad_shard.narrow(0, a - u->begin, b - a).to(at::kFloat).norm().to(at::kDouble).square();
      at::Tensor& into = u->expert ? expert_sums : sums;
      if (p.split == TpSplit::kReplicated) {
        into[0] += sq;
      } else {
        const int copies = ReplicasInTp(p, tp_->size());
        into[1] += copies == 1 ? sq : sq / copies;
      }
    }
  }
  if (partitioned() && dp_->size() > 1) {
    if (absl::Status s = dp_->AllReduce(sums, ReduceOp::kSum); !s.ok()) return s;
  }
  if (ep_) {
    if (partitioned() && expert_dp_->size() > 1) {
      if (absl::Status s = expert_dp_->AllReduce(expert_sums, ReduceOp::kSum); !s.ok()) return s;
    }
    if (absl::Status s = ep_->AllReduce(expert_sums, ReduceOp::kSum); !s.ok()) return s;
    sums += expert_sums;
  }
  at::Tensor split = sums.narrow(0, 1, 1).clone();
  if (tp_->size() > 1) {
    if (absl::Status s = tp_->AllReduce(split, ReduceOp::kSum); !s.ok()) return s;
  }
  return sums[0].item<double>() + split.item<double>();
}

void ZeroOptimizer::StartGather(Unit& u) {
  if (u.gathered || u.gather) return;
  AllocateStorage(u.flat, static_cast<size_t>(u.shard * u.shards * u.flat.element_size()));
  if (u.shards == 1) {
    u.flat_alias.copy_(u.param_shard);
    u.gather = DoneWork(absl::OkStatus());
  } else {
    u.gather = u.group->AllGatherAsync(u.param_shard, u.flat_alias);
  }
  Sample();
}

void ZeroOptimizer::Acquire(Unit& u) {
  StartGather(u);
  if (u.gather) {
    absl::Status s = u.gather->Wait();
    u.gather.reset();
    ThrowIfError(s);  // Inside forward/backward: becomes an error at the trainer's boundary.
  }
  u.gathered = true;
}

void ZeroOptimizer::Release(Unit& u) {
  if (held_) return;  // HoldGathered: every unit stays until the hold ends.
  if (u.gather) {
    u.gather->Wait().IgnoreError();
    u.gather.reset();
  }
  FreeStorage(u.flat);
  u.gathered = false;
}

void ZeroOptimizer::PreForward(int m, bool recomputation) {
  if (options_.stage != Stage::kParameters) return;
  // Counted only for a forward whose backward will release the unit (not an evaluation's).
  const bool backward_follows = at::GradMode::is_enabled();
  at::NoGradGuard no_grad;
  for (size_t u : of_model_unit_[m]) {
    if (m == 0 && !recomputation && backward_follows) ++units_[u]->pending;
    Acquire(*units_[u]);
  }
  if (!recomputation && m + 1 < static_cast<int>(of_model_unit_.size())) {
    for (size_t u : of_model_unit_[m + 1]) StartGather(*units_[u]);
  }
}

at::Tensor ZeroOptimizer::PostForward(int m, at::Tensor output) {
  // Unit 0 is used again by the head; it is freed when its gradients are complete. A recomputation
  // inside backward calls no PostForward: its unit stays for the backward that follows.
  if (options_.stage != Stage::kParameters || m == 0) return output;
  if (at::GradMode::is_enabled() && output.requires_grad()) {
    output.register_hook([this, m](const at::Tensor& grad) {
      at::NoGradGuard no_grad;
      for (size_t u : of_model_unit_[m]) Acquire(*units_[u]);
      if (m - 1 >= 1) {
        for (size_t u : of_model_unit_[m - 1]) StartGather(*units_[u]);
      }
      return grad;
    });
  }
  for (size_t u : of_model_unit_[m]) Release(*units_[u]);
  return output;
}

int64_t ZeroOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& u : units_) n += Bytes(u->exp_avg) + Bytes(u->exp_avg_sq) + (u->master_is_param ? 0 : Bytes(u->master));
  return n;
}

int64_t ZeroOptimizer::ModelStateBytes() const {
  int64_t n = state_bytes();
  for (const auto& u : units_) {
    n += static_cast<int64_t>(u->flat.storage().nbytes()) + Bytes(u->param_shard) + Bytes(u->grad_shard) +
         Bytes(u->grad_flat) + Bytes(u->incoming);
  }
  for (const Param& p : model_->params()) n += Bytes(p.value.grad());
  return n;
}

void ZeroOptimizer::Sample() { peak_bytes_ = std::max(peak_bytes_, ModelStateBytes()); }

}  // namespace tessera::parallel
