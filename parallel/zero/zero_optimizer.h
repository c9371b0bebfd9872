// ZeroOptimizer: AdamW with zero-redundancy sharding over the data-parallel group, fp32 master weights
// for low-precision parameters, and optimizer state optionally held in host memory.
//
// The model's parameters are grouped in units (Decoder::Units(): the embeddings + final norm, then one
// unit per block). Each unit's parameters become views of one flat buffer of N elements, padded to
// S·dp with S = ⌈N/dp⌉; dp rank r owns elements [r·S, (r+1)·S) of every unit (with stage 0 every rank
// owns all of it). For its owned elements a rank keeps, in fp32, the master weights and Adam's m and v;
// stages 1–3 (sharded) also keep the reduced gradients of the owned elements (in the parameter dtype).
//
// Gradients are summed over dp, never averaged: the caller weights each micro-batch's loss by its
// share of the whole job's step (Trainer::LossWeight), so that a gradient has one magnitude in every
// layout at every point — what fp16's overflow test and loss scale need to behave as in one process.
//
//   stage 0  nothing sharded (plain data parallelism; the Trainer's only optimizer, so also every
//            fp32 run): gradients all-reduced (bucketed, overlapping backward); fp32 parameters are
//            their own master weights
//   stage 1  optimizer state sharded; full gradients accumulate locally over the step's backward
//            passes, and in the last one each unit's are reduce-scattered as soon as backward produced
//            them all (the same communication volume as plain dp's all-reduce, and the same sums),
//            then freed
//   stage 2  also gradients: each unit's are reduce-scattered in every backward pass and summed into
//            the owned shard, so full gradients never outlive one unit's backward (accum× the
//            reduce-scatter traffic); with reduce_every_pass false, as stage 1 (one reduction,
//            bit-identical to plain dp, full local gradients kept between passes)
//   stage 3  also parameters: a unit's flat buffer holds memory only from just before its forward
//            (the next unit is prefetched) to the end of its forward, and again from the start of its
//            backward to the end; unit 0 (embeddings, used at both ends) from its first use to the end
//            of the last backward of the forwards that used it (pipeline stages run several forwards
//            before their backwards)
//
// Expert parallelism (a Mixture of Experts with ep > 1): the experts' parameters (Param::expert) differ
// between the ranks of the ep group, so they form units of their own (one per block) whose gradients
// are reduced, and whose state is sharded, over their own replicas (`expert_dp`, dp/ep × sp ranks): each
// rank's expert gradient already sums the contributions of its ep group's tokens, so the sum over the
// replicas covers every rank's (stage 0: in buckets of their own). The gradient norm sums their squares
// over the ep group.
//
// Pipeline stages: the model may be a ModelPart. The first and the last stage both hold the tied
// embedding wte; given their group (`tied`), wte becomes a unit of its own (the same flat size, so the
// same owned range, on both stages) and its reduced gradient is summed over that group.
//
// The update is elementwise, so for fp32 stages 0–2 the weights equal those of unsharded AdamW bit
// for bit. After the update each unit's new parameters are all-gathered while the next unit updates.
// With offload and parameters on an accelerator, a unit's gradients travel to the host and its new
// parameters back while the host updates its neighbours (HostStaging).
//
// Use per step: ZeroGrad(); per micro-batch SetSyncThisPass(last) and backward; ReduceGradients();
// GradNorm(); ScaleGradients(); Step(). Every dp rank makes the same calls in the same order.
// Thread safety: none; the autograd hooks run on the thread that runs backward.
#ifndef TESSERA_PARALLEL_ZERO_ZERO_OPTIMIZER_H_
#define TESSERA_PARALLEL_ZERO_ZERO_OPTIMIZER_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu_adam.h"
#include "layout/modes.h"
#include "parallel/comm/communicator.h"
#include "parallel/dp/grad_buckets.h"
#include "parallel/models/decoder.h"
#include "parallel/optim/adamw.h"
#include "parallel/zero/host_staging.h"

namespace tessera::parallel {

struct ZeroOptions {
  layout::ZeroStage stage = layout::ZeroStage::kOptimizerState;  // 0, 1, 2 or 3 (see above).
  at::ScalarType param_dtype = at::kFloat;   // The model's parameters: fp32, bf16 or fp16.
  bool offload = false;                      // Master weights and moments in host memory (pinned for
                                             // CUDA parameters); the update runs on the host.
  AdamWOptions adam;
  int64_t bucket_bytes = 25 << 20;           // Stage 0 (and 1 at dp 1): gradient all-reduce buckets.
  bool reduce_every_pass = true;             // Stages 2–3 with accumulation: see above.
  bool fused = true;                         // Update on an accelerator: one multi-tensor AdamW launch
                                             // per unit and weight-decay group (kernels/fused_kernels.h)
                                             // instead of ATen's ops per tensor.
};

class ZeroOptimizer final : public UnitHooks {
 public:
  // Takes over `model`'s parameters (which must be fp32 and hold the starting weights: they become the
  // master weights) and installs itself as the model's unit hooks. `dp` and `tp` are this rank's groups.
  // `dp` is the group over which gradients are summed and state is sharded (data × sequence parallel
  // ranks). `tied`, when not null, is the group of this rank and the other holder of wte.weight
  // (pipeline first and last stages with the same dp, sp and tp coordinates).
  static absl::StatusOr<std::unique_ptr<ZeroOptimizer>> Create(Decoder* model, std::shared_ptr<Communicator> dp,
                                                               std::shared_ptr<Communicator> tp,
                                                               const ZeroOptions& options,
                                                               std::shared_ptr<Communicator> tied = nullptr,
                                                               std::shared_ptr<Communicator> expert_dp = nullptr,
                                                               std::shared_ptr<Communicator> ep = nullptr);
  ~ZeroOptimizer() override;

  // Before the first backward of a step: drops the previous step's gradients.
  void ZeroGrad();
  // Stage 3: frees every unit a forward pass without autograd (an evaluation) left gathered; no-op
  // otherwise. Units a training forward still needs for its backward stay.
  void ReleaseGatheredUnits();
  // Stage 3: `hold` true gathers every unit and keeps them gathered (no forward frees one) until
  // HoldGathered(false) frees them all — a generation phase's many forward passes without autograd
  // (GRPO's sampler) gather the parameters once. No-op at stages 0–2. A collective over dp.
  absl::Status HoldGathered(bool hold);
  // Whether the coming backward is the last of the step (its gradients get reduced).
  void SetSyncThisPass(bool sync);
  // After the last backward: each rank's owned gradients, summed over dp.
  absl::Status ReduceGradients();
  // Global L2 norm of the reduced gradients over the whole model (collective over dp and tp). Not
  // finite when some gradient overflowed.
  absl::StatusOr<double> GradNorm();
  // The squared norm of this rank's part of the model: the sum over dp and tp, each tensor counted once
  // however many tp ranks hold it, leaving out the parameters named in `skip`.
  absl::StatusOr<double> GradSquaredSum(const std::vector<std::string>& skip = {});
  // Multiplies the reduced gradients by `factor` (gradient clipping and loss-scale removal).
  void ScaleGradients(double factor);
  // AdamW on the owned elements (`step` counts from 1), then the new parameters reach every rank
  // (stages 1–2: all-gathered; stage 3: gathered when next used).
  absl::Status Step(double lr, int64_t step);

  enum class What { kParams, kGrads, kExpAvg, kExpAvgSq };
  // This rank's tp-local part of every parameter (model order, fp32, on the CPU): the master
  // weights, the reduced gradients, or the moments. A collective over dp.
  absl::Status Gather(What what, std::vector<at::Tensor>* out);
  // Keeps the owned elements of full tp-local m and v per parameter (model order).
  absl::Status LoadState(const std::vector<at::Tensor>& exp_avg, const std::vector<at::Tensor>& exp_avg_sq);
  // This rank's owned pieces of m and v, as tensors "exp_avg.NAME", "exp_avg_sq.NAME" (1-D, fp32) and
  // "range.NAME" (int64 [begin, end): the elements of the flattened tp-local tensor they cover).
  std::map<std::string, at::Tensor> StateShard() const;

  // UnitHooks (stage 3 gathers and frees; otherwise nothing).
  void PreForward(int unit, bool recomputation) override;
  at::Tensor PostForward(int unit, at::Tensor output) override;

  layout::ZeroStage stage() const { return options_.stage; }
  bool partitioned() const { return options_.stage != layout::ZeroStage::kNone && dp_->size() > 1; }
  // Bytes of model states held now: parameters, gradients, master weights, moments (all devices).
  int64_t ModelStateBytes() const;
  // The most ModelStateBytes() was at the points it is sampled (gathers, gradient readiness, after
  // reduction and update); reset by ResetPeak().
  int64_t peak_model_state_bytes() const { return peak_bytes_; }
  void ResetPeak() { peak_bytes_ = ModelStateBytes(); }
  int64_t state_bytes() const;  // Master weights (when separate) and moments only.

 private:
  struct Unit;
  ZeroOptimizer(Decoder* model, std::shared_ptr<Communicator> dp, std::shared_ptr<Communicator> tp,
                const ZeroOptions& options, std::shared_ptr<Communicator> tied,
                std::shared_ptr<Communicator> expert_dp, std::shared_ptr<Communicator> ep);
  absl::Status Init();
  void MarkReady(size_t param_index);
  void StartReduce(Unit& u);
  // Waits for `u`'s reduction, adds it to the owned gradients and frees the full-size buffer; errors
  // are kept in reduce_status_.
  void FinishReduce(Unit& u);
  // Stage 3: starts gathering unit `u` unless it is gathered or on its way; Acquire also waits.
  void StartGather(Unit& u);
  void Acquire(Unit& u);
  void Release(Unit& u);
  void Sample();
  // Copies elements [begin, end) of unit `u`'s flattened gradients into `out` (converting).
  void CopyGrads(const Unit& u, int64_t begin, int64_t end, at::Tensor& out) const;
  // The reduced gradient of owned elements [a, b) of unit `u` (within member j), 1-D contiguous, in the
  // dtype and on the device where it was reduced (unscaled).
  at::Tensor RawOwnedGrad(const Unit& u, size_t j, int64_t a, int64_t b) const;
  // The reduced gradient of owned elements [a, b) of unit `u` (within member j), times the factor of
  // ScaleGradients, in fp32 on device `where` (contiguous).
  at::Tensor OwnedGrad(const Unit& u, size_t j, int64_t a, int64_t b, c10::Device where) const;
  // AdamW over unit `u`'s owned elements where the state lives (state_device_): the owned gradients
  // gathered into one fp32 buffer (times ScaleGradients' factor), then AdamW::UpdateAll.
  void UpdateOnStateDevice(Unit& u, const AdamW& adam, double lr, int64_t step);
  // Starts moving unit `u`'s owned gradients (as OwnedGrad) into staging slot `slot`.
  void StageDown(const Unit& u, int slot);

  Decoder* model_;
  std::shared_ptr<Communicator> dp_;
  std::shared_ptr<Communicator> tp_;
  std::shared_ptr<Communicator> tied_;   // Null unless the model's wte has a copy on another stage.
  ZeroOptions options_;
  kernels::Simd simd_;
  c10::Device device_{c10::kCPU};        // Of the parameters.
  c10::Device state_device_{c10::kCPU};  // Of master weights, moments and the update.
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::vector<size_t>> of_model_unit_;  // The units_ of each of the model's units (hooks).
  int tied_unit_ = -1;                   // The unit holding wte alone when tied_ is set.
  std::vector<size_t> unit_of_;          // Per parameter.
  std::vector<int64_t> offset_in_unit_;  // Per parameter.
  std::unique_ptr<GradBuckets> buckets_;  // Stage 0 (and 1 at dp 1).
  // Expert parallelism: the experts' replicas and the ep group (null without ep), and the experts'
  // gradient buckets (over expert_dp_; buckets_ then holds the other parameters).
  std::shared_ptr<Communicator> expert_dp_;
  std::shared_ptr<Communicator> ep_;
  std::unique_ptr<GradBuckets> expert_buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // Otherwise: hooks kept alive.
  static constexpr size_t kReductionsInFlight = 2;
  std::deque<Unit*> in_flight_;          // Without buckets_: reductions started, oldest first.
  absl::Status reduce_status_;
  std::unique_ptr<HostStaging> staging_;  // Offload with parameters on an accelerator (first Step).
  double grad_factor_ = 1.0;             // From ScaleGradients, applied as the update reads gradients.
  bool sync_ = false;
  bool held_ = false;  // HoldGathered.
  int64_t peak_bytes_ = 0;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_ZERO_ZERO_OPTIMIZER_H_
