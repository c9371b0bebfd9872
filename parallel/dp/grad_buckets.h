// GradBuckets: data-parallel gradient sums that overlap the backward pass.
//
// Every parameter's .grad is made a view into one flat buffer per bucket (parameters assigned to
// buckets in reverse order, the order backward produces their gradients). A post-hook on each
// parameter's gradient accumulator counts it ready; when all of a bucket's parameters are ready in a
// synchronising backward pass, its sum over dp starts asynchronously while backward continues.
// Finish() waits for all. Gradients accumulate in place across non-synchronising passes. A sum, not a
// mean: the caller weights each rank's loss by its share of the step (zero_optimizer.h).
//
// At dp 1 there is nothing to sum and no bucket: .grad is autograd's own (the first backward of a step
// hands its gradient over, later ones add to it) and ZeroGrad unsets it, so a parameter no pass used
// has no .grad. Bucket views there would cost a zero-fill and an add per parameter and step (≈ 3.5% of
// a GPT 1.3B step on an H200: bench/RESULTS.md, "third device session").
#ifndef TESSERA_PARALLEL_DP_GRAD_BUCKETS_H_
#define TESSERA_PARALLEL_DP_GRAD_BUCKETS_H_

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include "absl/status/status.h"
#include "parallel/comm/communicator.h"

namespace tessera::parallel {

struct GradBucketsOptions {
  int64_t bucket_bytes = 25 << 20;  // Upper bound per bucket (a larger tensor gets its own bucket).
};

class GradBuckets {
 public:
  // `params` must be leaf tensors that require grad; their .grad is replaced by bucket views.
  GradBuckets(std::vector<at::Tensor> params, std::shared_ptr<Communicator> dp, GradBucketsOptions options);
  ~GradBuckets();

  // Zeros every gradient (the buffers keep their storage); at dp 1 unsets them.
  void ZeroGrad();
  // Whether the coming backward pass is the last of the step (its gradients get summed over dp).
  void SetSyncThisPass(bool sync);
  // Starts any bucket not yet started (parameters unused this pass) and waits for all of them.
  absl::Status Finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets whose reduction started from inside backward in the last synchronising pass.
  int started_during_backward() const { return started_during_backward_; }

 private:
  struct Bucket {
    at::Tensor flat;
    std::vector<size_t> members;
    size_t ready = 0;
    std::unique_ptr<CommWork> work;
  };
  void MarkReady(size_t param_index);
  void Start(Bucket& bucket);

  std::vector<at::Tensor> params_;
  // Autograd keeps only weak references to gradient accumulators; holding them keeps our hooks.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::shared_ptr<Communicator> dp_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  bool sync_ = false;
  bool in_finish_ = false;
  int started_during_backward_ = 0;
};

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_DP_GRAD_BUCKETS_H_
