// Decoder's grid tensor-parallel paths (2D, 2.5D, 3D; decoder.h): which samples a rank holds, the
// parameters as the grid uses them, and the blocks built from SUMMA / 3D linears and grid norms.
#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "parallel/layers/sparse_mlp.h"
#include "parallel/layers/tp3d_ops.h"
#include "parallel/layers/tp_ops.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

using formats::model::BlockParamName;
using formats::model::FamilySpec;
using formats::model::MlpKind;
using formats::model::NormKind;

std::vector<Communicator*> Decoder::SampleAxes() const {
  std::vector<Communicator*> out;
  for (size_t a = 0; a + 1 < axes_.size(); ++a) out.push_back(axes_[a].get());
  return out;
}

std::pair<int, int> Decoder::SampleChunk() const {
  // Samples are split over every grid axis but the last (mixed radix, major first).
  int index = 0, count = 1;
  for (size_t a = 0; a + 1 < axes_.size(); ++a) {
    index = index * axes_[a]->size() + axes_[a]->rank();
    count *= axes_[a]->size();
  }
  return {index, count};
}

at::Tensor Decoder::Use(const std::string& name) const {
  const Param& p = Named(name);
  at::Tensor v = p.value;
  for (size_t a = 0; a < axes_.size(); ++a) {
    const bool split = std::find(p.grid.dim0.begin(), p.grid.dim0.end(), static_cast<int>(a)) != p.grid.dim0.end() ||
                       std::find(p.grid.dim1.begin(), p.grid.dim1.end(), static_cast<int>(a)) != p.grid.dim1.end();
    if (!split && axes_[a]->size() > 1) v = CopyToTp(v, axes_[a].get());
  }
  return v;
}

at::Tensor Decoder::UseAcrossSamples(const std::string& name) const {
  at::Tensor v = P(name);
  for (Communicator* axis : SampleAxes()) {
    if (axis->size() > 1) v = CopyToTp(v, axis);
  }
  return v;
}

at::Tensor Decoder::GridLinear(const at::Tensor& x, const std::string& weight, const std::string& bias, bool second) {
  at::Tensor w = Use(weight);  // [out part, in part]: its transpose is this rank's block of Wᵀ.
  at::Tensor rows = x.reshape({-1, x.size(-1)});
  at::Tensor y;
  if (shape_.mode == TpMode::k3D) {
    // First of a pair: input hidden over z, rows sub-chunked over y → output hidden over y, rows over z.
    Communicator* X = axes_[0].get();
    Communicator* Y = axes_[1].get();
    Communicator* Z = axes_[2].get();
    y = second ? Linear3D(rows, w.t(), Z, X, Y) : Linear3D(rows, w.t(), Y, X, Z);
  } else {
    y = Summa(rows, w.t(), grid_);
  }
  at::Tensor out = y.view({x.size(0), x.size(1), w.size(0)});
  return bias.empty() ? out : out + Use(bias);
}

at::Tensor Decoder::GridNorm(const at::Tensor& x, const std::string& base) {
  // Norms normalise over the hidden split along grid_.row (2D/2.5D: j; 3D: z).
  if (family_.norm == NormKind::kLayerNorm) {
    return LayerNorm2D(x, Use(base + ".weight"), Use(base + ".bias"), config_.norm_eps, grid_);
  }
  return RmsNorm2D(x, Use(base + ".weight"), config_.norm_eps, grid_);
}

at::Tensor Decoder::GridBlock(const at::Tensor& x_in, int i) {
  const FamilySpec& f = family_;
  const int64_t local_heads = config_.heads / shape_.q;
  const int64_t head_dim = config_.HeadDim();
  auto name = [&](const std::string& role) { return BlockParamName(f, i, role); };
  auto bias = [&](const std::string& role, bool has) { return has ? BlockParamName(f, i, role, "bias") : std::string(); };
  const std::string block = absl::StrCat(f.block_prefix, i, ".");
  at::Tensor a = GridNorm(x_in, block + f.attn_norm);
  at::Tensor y;
  if (f.fused_qkv) {
    a = GridLinear(a, name(f.qkv), bias(f.qkv, f.biases), false);  // This rank's heads.
    y = Attention(a, local_heads, head_dim, i);
  } else {
    // This rank's query heads and key/value heads (the grid side divides both).
    y = HeadsAttention(GridLinear(a, name(f.q), bias(f.q, config_.qkv_bias), false),
                       GridLinear(a, name(f.k), bias(f.k, config_.qkv_bias), false),
                       GridLinear(a, name(f.v), bias(f.v, config_.qkv_bias), false), local_heads,
                       config_.KvHeads() / shape_.q, i);
  }
  at::Tensor x = x_in + GridLinear(y, name(f.attn_out), bias(f.attn_out, f.biases), true);
  at::Tensor m = GridNorm(x, block + f.mlp_norm);
  if (config_.IsMoeLayer(i)) return x + GridSparseMlp(m, i);
  if (f.mlp == MlpKind::kSwiGlu) {
    m = at::silu(GridLinear(m, name(f.gate), "", false)) * GridLinear(m, name(f.up), "", false);
  } else {
    m = at::gelu(GridLinear(m, name(f.mlp_in), bias(f.mlp_in, f.biases), false), config_.gelu_tanh ? "tanh" : "none");
  }
  return x + GridLinear(m, name(f.mlp_out), bias(f.mlp_out, f.biases), true);
}

at::Tensor Decoder::GridSparseMlp(const at::Tensor& x, int i) {
  SparseMlpOptions options{config_.experts_per_token, config_.norm_topk_prob, config_.capacity_factor,
                           config_.router_jitter};
  options.combine = TpCombine::kReduceScatter;
  options.gemm = expert_gemm_.value_or(DefaultExpertGemm(x));
  return SparseMlp(GatherAlong(x, 2, grid_.row), SparseWeights(i), options, grid_.row, ep_.get(), router_stats_.get(),
                   !recomputing_, i);
}

}  // namespace tessera::parallel
