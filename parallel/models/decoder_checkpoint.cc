// Decoder's activation checkpointing: a block keeps only its input in forward and runs again inside
// backward (CheckpointedBlock, Recompute).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "kernels/autograd_pointer.h"
#include "parallel/layers/weight_grad_store.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Activation checkpointing of one block: forward keeps only the block's input; backward runs the
// block's forward again with autograd on and back-propagates through it (a reentrant backward, as
// torch.utils.checkpoint's reentrant mode). Parameter gradients accumulate into their .grad as usual;
// the block's communication (tp all-reduces) is repeated in the recomputation on every tp rank.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Decoder* model, int64_t block) {
    SavePointer(ctx, "model", model);
    ctx->saved_data["block"] = block;
    // The recomputation adds its sparse blocks' gradients to this forward pass's router statistics.
    if (model->router_stats()) ctx->saved_data["stats"] = c10::IValue::make_capsule(model->router_stats());
    if (model->loss_rows().defined()) ctx->saved_data["loss_rows"] = model->loss_rows();
    ctx->save_for_backward({x});
    at::NoGradGuard no_grad;
    return model->Block(x, static_cast<int>(block));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Decoder* model = LoadPointer<Decoder>(ctx, "model");
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      const int block = static_cast<int>(ctx->saved_data["block"].toInt());
      if (model->unit_hooks()) model->unit_hooks()->PreForward(model->UnitOfLayer(block), true);
      c10::intrusive_ptr<RouterStats> stats;
      if (auto it = ctx->saved_data.find("stats"); it != ctx->saved_data.end()) {
        stats = c10::intrusive_ptr<RouterStats>::reclaim_copy(
            dynamic_cast<RouterStats*>(it->second.toCapsule().get()));
      }
      at::Tensor rows;
      if (auto it = ctx->saved_data.find("loss_rows"); it != ctx->saved_data.end()) rows = it->second.toTensor();
      y = model->Recompute(x, block, std::move(stats), std::move(rows));
    }
    // B of a split backward (weight_grad_store.h): the parameters' gradients go to the store.
    if (WeightGradStore* store = WeightGradStore::current()) return {SplitBackward({y}, {grads[0]}, x, store), at::Tensor(), at::Tensor()};
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Decoder::CheckpointedBlock(const at::Tensor& x, int i) {
  // The function's output takes part in autograd only when an input does: with LoRA the first
  // block's input comes from the frozen embedding, so it is made an input that asks for a gradient
  // (computed and dropped) for the adapters inside the block to get theirs.
  // A split backward (weight_grad_store.h) asks autograd only for what reaches the chunk's input or
  // its parameters, which such an input does not: that block is not recomputed then.
  if (at::GradMode::is_enabled() && !x.requires_grad()) {
    if (WeightGradStore::splitting()) return Block(x, i);
    return CheckpointFn::apply(x.detach().requires_grad_(true), this, i);
  }
  return CheckpointFn::apply(x, this, i);
}

at::Tensor Decoder::Recompute(const at::Tensor& x, int i, c10::intrusive_ptr<RouterStats> stats,
                              at::Tensor loss_rows) {
  c10::intrusive_ptr<RouterStats> current = std::exchange(router_stats_, std::move(stats));
  at::Tensor current_rows = std::exchange(loss_rows_, std::move(loss_rows));
  recomputing_ = true;
  at::Tensor y;
  try {
    y = Block(x, i);
  } catch (...) {
    recomputing_ = false;
    router_stats_ = std::move(current);
    loss_rows_ = std::move(current_rows);
    throw;
  }
  recomputing_ = false;
  router_stats_ = std::move(current);
  loss_rows_ = std::move(current_rows);
  return y;
}

}  // namespace tessera::parallel
