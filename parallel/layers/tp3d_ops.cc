#include "parallel/layers/tp3d_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/autograd_pointer.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

Communicator* Comm(AutogradContext* ctx, const char* key) { return LoadPointer<Communicator>(ctx, key); }

// Every member's `x` stacked along dim 0, in rank order.
at::Tensor Gathered(const at::Tensor& x, Communicator* g) {
  at::Tensor in = x.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] *= g->size();
  at::Tensor out = at::empty(shape, in.options());
  ThrowIfError(g->AllGather(in, out));
  return out;
}

// Chunk rank() along dim 0 of the sum over members.
at::Tensor Scattered(const at::Tensor& x, Communicator* g) {
  at::Tensor in = x.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  shape[0] /= g->size();
  at::Tensor out = at::empty(shape, in.options());
  ThrowIfError(g->ReduceScatter(in, out, ReduceOp::kSum));
  return out;
}

struct Linear3DFn : public Function<Linear3DFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, Communicator* gather_a,
                            Communicator* gather_b, Communicator* scatter) {
    SavePointer(ctx, "ga", gather_a);
    SavePointer(ctx, "gb", gather_b);
    SavePointer(ctx, "sc", scatter);
    ctx->save_for_backward({a, b});
    at::Tensor full_a = Gathered(a, gather_a);
    at::Tensor full_b = Gathered(b, gather_b);
    return Scattered(at::mm(full_a, full_b), scatter);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* ga = Comm(ctx, "ga");
    Communicator* gb = Comm(ctx, "gb");
    Communicator* sc = Comm(ctx, "sc");
    auto saved = ctx->get_saved_variables();
    at::Tensor full_a = Gathered(saved[0], ga);
    at::Tensor full_b = Gathered(saved[1], gb);
    at::Tensor dc = Gathered(grads[0], sc);
    at::Tensor da = Scattered(at::mm(dc, full_b.t()), ga);
    at::Tensor db = Scattered(at::mm(full_a.t(), dc), gb);
    return {da, db, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Linear3D(const at::Tensor& a, const at::Tensor& b, Communicator* gather_a, Communicator* gather_b,
                    Communicator* scatter) {
  return Linear3DFn::apply(a, b, gather_a, gather_b, scatter);
}

}  // namespace tessera::parallel
