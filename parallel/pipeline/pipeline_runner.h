// PipelineRunner: one pipeline rank's forward and backward passes of one step, in the order of a
// schedule (schedule.h), with activations and their gradients sent point to point over the pp group.
//
// The rank holds the model chunks StageLayout::ChunksOf(pp rank) in a partial Decoder (ModelPart of those
// layers). A chunk's forward receives its input activation [micro_batch, seq_len, hidden] from the
// previous virtual stage (or embeds the tokens), runs its blocks, and sends the output on (or computes
// the loss); its backward receives the output's gradient (or starts from the loss) and sends the
// input's gradient back. Sends do not wait for the receiver; receives wait. Parameter gradients
// accumulate in .grad across micro-batches as in the unpipelined loop.
//
// A Mixture of Experts (PipelineOptions::experts > 0): the balancing loss is joint over the sparse
// blocks of every stage for one micro-batch, so each forward sends, with its activation, the router
// statistics accumulated so far along the virtual stages ([counts E, probability sums E, rows], fp64);
// the head's chunk has the micro-batch's totals (and its aux_loss), and each backward sends them back
// with the gradient, so that every chunk's sparse blocks carry the balancing loss's gradient of the
// whole micro-batch (parallel/layers/sparse_mlp.h).
//
// The virtual stages sit on the ranks as the layout places them (StageLayout::RankOfStage): zbv's V
// sends chunk 0's activations down the ranks and chunk 1's back up, and its last rank passes from
// chunk 0 to chunk 1 in memory.
//
// A zero-bubble schedule (actions with PipeOp::kWeight) splits every backward into B, which sends the
// input's gradient back as early as possible, and W, which accumulates the parameters' gradients of
// that micro-batch chunk later (parallel/layers/weight_grad_store.h): the weight-gradient GEMMs of
// every linear are computed in W; the other parameters' gradients (norms, embeddings, biases) are
// computed in B and accumulated in W, so that each parameter's gradient accumulator fires once per
// micro-batch and chunk, in W. The last micro-batch's W's of all the rank's chunks run together, as
// the rank's last actions, so that every parameter accumulates once while the reduction is armed.
//
// It is the Trainer's one step path: without pipeline parallelism the model is the one chunk of a
// one-stage 1F1B pipeline (each micro-batch's forward, Decoder::Loss, then its backward), so a loss
// or objective runs the same code with and without pp (tests/objective_test.cc).
//
// Every rank of the pp group calls RunStep once per step with the same micro-batch count. Thread
// safety: none.
#ifndef TESSERA_PARALLEL_PIPELINE_PIPELINE_RUNNER_H_
#define TESSERA_PARALLEL_PIPELINE_PIPELINE_RUNNER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "layout/schedule.h"
#include "layout/stage_layout.h"
#include "parallel/comm/communicator.h"
#include "parallel/layers/weight_grad_store.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

// The pipeline's plan comes from the layout library (layout/schedule.h, layout/stage_layout.h).
using layout::MakeSchedule;
using layout::ModelChunk;
using layout::PipeAction;
using layout::PipeCosts;
using layout::PipeOp;
using layout::PipeSchedule;
using layout::StageLayout;

// The parts of the GPT that pipeline rank `rank` holds under `layout`: its chunks' blocks, the
// embeddings on the rank with virtual stage 0, the head on the rank with the last.
formats::model::ModelPart PartOfRank(const StageLayout& layout, int rank);

struct PipelineOptions {
  PipeSchedule schedule = PipeSchedule::kOneFOneB;
  int micro_batches = 1;       // Per step (the gradient accumulation count).
  int64_t micro_batch = 1;     // Samples per micro-batch given to this rank.
  int64_t seq_len = 1;         // Positions per sample on this rank (seq_len / sp).
  at::ScalarType activation_dtype = at::kFloat;
  int experts = 0;             // A Mixture of Experts' experts per sparse block (0: dense).
  double aux_loss_coef = 0;    // The balancing loss's weight in the objective.
  // Sequence parallelism (a Mixture of Experts): the group whose sequence blocks make up one
  // micro-batch; the head's chunk sums the statistics over it. Null: none.
  std::shared_ptr<Communicator> sp;
  // The seed of micro-batch a's random draws in the current step: router jitter's
  // (RouterStats::noise_seed) and LoRA dropout's (Decoder::set_dropout_seed); null: 0.
  std::function<uint64_t(int)> noise_seed;
  // Packed sequences: the positions [micro_batch, seq_len] of micro-batch a of the current step's
  // inputs (Decoder::set_positions), read by every stage; null: none.
  std::function<absl::StatusOr<at::Tensor>(int)> positions;
  // What the objective reads per sample of micro-batch a (Decoder::set_sample_data: DPO's reference
  // log-probabilities), read by the head's chunk just before its loss; null: none.
  std::function<absl::StatusOr<at::Tensor>(int)> sample_data;
  // A Mixture of Experts in training: which input positions [micro_batch, seq_len] of micro-batch a
  // (this rank's, as batch(a)'s) the balancing statistics count, 1 or 0 (RouterStats::counted: a
  // preference pair's padding is left out), read by every stage; null: every position.
  std::function<absl::StatusOr<at::Tensor>(int)> counted;
};

class PipelineRunner {
 public:
  // `model` holds this rank's chunks of `layout`; `pp` is this rank's pipeline group. Fails when the
  // schedule is impossible (message names the spec field).
  static absl::StatusOr<std::unique_ptr<PipelineRunner>> Create(Decoder* model, const StageLayout& layout,
                                                                std::shared_ptr<Communicator> pp,
                                                                const PipelineOptions& options);

  // Runs the step's forwards and backwards. `batch(a)` returns micro-batch a's tokens [micro_batch,
  // seq_len + 1] (inputs and their next-token targets) on the model's device (read only by the stages
  // that embed or compute the loss). Each micro-batch's backward starts from loss · loss_weight (the
  // Trainer's: the fp16 loss scale over the step's micro-batches in the whole job, so that the
  // data-parallel reductions sum) and the balancing loss's from aux_loss_coef · loss_weight · sp.
  // `before_last_backward` runs just before this rank's last pass that accumulates gradients: its last
  // backward, or its last micro-batch's W's. Returns the sum of the micro-batch losses on the rank
  // holding the head, 0 elsewhere.
  absl::StatusOr<double> RunStep(const std::function<absl::StatusOr<at::Tensor>(int)>& batch, double loss_weight,
                                 const std::function<void()>& before_last_backward);

  // Forward passes only (an evaluation; the caller disables autograd): micro-batches 0 .. m-1 of
  // PipelineOptions::micro_batches, each through this rank's chunks in order, activations sent on
  // as in RunStep and nothing kept for a backward. Every rank of the pp group calls it together.
  // Returns the sum of the micro-batch losses on the rank holding the head, 0 elsewhere.
  // `positions`: packed sequences' positions of micro-batch a (as PipelineOptions::positions, for
  // this data); null: none. `sample_data`: as PipelineOptions::sample_data, for this pass; null: none.
  absl::StatusOr<double> RunForwardOnly(const std::function<absl::StatusOr<at::Tensor>(int)>& batch,
                                        const std::function<absl::StatusOr<at::Tensor>(int)>& positions = nullptr,
                                        const std::function<absl::StatusOr<at::Tensor>(int)>& sample_data = nullptr);

  // A Mixture of Experts, of the last RunStep: the sum of the micro-batches' balancing losses on the
  // rank holding the head (0 elsewhere), and the tokens per expert of each sparse block this rank holds
  // summed over the micro-batches, [model layers, E] fp64 (zero rows for blocks held elsewhere or
  // dense; undefined for a dense model).
  double aux_sum() const { return aux_sum_; }
  const at::Tensor& expert_load() const { return expert_load_; }

  // The schedule this rank runs.
  const std::vector<PipeAction>& actions() const { return actions_; }
  // The most micro-batch chunks whose activations were alive at once in the last step (forwarded, not
  // yet through their backward or B).
  int peak_in_flight() const { return peak_in_flight_; }
  // A split schedule: the most bytes the B's of the last step kept for their W's at once
  // (WeightGradStore::held_bytes summed over the pending stores); 0 otherwise.
  int64_t weight_pending_peak_bytes() const { return pending_peak_bytes_; }
  // Bytes sent point to point by this rank in the last step (activations and their gradients).
  int64_t bytes_sent() const { return bytes_sent_; }
  // Seconds this rank waited for activations or gradients in the last step (its share of the bubble).
  double wait_seconds() const { return wait_seconds_; }
  // Seconds the last RunStep took on this rank (its passes and its waits).
  double step_seconds() const { return step_seconds_; }
  // This rank's mean seconds per forward, backward (B when split) and W of the last RunStep, waits
  // for activations and gradients excluded (0 for an action it did not run).
  const PipeCosts& measured_costs() const { return measured_; }
  // A zero-bubble schedule made again from `costs` (MakeZeroBubbleSchedule); other schedules stay.
  // Every rank of the pp group must pass the same costs, between steps.
  absl::Status Reschedule(const PipeCosts& costs);

 private:
  PipelineRunner(Decoder* model, std::vector<ModelChunk> chunks, std::vector<int> rank_of_stage,
                 std::shared_ptr<Communicator> pp, const PipelineOptions& options, bool split)
      : model_(model), chunks_(std::move(chunks)), rank_of_stage_(std::move(rank_of_stage)), pp_(std::move(pp)),
        options_(options), split_(split) {}
  // Takes `actions` as this rank's schedule; a split one must end with the W's of the last
  // micro-batch, one per chunk (InternalError otherwise).
  absl::Status SetActions(std::vector<PipeAction> actions);
  struct Stash {
    at::Tensor input;   // Received activation (requires grad); undefined for the embedding chunk.
    at::Tensor output;  // Sent activation, or the loss on the head chunk.
    c10::intrusive_ptr<RouterStats> stats;  // A Mixture of Experts: this chunk's sparse blocks' statistics.
    at::Tensor totals;  // The head's chunk: the micro-batch's statistics over every stage.
    at::Tensor positions;  // Packed sequences: the micro-batch's (recomputed blocks use them).
    std::optional<uint64_t> dropout_seed;  // Training: the micro-batch's (Decoder::set_dropout_seed).
  };
  // `keep`: stash the activations for the micro-batch's backward (training).
  // `positions`, `sample_data`: as PipelineOptions' (null: none).
  absl::Status Forward(const PipeAction& a, const std::function<absl::StatusOr<at::Tensor>(int)>& batch,
                       const std::function<absl::StatusOr<at::Tensor>(int)>& positions,
                       const std::function<absl::StatusOr<at::Tensor>(int)>& sample_data, double* loss_sum,
                       bool keep = true);
  // Waits for every send (their tensors may go then) and drops the stash; the first error wins.
  absl::Status Finish(absl::Status status);
  // The whole backward, or its B half when the schedule splits it (split_).
  absl::Status Backward(const PipeAction& a, double loss_weight);
  // W: the parameters' gradients of micro-batch chunks whose B has run (their WeightGradStores),
  // accumulated together in one pass.
  absl::Status Weight(const std::vector<PipeAction>& together);
  // Distinct per (message kind, micro-batch, receiving virtual stage) within a step.
  enum class Kind { kActivation = 0, kGradient = 1, kStatsForward = 2, kStatsBackward = 3 };
  int Tag(Kind kind, int micro_batch, int virtual_stage) const;
  // Sends `payload` for `virtual_stage` to the rank that holds it without waiting (this rank: kept
  // for its own receive, as zbv's turn from chunk 0 to chunk 1 on the last rank).
  void SendTo(const at::Tensor& payload, Kind kind, int micro_batch, int virtual_stage);
  // Receives what `from_stage` sent for `virtual_stage` into `into` (waits; activations' and
  // gradients' waits add to wait_seconds_).
  absl::Status RecvFrom(at::Tensor& into, Kind kind, int micro_batch, int virtual_stage, int from_stage);
  // A Mixture of Experts' forward: the statistics of the virtual stages before this chunk (received, or
  // zeros on the embedding chunk) plus this chunk's; sent on, or kept as the totals on the head chunk.
  absl::Status ForwardStats(const PipeAction& a, Stash& stash);
  // Its backward: the totals (kept, or received from the next virtual stage) into this chunk's
  // statistics before its backward, with the loss's gradient scale; `send_on` after it.
  absl::Status BackwardStats(const PipeAction& a, Stash& stash, double loss_weight, bool* send_on_totals,
                             at::Tensor* totals);
  at::Tensor EmptyActivation() const;

  Decoder* model_;
  std::vector<ModelChunk> chunks_;
  std::vector<int> rank_of_stage_;  // The pp rank of every virtual stage.
  std::shared_ptr<Communicator> pp_;
  PipelineOptions options_;
  std::vector<PipeAction> actions_;
  size_t final_weights_ = 0;  // Split: the index of the first of the last micro-batch's W's.
  bool split_;  // The schedule has W actions: every backward is split into B and W.
  std::map<int, at::Tensor> local_;  // Sent to this rank itself, by tag, not yet received.
  std::map<std::pair<int, int>, Stash> stash_;  // By (micro-batch, chunk).
  std::map<std::pair<int, int>, std::unique_ptr<WeightGradStore>> stores_;  // B run, W not yet.
  std::map<std::pair<int, int>, int64_t> store_bytes_;  // Their held_bytes() after B.
  int64_t pending_bytes_ = 0;
  int64_t pending_peak_bytes_ = 0;
  std::vector<std::unique_ptr<CommWork>> sends_;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
  int64_t bytes_sent_ = 0;
  double wait_seconds_ = 0;
  double step_seconds_ = 0;
  PipeCosts measured_;
  double aux_sum_ = 0;
  at::Tensor expert_load_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_PIPELINE_PIPELINE_RUNNER_H_
