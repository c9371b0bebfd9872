#include "parallel/layers/sparse_mlp.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/autograd_pointer.h"
#include "parallel/layers/fp8_linear.h"
#include "parallel/layers/linear.h"
#include "parallel/layers/sparse_mlp_paths.h"
#include "parallel/layers/tp2d_ops.h"
#include "parallel/layers/tp_ops.h"
#include "parallel/layers/weight_grad_store.h"

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

// One SwiGLU expert on its rows x; `lora` (null: none) adds each adapted linear's scale·B·A·x.
at::Tensor SwiGlu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down,
                  const ExpertLora* lora = nullptr, double scale = 0) {
  if (lora == nullptr) return Linear(at::silu(Linear(x, gate)) * Linear(x, up), down);
  auto linear = [&](const at::Tensor& in, const at::Tensor& w, const at::Tensor& a, const at::Tensor& b) {
    at::Tensor y = Linear(in, w);
    if (!a.defined()) return y;
    Fp8Scope no_fp8(nullptr);  // Adapters stay in the parameters' dtype whatever their rank (fp8_linear.h).
    return AddLinear(y, Linear(in, a), b, scale);
  };
  return linear(at::silu(linear(x, gate, lora->gate_a, lora->gate_b)) * linear(x, up, lora->up_a, lora->up_b), down,
                lora->down_a, lora->down_b);
}

// Every expert's SwiGLU over its contiguous rows of x (rows_of[e] rows of expert e, in order) as three
// grouped GEMMs. An expert with no rows has its stacked weights masked by 0 so that its gradient is
// zeros whatever the kernel leaves for an empty group.
at::Tensor GroupedSwiGlu(const at::Tensor& x, const std::vector<int64_t>& rows_of, const SparseMlpWeights& w) {
  std::vector<int32_t> ends;
  std::vector<float> live;
  int64_t end = 0;
  for (int64_t n : rows_of) {
    end += n;
    TORCH_CHECK(end <= std::numeric_limits<int32_t>::max(), "GroupedSwiGlu: more than 2^31 rows");
    ends.push_back(static_cast<int32_t>(end));
    live.push_back(n > 0 ? 1.0f : 0.0f);
  }
  const bool some_empty = std::find(live.begin(), live.end(), 0.0f) != live.end();
  const at::Tensor offs = at::tensor(ends, at::kInt).to(x.device());
  const at::Tensor live_mask =
      some_empty ? at::tensor(live, at::kFloat).gt(0).to(x.device()).view({-1, 1, 1}) : at::Tensor();
  // [E, out, in] stacked, as [E, in, out] for x·Wᵀ. An idle expert's slice goes through `where`, whose
  // backward writes zeros there whatever the kernel left (a multiplication by 0 would keep a NaN).
  auto stacked = [&](const std::vector<at::Tensor>& parts) {
    at::Tensor s = at::stack(parts);
    return (some_empty ? at::where(live_mask, s, at::zeros({}, s.options())) : s).transpose(1, 2);
  };
  const at::Tensor g = at::_grouped_mm(x, stacked(w.gate), offs);
  const at::Tensor u = at::_grouped_mm(x, stacked(w.up), offs);
  return at::_grouped_mm(at::silu(g) * u, stacked(w.down), offs);
}

}  // namespace

// The conditions: sparse_mlp_paths.h.

bool GroupedApplies(ExpertGemm gemm, const at::Tensor& x, const SparseMlpWeights& w) {
  if (gemm != ExpertGemm::kGrouped || !w.lora.empty() || w.gate.empty() || x.size(0) == 0) return false;
  if (Fp8Scope::current() != nullptr || WeightGradStore::splitting()) return false;
  return x.size(-1) % 8 == 0 && w.gate[0].size(0) % 8 == 0;
}

namespace {

// The experts of this rank on rows sorted by expert (rows_of[e] of local expert e).
at::Tensor LocalExperts(const at::Tensor& x, const std::vector<int64_t>& rows_of, const SparseMlpWeights& w,
                        ExpertGemm gemm) {
  if (GroupedApplies(gemm, x, w)) return GroupedSwiGlu(x.contiguous(), rows_of, w);
  std::vector<at::Tensor> outs;
  outs.reserve(rows_of.size());
  int64_t offset = 0;
  for (size_t e = 0; e < rows_of.size(); ++e) {
    outs.push_back(SwiGlu(x.narrow(0, offset, rows_of[e]), w.gate[e], w.up[e], w.down[e],
                          w.lora.empty() ? nullptr : &w.lora[e], w.lora_scale));
    offset += rows_of[e];
  }
  return at::cat(outs);
}

// Rows of `x` to the members of `comm` (send[j] rows to member j, in order), receiving recv[j] rows
// from member j; backward sends the gradients back the same way reversed.
struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> send,
                            std::vector<int64_t> recv, Communicator* comm) {
    SavePointer(ctx, "comm", comm);
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return Exchange(x.contiguous(), send, recv, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator* comm = LoadPointer<Communicator>(ctx, "comm");
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {Exchange(grads[0].contiguous(), recv, send, comm), at::Tensor(), at::Tensor(), at::Tensor()};
  }
  static at::Tensor Exchange(const at::Tensor& x, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                             Communicator* comm) {
    int64_t rows = 0;
    for (int64_t n : recv) rows += n;
    std::vector<int64_t> shape = x.sizes().vec();
    shape[0] = rows;
    at::Tensor out = at::empty(shape, x.options());
    ThrowIfError(comm->AllToAllRows(x, send, out, recv));
    return out;
  }
};

// The expert-parallel part of SparseMlp: `in` [A, h] holds the assignments' rows sorted by expert
// (`per_expert[e]` rows of global expert e, E in all); returns the experts' outputs for them, in the
// same order, after the round trip to the experts' ranks.
at::Tensor ExpertParallel(const at::Tensor& in, const int64_t* per_expert, int64_t E, const SparseMlpWeights& w,
                          Communicator* ep, ExpertGemm gemm) {
  const int ranks = ep->size();
  const int64_t local = E / ranks;
  // Per-expert counts to the experts' ranks: row j of [ranks, local] goes to rank j.
  at::Tensor counts = at::from_blob(const_cast<int64_t*>(per_expert), {ranks, local}, at::kLong).clone();
  at::Tensor received_counts = at::empty({ranks, local}, at::kLong);
  {
    at::Tensor send = counts.to(in.device()), recv = at::empty({ranks, local}, send.options());
    ThrowIfError(ep->AllToAll(send, recv));
    received_counts = recv.cpu();
  }
  const int64_t* got = received_counts.data_ptr<int64_t>();  // [source][local expert]
  std::vector<int64_t> send_rows(ranks, 0), recv_rows(ranks, 0);
  for (int j = 0; j < ranks; ++j) {
    for (int64_t e = 0; e < local; ++e) {
      send_rows[j] += per_expert[j * local + e];
      recv_rows[j] += got[j * local + e];
    }
  }
  at::Tensor arrived = ExchangeRows::apply(in, send_rows, recv_rows, ep);  // By source, then expert.
  // Expert-major order for the GEMMs: for each local expert, its rows from every source in turn.
  std::vector<int64_t> source_start(ranks, 0);
  for (int j = 1; j < ranks; ++j) source_start[j] = source_start[j - 1] + recv_rows[j - 1];
  std::vector<int64_t> order;
  order.reserve(arrived.size(0));
  std::vector<int64_t> rows_of(local, 0);
  for (int64_t e = 0; e < local; ++e) {
    for (int j = 0; j < ranks; ++j) {
      int64_t start = source_start[j];
      for (int64_t f = 0; f < e; ++f) start += got[j * local + f];
      for (int64_t r = 0; r < got[j * local + e]; ++r) order.push_back(start + r);
      rows_of[e] += got[j * local + e];
    }
  }
  at::Tensor perm = at::tensor(order, at::kLong).to(in.device());
  at::Tensor x = arrived.index_select(0, perm);
  const at::Tensor out = LocalExperts(x, rows_of, w, gemm);
  // Back to source-major order (the inverse permutation), then to the tokens' ranks.
  at::Tensor inverse = at::empty_like(perm);
  inverse.index_put_({perm}, at::arange(perm.size(0), perm.options()));
  at::Tensor y = out.index_select(0, inverse);
  return ExchangeRows::apply(y, recv_rows, send_rows, ep);
}

}  // namespace

ExpertGemm DefaultExpertGemm(const at::Tensor& x) {
  return x.is_cuda() && x.scalar_type() == at::kBFloat16 ? ExpertGemm::kGrouped : ExpertGemm::kLoop;
}

double RouterStats::AuxLoss() const {
  if (rows == 0 || !counts.defined()) return 0;
  const double n = static_cast<double>(rows);
  return experts * (counts / n * (prob_sums / n)).sum().item<double>();
}

absl::Status RouterStats::SumOver(Communicator& sp, c10::Device device) {
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(device);
  at::Tensor all = at::zeros({2 * experts + 1}, f64);
  if (counts.defined()) {
    all.narrow(0, 0, experts).copy_(counts);
    all.narrow(0, experts, experts).copy_(prob_sums);
  }
  all[2 * experts] = static_cast<double>(rows);
  if (absl::Status s = sp.AllReduce(all, ReduceOp::kSum); !s.ok()) return s;
  counts = all.narrow(0, 0, experts);
  prob_sums = all.narrow(0, experts, experts);
  rows = static_cast<int64_t>(all[2 * experts].item<double>());
  return absl::OkStatus();
}

at::Tensor JitterNoise(const RouterStats& stats, int layer, double jitter, at::IntArrayRef x_shape) {
  const int64_t B = x_shape[0], T = x_shape[1], h = x_shape[2];
  uint64_t seed = stats.noise_seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(layer + 1));
  seed ^= seed >> 31;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor noise = at::empty({B * stats.sample_blocks, T * stats.sequence_blocks, h}, at::kFloat)
                         .uniform_(1.0 - jitter, 1.0 + jitter, gen);
  return noise.narrow(0, stats.sample_block * B, B).narrow(1, stats.sequence_block * T, T);
}

at::Tensor SparseMlp(const at::Tensor& x_in, const SparseMlpWeights& w, const SparseMlpOptions& o, Communicator* tp,
                     Communicator* ep, RouterStats* stats, bool record, int layer) {
  // Router jitter in training: the router and the experts see the jittered input.
  const at::Tensor x = o.jitter > 0 && stats != nullptr
                           ? x_in * JitterNoise(*stats, layer, o.jitter, x_in.sizes()).to(x_in.device(), x_in.scalar_type())
                           : x_in;
  const int64_t B = x.size(0), T = x.size(1), h = x.size(2), N = B * T;
  const int64_t E = w.router.size(0), k = o.experts_per_token;
  at::Tensor rows = x.reshape({N, h});
  at::Tensor logits;
  {
    Fp8Scope no_fp8(nullptr);  // The router stays in the parameters' dtype (routing is decided on it).
    logits = Linear(rows, w.router);
  }
  at::Tensor probs = at::softmax(logits, -1, at::kFloat);  // [N, E] fp32.
  auto [top_w, top_e] = at::topk(probs, k, -1);                           // [N, k], descending.
  at::Tensor balancing_choice = top_e;  // transformers' balancing loss counts the plain top-k.
  if (w.router_bias.defined()) {
    // Loss-free balancing: the bias only chooses; the weights are the chosen experts' probabilities.
    top_e = std::get<1>(at::topk(probs.detach() + w.router_bias, k, -1));
    top_w = probs.gather(-1, top_e);
  }
  if (o.norm_topk_prob) top_w = top_w / top_w.sum(-1, /*keepdim=*/true);
  top_w = top_w.to(x.scalar_type());

  // Dispatch: assignments sorted by expert; assignment a is token a / k's slot a % k.
  at::Tensor flat_e = top_e.reshape({-1});
  at::Tensor order = at::argsort(flat_e, /*stable=*/true);
  at::Tensor token_of = at::div(order, k, "floor");
  at::Tensor counts = at::bincount(flat_e, {}, E);
  at::Tensor counts_cpu = counts.cpu();
  if (o.capacity_factor > 0) {
    // The first `capacity` assignments of each expert in the sorted order (token order) stay.
    const int64_t capacity = static_cast<int64_t>(std::ceil(o.capacity_factor * N * k / E));
    std::vector<int64_t> keep;
    const int64_t* c = counts_cpu.data_ptr<int64_t>();
    int64_t start = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t r = 0; r < std::min(c[e], capacity); ++r) keep.push_back(start + r);
      start += c[e];
    }
    order = order.index_select(0, at::tensor(keep, at::kLong).to(order.device()));
    token_of = at::div(order, k, "floor");
    counts_cpu = counts_cpu.clamp_max(capacity);
  }
  const int64_t* per_expert = counts_cpu.data_ptr<int64_t>();
  at::Tensor in = CopyToTp(rows, tp).index_select(0, token_of);  // [N·k, h]
  at::Tensor expert_out;
  if (ep != nullptr && ep->size() > 1) {
    expert_out = ExpertParallel(in, per_expert, E, w, ep, o.gemm);
  } else {
    expert_out = LocalExperts(in, std::vector<int64_t>(per_expert, per_expert + E), w, o.gemm);
  }
  at::Tensor weights = CopyToTp(top_w.reshape({-1}), tp).index_select(0, order).unsqueeze(1);
  at::Tensor y = at::zeros({N, h}, x.options()).index_add(0, token_of, expert_out * weights);
  if (w.shared_gate.defined()) {
    at::Tensor shared = SwiGlu(CopyToTp(rows, tp), w.shared_gate_proj, w.shared_up, w.shared_down,
                               w.lora.empty() ? nullptr : &w.shared_lora, w.lora_scale);
    y = y + CopyToTp(at::sigmoid(Linear(rows, w.shared_gate)), tp) * shared;
  }
  y = o.combine == TpCombine::kReduceScatter ? ReduceScatterAlong(y, 1, tp).view({B, T, -1})
                                              : ReduceFromTp(y, tp).view({B, T, h});

  if (stats == nullptr) return y;
  // The rows counted (all, or those stats->counted marks) and their probabilities' sum over them.
  at::Tensor counted;
  if (stats->counted.defined()) {
    TORCH_CHECK(stats->counted.numel() == N, "SparseMlp: ", stats->counted.numel(),
                " counted-row flags for a block input of ", N, " rows");
    counted = stats->counted.reshape({N}).to(probs.device(), at::kDouble);
  }
  const at::Tensor prob_sum = counted.defined() ? (probs * counted.to(at::kFloat).unsqueeze(1)).sum(0) : probs.sum(0);
  if (record) {
    // Counts of the assignments (each top-k slot) of counted rows: a row's flag weighs its k slots.
    const at::Tensor slot_weights = counted.defined() ? counted.repeat_interleave(k) : at::Tensor();
    auto count = [&](const at::Tensor& choice) {
      return slot_weights.defined() ? at::bincount(choice.reshape({-1}), slot_weights, E)
                                    : at::bincount(choice.reshape({-1}), {}, E).to(at::kDouble);
    };
    const at::Tensor c = count(balancing_choice);
    const at::Tensor p = prob_sum.detach().to(at::kDouble);
    stats->counts = stats->counts.defined() ? stats->counts + c : c;
    stats->prob_sums = stats->prob_sums.defined() ? stats->prob_sums + p : p;
    stats->rows += counted.defined() ? static_cast<int64_t>(std::llround(counted.sum().item<double>())) : N;
    stats->layer_counts[layer] = w.router_bias.defined() || counted.defined() ? count(top_e) : c;
  }
  return CarryAuxGradient::apply(y, prob_sum, c10::intrusive_ptr<RouterStats>::reclaim_copy(stats));
}

}  // namespace tessera::parallel
