#include "parallel/layers/tp2d_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/autograd_pointer.h"

#include "parallel/layers/tp_ops.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

// Member `root`'s `mine` on every member of `comm` (a copy; `mine` is untouched).
at::Tensor BroadcastFrom(const at::Tensor& mine, int root, Communicator* comm) {
  at::Tensor t = comm->rank() == root ? mine.contiguous().clone() : at::empty(mine.sizes(), mine.options());
  ThrowIfError(comm->Broadcast(t, root));
  return t;
}

struct SummaFn : public Function<SummaFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b, Communicator* r,
                            Communicator* c, int64_t q) {
    SavePointer(ctx, "row", r);
    SavePointer(ctx, "col", c);
    ctx->saved_data["q"] = q;
    ctx->save_for_backward({a, b});
    at::Tensor out = at::zeros({a.size(0), b.size(1)}, a.options());
    for (int k = 0; k < q; ++k) {
      at::Tensor ak = BroadcastFrom(a, k, r);  // A_ik from grid column k.
      at::Tensor bk = BroadcastFrom(b, k, c);  // B_kj from grid row k.
      out.addmm_(ak, bk);
    }
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* r = LoadPointer<Communicator>(ctx, "row");
    Communicator* c = LoadPointer<Communicator>(ctx, "col");
    const int q = static_cast<int>(ctx->saved_data["q"].toInt());
    auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    at::Tensor dc = grads[0].contiguous();
    at::Tensor da, db;
    for (int k = 0; k < q; ++k) {
      // dA_ik = Σ_j dC_ij · B_kjᵀ, summed along the row into column k.
      at::Tensor bk = BroadcastFrom(b, k, c);
      at::Tensor pa = at::mm(dc, bk.t()).contiguous();
      ThrowIfError(r->Reduce(pa, k, ReduceOp::kSum));
      if (r->rank() == k) da = pa;
      // dB_kj = Σ_i A_ikᵀ · dC_ij, summed along the column into row k.
      at::Tensor ak = BroadcastFrom(a, k, r);
      at::Tensor pb = at::mm(ak.t(), dc).contiguous();
      ThrowIfError(c->Reduce(pb, k, ReduceOp::kSum));
      if (c->rank() == k) db = pb;
    }
    return {da, db, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterFn : public Function<ReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, Communicator* g) {
    ctx->saved_data["dim"] = dim;
    SavePointer(ctx, "comm", g);
    at::Tensor in = x.movedim(dim, 0).contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] /= g->size();
    at::Tensor out = at::empty(shape, in.options());
    ThrowIfError(g->ReduceScatter(in, out, ReduceOp::kSum));
    return out.movedim(0, dim).contiguous();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* g = LoadPointer<Communicator>(ctx, "comm");
    const int64_t dim = ctx->saved_data["dim"].toInt();
    at::Tensor in = grads[0].movedim(dim, 0).contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] *= g->size();
    at::Tensor out = at::empty(shape, in.options());
    ThrowIfError(g->AllGather(in, out));
    return {out.movedim(0, dim).contiguous(), at::Tensor(), at::Tensor()};
  }
};

struct GatherFn : public Function<GatherFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, Communicator* g) {
    ctx->saved_data["dim"] = dim;
    SavePointer(ctx, "comm", g);
    at::Tensor in = x.movedim(dim, 0).contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] *= g->size();
    at::Tensor out = at::empty(shape, in.options());
    ThrowIfError(g->AllGather(in, out));
    return out.movedim(0, dim).contiguous();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* g = LoadPointer<Communicator>(ctx, "comm");
    const int64_t dim = ctx->saved_data["dim"].toInt();
    return {grads[0].chunk(g->size(), dim)[g->rank()].contiguous(), at::Tensor(), at::Tensor()};
  }
};

// Sum over the group in forward and in backward: a partial statistic made whole (forward) and then
// used by every member's own partition, whose gradients are partial too.
at::Tensor SumBothWays(const at::Tensor& x, Communicator* comm) { return CopyToTp(ReduceFromTp(x, comm), comm); }

}  // namespace

at::Tensor Summa(const at::Tensor& a, const at::Tensor& b, const Grid2D& grid) {
  return SummaFn::apply(a, b, grid.row, grid.col, int64_t{grid.q});
}

at::Tensor LayerNorm2D(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                       const Grid2D& grid) {
  const double hidden = static_cast<double>(x.size(-1)) * grid.q;
  at::Tensor mean = SumBothWays(x.sum(-1, /*keepdim=*/true), grid.row) / hidden;
  at::Tensor centered = x - mean;
  at::Tensor var = SumBothWays((centered * centered).sum(-1, /*keepdim=*/true), grid.row) / hidden;
  return centered * at::rsqrt(var + eps) * weight + bias;
}

at::Tensor RmsNorm2D(const at::Tensor& x, const at::Tensor& weight, double eps, const Grid2D& grid) {
  const double hidden = static_cast<double>(x.size(-1)) * grid.q;
  at::Tensor h = x.to(at::kFloat);
  at::Tensor mean_square = SumBothWays(h.pow(2).sum(-1, /*keepdim=*/true), grid.row) / hidden;
  return weight * (h * at::rsqrt(mean_square + eps)).to(x.scalar_type());
}

at::Tensor ReduceScatterAlong(const at::Tensor& x, int64_t dim, Communicator* comm) {
  return ReduceScatterFn::apply(x, dim, comm);
}

at::Tensor GatherAlong(const at::Tensor& x, int64_t dim, Communicator* comm) {
  return GatherFn::apply(x, dim, comm);
}

}  // namespace tessera::parallel
