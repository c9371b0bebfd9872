// Objective: what one micro-batch's loss is, given the model's prediction of each of its targets —
// written once, for every layout. A new objective (DPO, a reward model's, GRPO's) is a class here and
// nothing else: the Decoder's head calls it wherever the loss is computed (one process; a pipeline's
// last stage; every rank of a tp group, after the vocabulary-parallel cross-entropy made each target's
// loss whole; each sequence-parallel rank and each grid rank for its own part of the micro-batch), and
// the Trainer weighs the result like any micro-batch's loss (Trainer::LossWeight) in every layout.
//
// Contract: Loss() sees this rank's part of one micro-batch only, so an objective must be an average
// over its parts — parts of equal size (samples split over a grid's sample axes, sequence blocks
// over sp) average, micro-batches average, and the mean over the parts is the objective of the whole
// (true of any mean over positions of a per-target function). An objective whose loss is not such a
// mean (DPO's: a function of each sample's summed log-probability; a reward model's: of each pair's
// scores) makes each sample whole first with TargetLosses::WholeSamples — over sequence blocks; a
// grid splits a micro-batch's samples, not a sample (its chunks are averaged like any mean). Thread safety: Loss() is const
// but may add to the objective's metrics (TakeMetrics): one such objective per Trainer; the default
// may be shared.
#ifndef TESSERA_PARALLEL_OBJECTIVES_OBJECTIVE_H_
#define TESSERA_PARALLEL_OBJECTIVES_OBJECTIVE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace tessera::parallel {

// What the model predicted for this rank's part of a micro-batch of `samples` × `positions` targets.
struct TargetLosses {
  // −log p(target) of each target, fp32, differentiable: [samples · positions] in sample-major order,
  // or only the targets `rows` selects.
  at::Tensor nll;
  // Undefined: every target. Else [N] int64, the indices into [samples · positions] of nll's entries
  // (the targets that reach a loss: Decoder::loss_rows()); the others' loss is 0.
  at::Tensor rows;
  // A reward model's (ModelConfig::score_head; nll then undefined): [N] fp32, differentiable, the
  // score head's output at the position of each of `rows` (defined then), in their order.
  at::Tensor scores;
  // Undefined: every target is trained. Else, shaped as nll, true where the target is trained (SFT
  // data: formats/data/token_dataset.h), and each trained target counts `target_weight` times.
  at::Tensor trained;
  double target_weight = 1;
  // Undefined, or what the Trainer gave for each of the part's samples (Decoder::set_sample_data):
  // [samples] or [samples, k], fp64 (DPO: the reference's log-probability of each completion).
  at::Tensor sample_data;
  // The forward pass's: nll (or rows) index [samples · positions].
  int64_t samples = 0;
  int64_t positions = 0;
  // How many targets the part has: samples · positions, or more when the forward left out the
  // positions after the batch's last trained target (Decoder::Loss; they reach no loss).
  int64_t targets = 0;
  // Null when each sample's positions are all in this part. Else (sequence parallelism) the sum of a
  // per-sample tensor over the parts that split the samples' positions — see WholeSamples.
  std::function<at::Tensor(const at::Tensor&)> sum_over_sample_split;

  // `per_sample` ([samples], fp32 or fp64; this part's contribution to each sample, e.g. its targets'
  // summed log-probabilities) summed over every part of the samples, so that each part holds the
  // whole samples' values and computes the objective of the whole micro-batch. Differentiable: each
  // part's contribution gets the gradient times the number of parts — the Trainer weighs each part's
  // loss as a fraction of the micro-batch (Trainer::LossWeight), and here every part computes all of it.
  at::Tensor WholeSamples(const at::Tensor& per_sample) const {
    return sum_over_sample_split ? sum_over_sample_split(per_sample) : per_sample;
  }
};

class Objective {
 public:
  virtual ~Objective() = default;
  // The name a spec or a log gives it.
  virtual const char* name() const = 0;
  // The loss of this part of the micro-batch: a scalar, fp32, differentiable in `t.nll` (a reward
  // model's: in `t.scores`).
  virtual at::Tensor Loss(const TargetLosses& t) const = 0;
  // What the step log reports besides the loss (DPO's rewards_chosen, ...), by name; and their sums
  // over the Loss() calls since the last take, each call adding its own mean over its part (the
  // Trainer averages them over micro-batches and ranks like the loss), set back to 0.
  virtual std::vector<std::string> metric_names() const { return {}; }
  virtual std::vector<double> TakeMetrics() const { return {}; }
};

// The default: the mean cross-entropy over every target of the part — with SFT data, each trained
// target's weighted, the untrained adding 0 (so that the step's loss is Σ over the global batch's
// trained targets / their number: Trainer::WeighTrainedTargets).
class CrossEntropy final : public Objective {
 public:
  const char* name() const override { return "cross_entropy"; }
  at::Tensor Loss(const TargetLosses& t) const override;
};

// The shared default objective.
std::shared_ptr<const Objective> DefaultObjective();

// A scoring pass's record (SequenceLogps, SequenceScores): values[i] into (*table)[where[i]] (any
// shapes of as many elements; `where` fp64 holding integers); an index outside the table is a
// padding sample's, not recorded.
void RecordSampleValues(const at::Tensor& where, const at::Tensor& values, std::vector<double>* table);

// An objective's metrics (Objective::TakeMetrics): each Loss() call adds its row of means over its
// part; Take() returns the sums and sets them back to 0. Not thread-safe (one per Trainer).
class MetricSums {
 public:
  explicit MetricSums(size_t n) : sums_(n, 0.0) {}
  // row: [n] of any floating type, on any device.
  void Add(const at::Tensor& row);
  std::vector<double> Take();

 private:
  std::vector<double> sums_;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_OBJECTIVES_OBJECTIVE_H_
