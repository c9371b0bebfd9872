#include "parallel/dp/grad_buckets.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace tessera::parallel {

GradBuckets::GradBuckets(std::vector<at::Tensor> params, std::shared_ptr<Communicator> dp,
                         GradBucketsOptions options)
    : params_(std::move(params)), dp_(std::move(dp)), bucket_of_(params_.size()) {
  if (dp_->size() == 1) return;  // Nothing to sum: autograd's own gradients stay (the header).
  // Reverse order: backward produces the last layers' gradients first.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const int64_t b = params_[k].numel() * params_[k].element_size();
    if (groups.empty() || (bytes + b > options.bucket_bytes && !groups.back().empty())) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += b;
  }
  for (auto& members : groups) {
    Bucket bucket;
    int64_t numel = 0;
    for (size_t k : members) numel += params_[k].numel();
    bucket.flat = at::zeros({numel}, params_[members[0]].options().requires_grad(false));
    int64_t offset = 0;
    for (size_t k : members) {
      at::Tensor& p = params_[k];
      p.mutable_grad() = bucket.flat.narrow(0, offset, p.numel()).view(p.sizes());
      offset += p.numel();
      bucket_of_[k] = buckets_.size();
    }
    bucket.members = std::move(members);
    buckets_.push_back(std::move(bucket));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[k]);
    accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          MarkReady(k);
          return outputs;
        }));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradBuckets::~GradBuckets() {
  // The hooks capture `this`; the accumulators may outlive us only if the parameters do, and the
  // owner destroys parameters and buckets together. Pending work is waited for.
  for (Bucket& b : buckets_) {
    if (b.work) b.work->Wait().IgnoreError();
  }
}

void GradBuckets::ZeroGrad() {
  if (dp_->size() == 1) {
    for (at::Tensor& p : params_) p.mutable_grad() = at::Tensor();
    return;
  }
  for (Bucket& b : buckets_) b.flat.zero_();
}

void GradBuckets::SetSyncThisPass(bool sync) {
  sync_ = sync;
  if (sync) {
    started_during_backward_ = 0;
    for (Bucket& b : buckets_) b.ready = 0;
  }
}

void GradBuckets::MarkReady(size_t k) {
  if (!sync_ || dp_->size() == 1) return;
  Bucket& b = buckets_[bucket_of_[k]];
  if (++b.ready == b.members.size() && !b.work) {
    ++started_during_backward_;
    Start(b);
  }
}

void GradBuckets::Start(Bucket& b) { b.work = dp_->AllReduceAsync(b.flat, ReduceOp::kSum); }

absl::Status GradBuckets::Finish() {
  if (dp_->size() == 1) return absl::OkStatus();
  absl::Status status;
  for (Bucket& b : buckets_) {
    if (!b.work) Start(b);
  }
  for (Bucket& b : buckets_) {
    absl::Status s = b.work->Wait();
    if (status.ok() && !s.ok()) status = s;
    b.work.reset();
  }
  sync_ = false;
  return status;
}

}  // namespace tessera::parallel
