#include "parallel/layers/sparse_mlp.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "parallel/layers/linear.h"
#include "parallel/layers/tp_ops.h"

namespace tessera::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Forward: `out` unchanged. Backward: out's gradient passes through, and the block's probability sums
// `prob_sum` [E] receive the balancing loss's gradient grad_scale · E · counts / rows² (the whole
// forward pass's counts and rows: complete by the time backward reaches here).
struct CarryAuxGradient : public torch::autograd::Function<CarryAuxGradient> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& prob_sum,
                            c10::intrusive_ptr<RouterStats> stats) {
    ctx->saved_data["stats"] = c10::IValue::make_capsule(stats);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* stats = dynamic_cast<RouterStats*>(ctx->saved_data["stats"].toCapsule().get());
    TORCH_CHECK(stats != nullptr, "CarryAuxGradient: no router statistics");
    at::Tensor g;
    if (stats->rows > 0 && stats->grad_scale != 0) {
      const double n = static_cast<double>(stats->rows);
      g = (stats->counts * (stats->grad_scale * stats->experts / (n * n))).to(at::kFloat);
    }
    return {grads[0], g, at::Tensor()};
  }
};

at::Tensor SwiGlu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return Linear(at::silu(Linear(x, gate)) * Linear(x, up), down);
}

}  // namespace

double RouterStats::AuxLoss() const {
  if (rows == 0 || !counts.defined()) return 0;
  const double n = static_cast<double>(rows);
  return experts * (counts / n * (prob_sums / n)).sum().item<double>();
}

at::Tensor SparseMlp(const at::Tensor& x, const SparseMlpWeights& w, const SparseMlpOptions& o, Communicator* tp,
                     RouterStats* stats, bool record, int layer) {
  const int64_t B = x.size(0), T = x.size(1), h = x.size(2), N = B * T;
  const int64_t E = w.router.size(0), k = o.experts_per_token;
  at::Tensor rows = x.reshape({N, h});
  at::Tensor probs = at::softmax(Linear(rows, w.router), -1, at::kFloat);  // [N, E] fp32.
  auto [top_w, top_e] = at::topk(probs, k, -1);                           // [N, k], descending.
  if (o.norm_topk_prob) top_w = top_w / top_w.sum(-1, /*keepdim=*/true);
  top_w = top_w.to(x.scalar_type());

  // Dispatch: assignments sorted by expert; assignment a is token a / k's slot a % k.
  at::Tensor flat_e = top_e.reshape({-1});
  at::Tensor order = at::argsort(flat_e, /*stable=*/true);
  at::Tensor token_of = at::div(order, k, "floor");
  at::Tensor counts = at::bincount(flat_e, {}, E);
  const at::Tensor counts_cpu = counts.cpu();
  const int64_t* per_expert = counts_cpu.data_ptr<int64_t>();
  at::Tensor in = CopyToTp(rows, tp).index_select(0, token_of);  // [N·k, h]
  std::vector<at::Tensor> outs;
  outs.reserve(E);
  int64_t offset = 0;
  for (int64_t e = 0; e < E; ++e) {
    outs.push_back(SwiGlu(in.narrow(0, offset, per_expert[e]), w.gate[e], w.up[e], w.down[e]));
    offset += per_expert[e];
  }
  at::Tensor weights = CopyToTp(top_w.reshape({-1}), tp).index_select(0, order).unsqueeze(1);
  at::Tensor y = at::zeros({N, h}, x.options()).index_add(0, token_of, at::cat(outs) * weights);
  if (w.shared_gate.defined()) {
    at::Tensor shared = SwiGlu(CopyToTp(rows, tp), w.shared_gate_proj, w.shared_up, w.shared_down);
    y = y + CopyToTp(at::sigmoid(Linear(rows, w.shared_gate)), tp) * shared;
  }
  y = ReduceFromTp(y, tp).view({B, T, h});

  if (stats == nullptr) return y;
  if (record) {
    const at::Tensor c = counts.to(at::kDouble);
    const at::Tensor p = probs.detach().sum(0).to(at::kDouble);
    stats->counts = stats->counts.defined() ? stats->counts + c : c;
    stats->prob_sums = stats->prob_sums.defined() ? stats->prob_sums + p : p;
    stats->rows += N;
    stats->layer_counts[layer] = c;
  }
  return CarryAuxGradient::apply(y, probs.sum(0), c10::intrusive_ptr<RouterStats>::reclaim_copy(stats));
}

}  // namespace tessera::parallel
