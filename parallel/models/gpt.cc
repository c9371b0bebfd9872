#include "parallel/models/gpt.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/fused_ops.h"
#include "parallel/layers/tp3d_ops.h"
#include "parallel/layers/tp_ops.h"

namespace tessera::parallel {
namespace {

constexpr double kLayerNormEps = 1e-5;

// FNV-1a of the name mixed with the seed: a per-tensor seed independent of creation order.
uint64_t TensorSeed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string Shape(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&out, i ? "," : "", s[i]);
  return out + "]";
}

}  // namespace

Param& Gpt::Add(const ParamSpec& spec, uint64_t seed) {
  at::Tensor full;
  if (spec.init_std > 0) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(TensorSeed(seed, spec.name));
    full = at::normal(0.0, spec.init_std, spec.shape, gen);
  } else {
    full = at::full(spec.shape, spec.fill);
  }
  Param p;
  p.name = spec.name;
  p.full_shape = spec.shape;
  p.split = spec.split;
  p.grid = spec.grid;
  p.weight_decay = spec.shape.size() >= 2;
  p.value = ShardOf(p, full, tp_->rank(), tp_->size()).to(device_).set_requires_grad(true);
  index_[spec.name] = params_.size();
  params_.push_back(std::move(p));
  return params_.back();
}

GptPart GptPart::Whole(int layers) {
  GptPart part;
  for (int i = 0; i < layers; ++i) part.layers.push_back(i);
  return part;
}

Gpt::Gpt(const GptConfig& c, std::shared_ptr<Communicator> tp, uint64_t seed, c10::Device device)
    : Gpt(c, GptPart::Whole(c.layers), std::move(tp), seed, device) {}

std::vector<ParamSpec> GptParamSpecs1D(const GptConfig& c, const GptPart& part);

std::vector<int> TpShape::Grid() const {
  switch (layout) {
    case TpLayout::k1D: return {};
    case TpLayout::k2D: return {q, q};
    case TpLayout::k2p5D: return {depth, q, q};
    case TpLayout::k3D: return {q, q, q};
  }
  return {};
}

TpShape TpShapeOf(const std::string& mode, int tp, int depth) {
  if (mode == "2d") return {TpLayout::k2D, GridSide(tp), 1};
  if (mode == "2.5d") {
    const int d = std::max(1, depth);
    return {TpLayout::k2p5D, GridSide(tp / d), d};
  }
  if (mode == "3d") return {TpLayout::k3D, CubeSide(tp), 1};
  return {};
}

std::vector<ParamSpec> GptParamSpecs(const GptConfig& c, const GptPart& part, const TpShape& tp) {
  std::vector<ParamSpec> out = GptParamSpecs1D(c, part);
  if (tp.layout == TpLayout::k1D) return out;
  const std::vector<int> grid = tp.Grid();
  // 2D/2.5D: the grid's last two axes are (i, j); 3D: (x, y, z).
  const int n = static_cast<int>(grid.size());
  const int i = n - 2, j = n - 1;
  for (ParamSpec& p : out) {
    GridSplit g;
    g.grid = grid;
    g.qkv = p.name.find("c_attn") != std::string::npos;
    const bool first_of_pair = g.qkv || p.name.find("c_fc") != std::string::npos;  // Input layout → other.
    if (tp.layout == TpLayout::k3D) {
      const int x = 0, y = 1, z = 2;
      if (p.shape.size() == 1) {
        // Biases follow their linear's output layout (hidden over y after the first of a pair);
        // norms act between blocks (hidden over z).
        g.dim0 = {first_of_pair ? y : z};
      } else if (p.name == "wte.weight" || p.name == "wpe.weight") {
        g.dim1 = {z};
      } else {
        // Wᵀ's row (input) blocks over the contraction axis, sub-chunked over x; columns over the other.
        g.dim0 = {first_of_pair ? y : z};
        g.dim1 = {first_of_pair ? z : y, x};
      }
    } else if (p.shape.size() == 1) {
      g.dim0 = {j};
    } else if (p.name == "wte.weight" || p.name == "wpe.weight") {
      g.dim1 = {j};
    } else {
      g.dim0 = {j};  // Wᵀ's column block j (outputs),
      g.dim1 = {i};  // row block i (inputs): SUMMA's B_ij.
    }
    p.split = TpSplit::kGrid;
    p.grid = std::move(g);
  }
  return out;
}

std::vector<ParamSpec> GptParamSpecs1D(const GptConfig& c, const GptPart& part) {
  const int64_t h = c.hidden;
  const double std = 0.02;
  const double residual_std = 0.02 / std::sqrt(2.0 * c.layers);
  std::vector<ParamSpec> out;
  if (part.embedding || part.head) out.push_back({"wte.weight", {c.vocab, h}, TpSplit::kDim0, std, 0});
  if (part.embedding) out.push_back({"wpe.weight", {c.seq_len, h}, TpSplit::kReplicated, std, 0});
  for (int i : part.layers) {
    const std::string b = absl::StrCat("h.", i, ".");
    out.push_back({b + "ln_1.weight", {h}, TpSplit::kReplicated, 0, 1});
    out.push_back({b + "ln_1.bias", {h}, TpSplit::kReplicated, 0, 0});
    out.push_back({b + "attn.c_attn.weight", {3 * h, h}, TpSplit::kQkvDim0, std, 0});
    out.push_back({b + "attn.c_attn.bias", {3 * h}, TpSplit::kQkvDim0, 0, 0});
    out.push_back({b + "attn.c_proj.weight", {h, h}, TpSplit::kDim1, residual_std, 0});
    out.push_back({b + "attn.c_proj.bias", {h}, TpSplit::kReplicated, 0, 0});
    out.push_back({b + "ln_2.weight", {h}, TpSplit::kReplicated, 0, 1});
    out.push_back({b + "ln_2.bias", {h}, TpSplit::kReplicated, 0, 0});
    out.push_back({b + "mlp.c_fc.weight", {4 * h, h}, TpSplit::kDim0, std, 0});
    out.push_back({b + "mlp.c_fc.bias", {4 * h}, TpSplit::kDim0, 0, 0});
    out.push_back({b + "mlp.c_proj.weight", {h, 4 * h}, TpSplit::kDim1, residual_std, 0});
    out.push_back({b + "mlp.c_proj.bias", {h}, TpSplit::kReplicated, 0, 0});
  }
  if (part.head) {
    out.push_back({"ln_f.weight", {h}, TpSplit::kReplicated, 0, 1});
    out.push_back({"ln_f.bias", {h}, TpSplit::kReplicated, 0, 0});
  }
  return out;
}

Gpt::Gpt(const GptConfig& c, const GptPart& part, std::shared_ptr<Communicator> tp, uint64_t seed,
         c10::Device device)
    : config_(c), part_(part), tp_(std::move(tp)), device_(device) {
  for (const ParamSpec& spec : GptParamSpecs(c, part)) Add(spec, seed);
}

Gpt::Gpt(const GptConfig& c, const GptPart& part, std::shared_ptr<Communicator> tp, const TpShape& shape,
         std::vector<std::shared_ptr<Communicator>> axes, uint64_t seed, c10::Device device)
    : config_(c), part_(part), tp_(std::move(tp)), shape_(shape), axes_(std::move(axes)), device_(device) {
  const size_t n = axes_.size();
  grid_ = Grid2D{axes_[n - 1].get(), axes_[n - 2].get(), shape_.q};
  for (const ParamSpec& spec : GptParamSpecs(c, part, shape_)) Add(spec, seed);
}

std::pair<int, int> Gpt::SampleChunk() const {
  // Samples are split over every grid axis but the last (mixed radix, major first).
  int index = 0, count = 1;
  for (size_t a = 0; a + 1 < axes_.size(); ++a) {
    index = index * axes_[a]->size() + axes_[a]->rank();
    count *= axes_[a]->size();
  }
  return {index, count};
}

int Gpt::UnitOfLayer(int layer) const {
  for (size_t j = 0; j < part_.layers.size(); ++j) {
    if (part_.layers[j] == layer) return 1 + static_cast<int>(j);
  }
  return -1;
}

std::vector<std::vector<size_t>> Gpt::Units() const {
  std::vector<std::vector<size_t>> units(1 + part_.layers.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string& name = params_[k].name;
    if (name.rfind("h.", 0) == 0) {
      units[UnitOfLayer(std::stoi(name.substr(2)))].push_back(k);
    } else {
      units[0].push_back(k);
    }
  }
  return units;
}

const at::Tensor& Gpt::P(const std::string& name) const { return params_[index_.at(name)].value; }

at::Tensor Gpt::Use(const std::string& name) const {
  const Param& p = params_[index_.at(name)];
  at::Tensor v = p.value;
  for (size_t a = 0; a < axes_.size(); ++a) {
    const bool split = std::find(p.grid.dim0.begin(), p.grid.dim0.end(), static_cast<int>(a)) != p.grid.dim0.end() ||
                       std::find(p.grid.dim1.begin(), p.grid.dim1.end(), static_cast<int>(a)) != p.grid.dim1.end();
    if (!split && axes_[a]->size() > 1) v = CopyToTp(v, axes_[a].get());
  }
  return v;
}

std::vector<int64_t> Gpt::ActivationShape(int64_t samples, int64_t positions) const {
  if (shape_.layout != TpLayout::k1D) return {samples, positions, config_.hidden / shape_.q};
  return {samples, positions, config_.hidden};
}

int64_t Gpt::num_parameters() const {
  int64_t n = 0;
  for (const Param& p : params_) {
    int64_t k = 1;
    for (int64_t d : p.full_shape) k *= d;
    n += k;
  }
  return n;
}

absl::Status Gpt::LoadFull(const std::map<std::string, at::Tensor>& full) {
  for (Param& p : params_) {
    auto it = full.find(p.name);
    if (it == full.end()) return absl::NotFoundError(absl::StrCat("tensor ", p.name, " is missing"));
    if (!it->second.sizes().equals(p.full_shape)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", p.name, " has shape ", Shape(it->second.sizes()),
                                                     ", expected ", Shape(p.full_shape)));
    }
    at::NoGradGuard no_grad;
    p.value.copy_(ShardOf(p, it->second.to(p.value.dtype()), tp_->rank(), tp_->size()));
  }
  return absl::OkStatus();
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = x·Wᵀ (+ b) for 16-bit tensors on the CPU, computed with fp32 GEMMs: ATen's CPU GEMMs for
// bf16/fp16 without native hardware support are up to ~70× slower than fp32 (measured: the weight
// gradient's transposed product). Inputs are saved in their 16-bit dtype; outputs and gradients are
// rounded to it once, as a GEMM with fp32 accumulation would.
struct LowPrecisionCpuLinear : public torch::autograd::Function<LowPrecisionCpuLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    ctx->save_for_backward({x, w});
    return at::linear(x.to(at::kFloat), w.to(at::kFloat)).to(x.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    at::Tensor g = grads[0].to(at::kFloat).reshape({-1, w.size(0)});
    at::Tensor gx = at::mm(g, w.to(at::kFloat)).view(x.sizes()).to(x.scalar_type());
    at::Tensor gw = at::mm(g.t(), x.reshape({-1, w.size(1)}).to(at::kFloat)).to(w.scalar_type());
    return {gx, gw};
  }
};

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = at::Tensor()) {
  if (x.device().is_cpu() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf)) {
    at::Tensor y = LowPrecisionCpuLinear::apply(x, w);
    return b.defined() ? y + b : y;
  }
  return at::linear(x, w, b);
}

}  // namespace

at::Tensor Gpt::Attention(const at::Tensor& qkv_in, int64_t local_heads, int64_t head_dim) {
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), width = local_heads * head_dim;
  std::vector<at::Tensor> qkv = qkv_in.split(width, -1);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, local_heads, head_dim}).transpose(1, 2); };
  at::Tensor y = sp_ && sp_->size() > 1
                     ? SequenceParallelAttention(sp_mode_, heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), sp_.get())
                     : at::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, 0.0,
                                                        /*is_causal=*/true);
  return y.transpose(1, 2).reshape({B, T, width});
}

at::Tensor Gpt::GridLinear(const at::Tensor& x, const std::string& weight, const std::string& bias, bool second) {
  at::Tensor w = Use(weight);  // [out part, in part]: its transpose is this rank's block of Wᵀ.
  at::Tensor rows = x.reshape({-1, x.size(-1)});
  at::Tensor y;
  if (shape_.layout == TpLayout::k3D) {
    // First of a pair: input hidden over z, rows sub-chunked over y → output hidden over y, rows over z.
    Communicator* X = axes_[0].get();
    Communicator* Y = axes_[1].get();
    Communicator* Z = axes_[2].get();
    y = second ? Linear3D(rows, w.t(), Z, X, Y) : Linear3D(rows, w.t(), Y, X, Z);
  } else {
    y = Summa(rows, w.t(), grid_);
  }
  return y.view({x.size(0), x.size(1), w.size(0)}) + Use(bias);
}

at::Tensor Gpt::GridBlock(const at::Tensor& x_in, int i) {
  const int64_t local_heads = config_.heads / shape_.q;
  const int64_t head_dim = config_.hidden / config_.heads;
  const std::string b = absl::StrCat("h.", i, ".");
  // Norms normalise over the hidden split along grid_.row (2D/2.5D: j; 3D: z).
  at::Tensor a = LayerNorm2D(x_in, Use(b + "ln_1.weight"), Use(b + "ln_1.bias"), kLayerNormEps, grid_);
  a = GridLinear(a, b + "attn.c_attn.weight", b + "attn.c_attn.bias", false);  // This rank's heads.
  at::Tensor y = Attention(a, local_heads, head_dim);
  at::Tensor x = x_in + GridLinear(y, b + "attn.c_proj.weight", b + "attn.c_proj.bias", true);
  at::Tensor m = LayerNorm2D(x, Use(b + "ln_2.weight"), Use(b + "ln_2.bias"), kLayerNormEps, grid_);
  m = at::gelu(GridLinear(m, b + "mlp.c_fc.weight", b + "mlp.c_fc.bias", false));
  return x + GridLinear(m, b + "mlp.c_proj.weight", b + "mlp.c_proj.bias", true);
}

at::Tensor Gpt::Block(const at::Tensor& x_in, int i) {
  if (shape_.layout != TpLayout::k1D) return GridBlock(x_in, i);
  Communicator* tp = tp_.get();
  const int64_t local_heads = config_.heads / tp->size();
  const int64_t head_dim = config_.hidden / config_.heads;
  const std::string b = absl::StrCat("h.", i, ".");
  // Attention: column-parallel qkv (this rank's heads), row-parallel output projection.
  const bool fused = kernels::SelectKernels(x_in, fused_kernels_) != nullptr;
  at::Tensor a = kernels::LayerNorm(x_in, P(b + "ln_1.weight"), P(b + "ln_1.bias"), kLayerNormEps, fused);
  a = Linear(CopyToTp(a, tp), P(b + "attn.c_attn.weight"), P(b + "attn.c_attn.bias"));
  at::Tensor y = Attention(a, local_heads, head_dim);
  y = ReduceFromTp(Linear(y, P(b + "attn.c_proj.weight")), tp) + P(b + "attn.c_proj.bias");
  at::Tensor x = x_in + y;
  // MLP: column-parallel c_fc, GELU (erf), row-parallel c_proj.
  at::Tensor m = kernels::LayerNorm(x, P(b + "ln_2.weight"), P(b + "ln_2.bias"), kLayerNormEps, fused);
  if (fused) {
    // Fused: the bias add rides in the GELU kernel instead of the matmul's epilogue.
    m = kernels::BiasGelu(Linear(CopyToTp(m, tp), P(b + "mlp.c_fc.weight")), P(b + "mlp.c_fc.bias"), true);
  } else {
    m = at::gelu(Linear(CopyToTp(m, tp), P(b + "mlp.c_fc.weight"), P(b + "mlp.c_fc.bias")));
  }
  m = ReduceFromTp(Linear(m, P(b + "mlp.c_proj.weight")), tp) + P(b + "mlp.c_proj.bias");
  return x + m;
}

at::Tensor Gpt::Embed(const at::Tensor& tokens) {
  Communicator* tp = tp_.get();
  const int64_t vocab_start = tp->rank() * (config_.vocab / tp->size());
  if (hooks_) hooks_->PreForward(0, false);
  const int64_t T = tokens.size(1);
  const int64_t first_position = sp_ ? sp_->rank() * T : 0;
  if (shape_.layout != TpLayout::k1D) {
    // Embeddings split by hidden like the activations between blocks: a local lookup.
    return at::embedding(Use("wte.weight"), tokens) + Use("wpe.weight").narrow(0, first_position, T);
  }
  return VocabParallelEmbedding(tokens, P("wte.weight"), vocab_start, tp) + P("wpe.weight").narrow(0, first_position, T);
}

at::Tensor Gpt::Blocks(at::Tensor x, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    const int unit = UnitOfLayer(i);
    if (hooks_) hooks_->PreForward(unit, false);
    x = activation_checkpointing_ ? CheckpointedBlock(x, i) : Block(x, i);
    if (hooks_) x = hooks_->PostForward(unit, x);
  }
  return x;
}

at::Tensor Gpt::Head(const at::Tensor& x_in, const at::Tensor& targets) {
  Communicator* tp = tp_.get();
  const int64_t B = x_in.size(0), T = x_in.size(1);
  const int64_t vocab_start = tp->rank() * (config_.vocab / tp->size());
  if (hooks_ && !part_.embedding) hooks_->PreForward(0, false);
  if (shape_.layout != TpLayout::k1D) {
    // Logits of this rank's samples: the hidden-split products summed over the hidden axis and
    // scattered by vocabulary, then the vocab-parallel loss over that axis; the mean over the axes
    // that split the samples.
    at::Tensor x = LayerNorm2D(x_in, Use("ln_f.weight"), Use("ln_f.bias"), kLayerNormEps, grid_);
    at::Tensor partial = at::matmul(x, Use("wte.weight").t());  // [B, T, V], partial over the hidden axis.
    at::Tensor logits = ReduceScatterAlong(partial, 2, grid_.row);
    const int64_t start = grid_.row->rank() * (config_.vocab / grid_.q);
    at::Tensor loss = VocabParallelCrossEntropy(logits.reshape({B * T, -1}), targets.reshape({B * T}), start, grid_.row)
                          .mean();
    for (size_t a = 0; a + 1 < axes_.size(); ++a) loss = ReduceFromTp(loss / axes_[a]->size(), axes_[a].get());
    if (hooks_) loss = hooks_->PostForward(0, loss);
    return loss;
  }
  at::Tensor x = kernels::LayerNorm(x_in, P("ln_f.weight"), P("ln_f.bias"), kLayerNormEps, fused_kernels_);
  at::Tensor logits = Linear(CopyToTp(x, tp), P("wte.weight"));  // Tied head: [B, T, V/tp].
  // Low-precision logits: the softmax and the loss are computed in fp32 — by the fused kernel
  // reading the 16-bit logits, or by ATen on an fp32 copy.
  const kernels::FusedKernels* k = kernels::SelectKernels(logits, fused_kernels_);
  if (k == nullptr && logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);
  at::Tensor losses = VocabParallelCrossEntropy(logits.view({B * T, -1}), targets.reshape({B * T}),
                                                vocab_start, tp, k);
  at::Tensor loss = losses.mean();
  if (hooks_) loss = hooks_->PostForward(0, loss);
  return loss;
}

at::Tensor Gpt::Loss(const at::Tensor& tokens, const at::Tensor& targets) {
  return Head(Blocks(Embed(tokens), 0, config_.layers), targets);
}

namespace {

// Activation checkpointing of one block: forward keeps only the block's input; backward runs the
// block's forward again with autograd on and back-propagates through it (a reentrant backward, as
// torch.utils.checkpoint's reentrant mode). Parameter gradients accumulate into their .grad as usual;
// the block's communication (tp all-reduces) is repeated in the recomputation on every tp rank.
struct CheckpointFn : public torch::autograd::Function<CheckpointFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Gpt* model, int64_t block) {
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["block"] = block;
    ctx->save_for_backward({x});
    at::NoGradGuard no_grad;
    return model->Block(x, static_cast<int>(block));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Gpt* model = reinterpret_cast<Gpt*>(ctx->saved_data["model"].toInt());
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      const int block = static_cast<int>(ctx->saved_data["block"].toInt());
      if (model->unit_hooks()) model->unit_hooks()->PreForward(model->UnitOfLayer(block), true);
      y = model->Block(x, block);
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Gpt::CheckpointedBlock(const at::Tensor& x, int i) { return CheckpointFn::apply(x, this, i); }

}  // namespace tessera::parallel
