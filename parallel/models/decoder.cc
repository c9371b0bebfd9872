#include "parallel/models/decoder.h"

#include "layout/check_layout.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "kernels/fused_ops.h"
#include "parallel/layers/linear.h"
#include "parallel/layers/sparse_mlp.h"
#include "parallel/layers/tp2d_ops.h"
#include "parallel/layers/tp3d_ops.h"
#include "parallel/layers/tp_ops.h"

namespace tessera::parallel {

using formats::model::BlockParamName;
using formats::model::ExpertParamName;
using formats::model::FamilyOf;
using formats::model::FamilySpec;
using formats::model::LoraParamSpecs;
using formats::model::MlpKind;
using formats::model::ModelPart;
using formats::model::NormKind;
using formats::model::ParamSpec;
using formats::model::PositionKind;
using formats::model::RouterName;
using formats::model::SharedExpertGateName;
using formats::model::SharedExpertParamName;
using formats::model::TiedEmbeddingName;

namespace {

std::string Shape(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) absl::StrAppend(&out, i ? "," : "", s[i]);
  return out + "]";
}

}  // namespace

Param& Decoder::Add(const ParamSpec& spec, uint64_t seed) {
  at::Tensor full;
  if (spec.init_std > 0) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(TensorSeed(seed, spec.name));
    full = at::normal(0.0, spec.init_std, spec.shape, gen);
  } else if (spec.uniform_bound > 0) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(TensorSeed(seed, spec.name));
    full = at::empty(spec.shape, at::kFloat).uniform_(-spec.uniform_bound, spec.uniform_bound, gen);
  } else {
    full = at::full(spec.shape, spec.fill);
  }
  Param p;
  p.name = spec.name;
  p.full_shape = spec.shape;
  p.split = spec.split;
  p.grid = spec.grid;
  p.weight_decay = spec.shape.size() >= 2;
  p.expert = spec.expert >= 0;
  if (config_.lora.enabled() && !spec.lora) {
    // LoRA: a frozen base weight — no gradient, no optimizer state.
    p.value = ShardOf(p, full, tp_->rank(), tp_->size()).to(device_);
    frozen_index_[spec.name] = frozen_.size();
    frozen_.push_back(std::move(p));
    return frozen_.back();
  }
  p.value = ShardOf(p, full, tp_->rank(), tp_->size()).to(device_).set_requires_grad(true);
  index_[spec.name] = params_.size();
  layer_of_.push_back(spec.layer);
  params_.push_back(std::move(p));
  return params_.back();
}

Decoder::Decoder(const ModelConfig& c, std::shared_ptr<Communicator> tp, uint64_t seed, c10::Device device)
    : Decoder(c, ModelPart::Whole(c.layers), std::move(tp), seed, device) {}

Decoder::Decoder(const ModelConfig& c, const ModelPart& part, std::shared_ptr<Communicator> tp, uint64_t seed,
         c10::Device device)
    : config_(c), family_(FamilyOf(c.family)), tied_(TiedEmbeddingName(c)), part_(part), tp_(std::move(tp)),
      device_(device) {
  CheckConfig();
  const std::vector<ParamSpec> specs = ModelParamSpecs(c, part, tp_->size());
  const std::vector<ParamSpec> lora = LoraParamSpecs(c, specs);
  std::set<std::string> trained;  // LoRA: the adapters, and a reward model's score head trained whole.
  for (const ParamSpec& spec : lora) trained.insert(spec.name);
  for (const ParamSpec& spec : specs) {
    if (trained.count(spec.name) == 0) Add(spec, seed);  // With LoRA: frozen.
  }
  for (const ParamSpec& spec : lora) Add(spec, seed);
}

Decoder::Decoder(const ModelConfig& c, const ModelPart& part, std::shared_ptr<Communicator> tp, const TpGrid& grid,
         std::vector<std::shared_ptr<Communicator>> axes, uint64_t seed, c10::Device device)
    : config_(c),
      family_(FamilyOf(c.family)),
      tied_(TiedEmbeddingName(c)),
      part_(part),
      tp_(std::move(tp)),
      shape_(grid),
      axes_(std::move(axes)),
      device_(device) {
  CheckConfig();
  const size_t n = axes_.size();
  grid_ = Grid2D{axes_[n - 1].get(), axes_[n - 2].get(), shape_.q};
  for (const ParamSpec& spec : ModelParamSpecs(c, part, tp_->size(), shape_)) Add(spec, seed);
}

void Decoder::CheckConfig() const {
  // The class's contract; the Trainer and the spec's validation refuse these first, with the field.
  const std::vector<layout::LayoutProblem> problems =
      layout::TensorParallelProblems(config_, shape_.mode, tp_->size(), shape_.depth, /*micro_batch=*/0);
  TORCH_CHECK(problems.empty(), "Decoder: ", layout::ToStatus(problems).message());
  TORCH_CHECK(!config_.lora.enabled() || config_.family != ModelFamily::kGpt2, "Decoder: LoRA needs the llama shape");
}

int Decoder::UnitOfLayer(int layer) const {
  for (size_t j = 0; j < part_.layers.size(); ++j) {
    if (part_.layers[j] == layer) return 1 + static_cast<int>(j);
  }
  return -1;
}

std::vector<std::vector<size_t>> Decoder::Units() const {
  std::vector<std::vector<size_t>> units(1 + part_.layers.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    units[layer_of_[k] >= 0 ? UnitOfLayer(layer_of_[k]) : 0].push_back(k);
  }
  return units;
}

const Param& Decoder::Named(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return params_[it->second];
  return frozen_.at(frozen_index_.at(name));
}

const at::Tensor& Decoder::P(const std::string& name) const { return Named(name).value; }

std::vector<int64_t> Decoder::ActivationShape(int64_t samples, int64_t positions) const {
  if (shape_.mode != TpMode::k1D) return {samples, positions, config_.hidden / shape_.q};
  return {samples, positions, config_.hidden};
}

int64_t Decoder::num_parameters() const {
  int64_t n = 0;
  for (const std::vector<Param>* list : {&params_, &frozen_}) {
    for (const Param& p : *list) {
      int64_t k = 1;
      for (int64_t d : p.full_shape) k *= d;
      n += k;
    }
  }
  return n;
}

absl::Status Decoder::LoadFull(const std::map<std::string, at::Tensor>& full, LoadWhat what) {
  const bool lora = config_.lora.enabled();
  for (std::vector<Param>* list : {&params_, &frozen_}) {
    if (what == LoadWhat::kTrainable && list == &frozen_) break;
    for (Param& p : *list) {
      auto it = full.find(p.name);
      if (it == full.end()) {
        if (lora && what == LoadWhat::kModel && list == &params_) continue;  // An adapter keeps its values.
        // A reward model started from a causal LM: the score head keeps its draw (hf_files.h).
        if (what == LoadWhat::kModel && p.name == formats::model::kScoreWeight) continue;
        return absl::NotFoundError(absl::StrCat("tensor ", p.name, " is missing"));
      }
      if (!it->second.sizes().equals(p.full_shape)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", p.name, " has shape ", Shape(it->second.sizes()),
                                                       ", expected ", Shape(p.full_shape)));
      }
      at::NoGradGuard no_grad;
      // The part first, then its dtype: a view of a mapped file (hf_weights.h) is read only where needed.
      p.value.copy_(ShardOf(p, it->second, tp_->rank(), tp_->size()));
    }
  }
  return absl::OkStatus();
}

at::Tensor Decoder::Attention(const at::Tensor& qkv_in, int64_t local_heads, int64_t head_dim, int layer) {
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), width = local_heads * head_dim;
  std::vector<at::Tensor> qkv = qkv_in.split(width, -1);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, local_heads, head_dim}).transpose(1, 2); };
  at::Tensor y = Attend(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), layer);
  return y.transpose(1, 2).reshape({B, T, width});
}

void KvCache::SelectRows(const at::Tensor& rows) {
  for (std::vector<at::Tensor>* blocks : {&k, &v}) {
    for (at::Tensor& t : *blocks) {
      if (t.defined()) t = t.index_select(0, rows.to(t.device()));
    }
  }
  if (offsets.defined()) offsets = offsets.index_select(0, rows);
}

at::Tensor Decoder::Attend(const at::Tensor& q, const at::Tensor& k_new, const at::Tensor& v_new, int layer) {
  if (cache_ != nullptr) {
    // Query t (position L + t) sees keys 0..L + t: SDPA's is_causal aligns the corners the other way
    // when there are more keys than queries, so the mask is explicit.
    const int64_t L = cache_->length, B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
    const int64_t kv = k_new.size(1), group = H / kv;
    at::Tensor& k = cache_->k[layer];
    at::Tensor& v = cache_->v[layer];
    at::Tensor keys, values;
    if (cache_->capacity > 0) {
      TORCH_CHECK(L + T <= cache_->capacity, "the KV cache holds ", cache_->capacity, " positions, not ", L + T);
      if (!k.defined()) {
        k = at::empty({B, kv, cache_->capacity, D}, k_new.options());
        v = at::empty({B, kv, cache_->capacity, D}, v_new.options());
      }
      k.narrow(2, L, T).copy_(k_new);
      v.narrow(2, L, T).copy_(v_new);
      keys = k.narrow(2, 0, L + T);
      values = v.narrow(2, 0, L + T);
    } else {
      k = k.defined() ? at::cat({k, k_new}, 2) : k_new;
      v = v.defined() ? at::cat({v, v_new}, 2) : v_new;
      keys = k;
      values = v;
    }
    at::Tensor rows = at::arange(L, L + T, at::TensorOptions().dtype(at::kLong).device(q.device())).unsqueeze(1);
    at::Tensor cols = at::arange(0, L + T, at::TensorOptions().dtype(at::kLong).device(q.device())).unsqueeze(0);
    at::Tensor mask = (cols <= rows).view({1, 1, T, L + T});
    if (cache_->offsets.defined()) {
      // [B, 1, T, L + T]: a row's padding slots are seen by no query but their own.
      const at::Tensor first = cache_->offsets.to(q.device()).view({-1, 1, 1, 1});
      mask = mask & ((cols >= first) | (cols == rows));
    }
    // Grouped-query attention: the `group` query heads of each key/value head (heads h·group ..
    // h·group + group − 1, transformers' repeat_kv) attend as group·T queries of that head.
    const at::Tensor grouped = q.reshape({B, kv, group * T, D});
    if (group > 1) mask = mask.unsqueeze(2).expand({mask.size(0), 1, group, T, L + T}).reshape({mask.size(0), 1, group * T, L + T});
    return at::scaled_dot_product_attention(grouped, keys, values, mask, 0.0, /*is_causal=*/false).view({B, H, T, D});
  }
  // Packed sequences and shared prefixes: causal within each key's span (ends_, over the whole
  // sequence; a forward that left out the last positions narrows it to its own).
  if (sp_ && sp_->size() > 1) return SequenceParallelAttention(sp_mode_, q, k_new, v_new, sp_.get(), ends_);
  if (ends_.defined()) {
    const int64_t T = q.size(2);
    return at::scaled_dot_product_attention(q, k_new, v_new, SpanCausalMask(ends_, 0, T, 0, T), 0.0, /*is_causal=*/false);
  }
  return at::scaled_dot_product_attention(q, k_new, v_new, {}, 0.0, /*is_causal=*/true);
}

at::Tensor Decoder::Norm(const at::Tensor& x, const std::string& base, bool fused) {
  if (family_.norm == NormKind::kLayerNorm) {
    return kernels::LayerNorm(x, P(base + ".weight"), P(base + ".bias"), config_.norm_eps, fused);
  }
  return RmsNorm(x, P(base + ".weight"));
}

at::Tensor Decoder::RmsNorm(const at::Tensor& x, const at::Tensor& weight) const {
  // As transformers' LlamaRMSNorm: normalised in fp32, back to the input's dtype, then scaled.
  at::Tensor h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_eps);
  return weight * h.to(x.scalar_type());
}

SparseMlpWeights Decoder::SparseWeights(int i) const {
  const FamilySpec& f = family_;
  // Grid layouts: the experts split over the hidden axis, router and shared gate whole on it (see
  // ModelParamSpecs); both copied over the sample axes, whose ranks route other tokens.
  const bool grid = shape_.mode != TpMode::k1D;
  auto part = [&](const std::string& name) { return grid ? Use(name) : P(name); };
  auto whole = [&](const std::string& name) { return grid ? UseAcrossSamples(name) : P(name); };
  SparseMlpWeights w;
  w.router = whole(RouterName(f, i));
  if (router_bias_.defined()) w.router_bias = router_bias_[i];
  const int first = part_.expert_first, last = part_.expert_count < 0 ? config_.experts : first + part_.expert_count;
  for (int e = first; e < last; ++e) {
    w.gate.push_back(part(ExpertParamName(f, i, e, f.expert_gate)));
    w.up.push_back(part(ExpertParamName(f, i, e, f.expert_up)));
    w.down.push_back(part(ExpertParamName(f, i, e, f.expert_down)));
  }
  if (config_.shared_expert_ffn_hidden > 0) {
    w.shared_gate_proj = part(SharedExpertParamName(f, i, "gate_proj"));
    w.shared_up = part(SharedExpertParamName(f, i, "up_proj"));
    w.shared_down = part(SharedExpertParamName(f, i, "down_proj"));
    w.shared_gate = whole(SharedExpertGateName(f, i));
  }
  if (config_.lora.enabled() && !grid) ExpertAdapters(i, first, last, &w);
  return w;
}

at::Tensor Decoder::Rotary(const at::Tensor& t, int64_t first_position) const {
  // transformers' default rope: inv_freq = 1 / theta^(2j/D) in fp32, angles position·inv_freq (one
  // fp32 product each), both halves of the head dimension rotated by the same angles.
  const int64_t T = t.size(2), D = t.size(3);
  at::Tensor inv_freq = at::pow(config_.rope_theta, at::arange(0, D, 2, at::kLong).to(at::kFloat) / D).reciprocal();
  if (const RopeScaling& r = config_.rope_scaling; r.enabled()) {
    // transformers' _compute_llama3_parameters, op for op in fp32 (scalar / tensor is reciprocal · scalar).
    const double old_len = r.original_max_positions;
    const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
    at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    at::Tensor smooth = (wavelen.reciprocal() * old_len - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    at::Tensor medium = (wavelen < high_wavelen).logical_not().logical_and((wavelen > low_wavelen).logical_not());
    inv_freq = at::where(medium, smoothed, scaled);
  }
  at::Tensor angles;
  if (positions_.defined() && cache_ == nullptr) {
    // Packed sequences: each token's own position; [B, 1, T, D/2] to broadcast over the heads.
    angles = (LocalPositions(T).to(at::kCPU).to(at::kFloat).unsqueeze(-1) * inv_freq).unsqueeze(1);
  } else if (cache_ != nullptr && cache_->offsets.defined()) {
    // Left-padded rows: each row's positions count from its first token (its padding's clamped to 0).
    angles = (PaddedPositions(T).to(at::kFloat).unsqueeze(-1) * inv_freq).unsqueeze(1);
  } else {
    at::Tensor positions = at::arange(first_position, first_position + T, at::kLong).to(at::kFloat);
    angles = at::outer(positions, inv_freq);  // [T, D/2]
  }
  at::Tensor emb = at::cat({angles, angles}, -1);
  at::Tensor cos = emb.cos().to(t.scalar_type()).to(t.device());
  at::Tensor sin = emb.sin().to(t.scalar_type()).to(t.device());
  std::vector<at::Tensor> halves = t.chunk(2, -1);
  at::Tensor rotated = at::cat({-halves[1], halves[0]}, -1);
  return t * cos + rotated * sin;
}

at::Tensor Decoder::SplitQkvAttention(const at::Tensor& a, int i) {
  Communicator* tp = tp_.get();
  const FamilySpec& f = family_;
  const int64_t D = config_.HeadDim();
  const int64_t H = config_.heads / tp->size();
  const int kv = config_.KvHeads();
  auto bias = [&](const std::string& role) {
    return config_.qkv_bias ? P(BlockParamName(f, i, role, "bias")) : at::Tensor();
  };
  at::Tensor wk = P(BlockParamName(f, i, f.k)), wv = P(BlockParamName(f, i, f.v));
  at::Tensor bk = bias(f.k), bv = bias(f.v);
  int64_t local_kv = kv / tp->size();
  std::pair<int64_t, int64_t> kv_rows = {0, -1};  // LoRA: B's rows of this rank's key/value heads.
  if (kv < tp->size()) {
    // Every rank holds all key/value heads; its query heads share one of them, numbered rank·kv/tp.
    // The ranks sharing it add their gradients (CopyToTp's backward sums over tp).
    const int64_t head = static_cast<int64_t>(tp->rank()) * kv / tp->size();
    wk = CopyToTp(wk, tp).narrow(0, head * D, D);
    wv = CopyToTp(wv, tp).narrow(0, head * D, D);
    if (bk.defined()) bk = CopyToTp(bk, tp).narrow(0, head * D, D);
    if (bv.defined()) bv = CopyToTp(bv, tp).narrow(0, head * D, D);
    local_kv = 1;
    kv_rows = {head * D, D};
  }
  const std::string q = BlockParamName(f, i, f.q);
  return HeadsAttention(LoraColumn(BlockLinear(a, q, P(q), bias(f.q)), a, i, f.q),
                        LoraColumn(BlockLinear(a, BlockParamName(f, i, f.k), wk, bk), a, i, f.k, kv_rows),
                        LoraColumn(BlockLinear(a, BlockParamName(f, i, f.v), wv, bv), a, i, f.v, kv_rows), H, local_kv,
                        i);
}

at::Tensor Decoder::HeadsAttention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, int64_t H,
                                   int64_t local_kv, int i) {
  const FamilySpec& f = family_;
  const int64_t B = q_in.size(0), T = q_in.size(1), D = config_.HeadDim();
  auto heads = [&](const at::Tensor& t, int64_t n) { return t.view({B, T, n, D}).transpose(1, 2); };
  at::Tensor q = heads(q_in, H);
  at::Tensor k = heads(k_in, local_kv);
  at::Tensor v = heads(v_in, local_kv);
  if (config_.qk_norm) {
    // Qwen3: each head's queries and keys RMS-normalised over the head dimension, before rotary. The
    // weights are used on this rank's heads: their gradients are summed over tp.
    q = RmsNorm(q, CopyToTp(P(BlockParamName(f, i, f.q_norm)), tp_.get()));
    k = RmsNorm(k, CopyToTp(P(BlockParamName(f, i, f.k_norm)), tp_.get()));
  }
  if (f.positions == PositionKind::kRotary) {
    q = Rotary(q, FirstPosition(T));
    k = Rotary(k, FirstPosition(T));
  }
  if (local_kv != H && cache_ == nullptr) {  // Grouped-query attention: each key/value head serves H / local_kv
    k = k.repeat_interleave(H / local_kv, 1);   // query heads (Attend groups them itself with a KV cache).
    v = v.repeat_interleave(H / local_kv, 1);
  }
  return Attend(q, k, v, i).transpose(1, 2).reshape({B, T, H * D});
}

const Fp8Options* Decoder::Fp8For(const std::string& weight) const {
  if (!fp8_) return nullptr;
  for (const std::string& pattern : fp8_->filter) {
    if (weight.find(pattern) != std::string::npos) return nullptr;
  }
  return &*fp8_;
}

at::Tensor Decoder::BlockLinear(const at::Tensor& x, const std::string& weight, const at::Tensor& w, const at::Tensor& b) {
  Fp8Scope fp8(Fp8For(weight));
  return Linear(x, w, b);
}

at::Tensor Decoder::Block(const at::Tensor& x_in, int i) {
  if (shape_.mode != TpMode::k1D) return GridBlock(x_in, i);
  Communicator* tp = tp_.get();
  const FamilySpec& f = family_;
  const int64_t local_heads = config_.heads / tp->size();
  const int64_t head_dim = config_.HeadDim();
  auto name = [&](const std::string& role, const char* kind = "weight") { return BlockParamName(f, i, role, kind); };
  const std::string block = absl::StrCat(f.block_prefix, i, ".");
  // Attention: column-parallel q, k, v (this rank's heads), row-parallel output projection.
  const bool fused = kernels::SelectKernels(x_in, fused_kernels_) != nullptr;
  at::Tensor a = Norm(x_in, block + f.attn_norm, fused);
  at::Tensor y;
  if (f.fused_qkv) {
    a = BlockLinear(CopyToTp(a, tp), name(f.qkv), P(name(f.qkv)), f.biases ? P(name(f.qkv, "bias")) : at::Tensor());
    y = Attention(a, local_heads, head_dim, i);
  } else {
    y = SplitQkvAttention(CopyToTp(a, tp), i);
  }
  y = LoraRow(ReduceFromTp(BlockLinear(y, name(f.attn_out), P(name(f.attn_out))), tp), y, i, f.attn_out);
  if (f.biases) y = y + P(name(f.attn_out, "bias"));
  at::Tensor x = x_in + y;
  if (loss_rows_.defined() && i == config_.layers - 1) {
    // Only the rows the loss reads go on (loss_rows()): [1, N, h].
    x = x.reshape({-1, x.size(2)}).index_select(0, loss_rows_).unsqueeze(0);
  }
  // MLP: column-parallel input projection(s), the activation, row-parallel output projection.
  at::Tensor m = Norm(x, block + f.mlp_norm, fused);
  if (config_.IsMoeLayer(i)) {
    SparseMlpOptions options{config_.experts_per_token, config_.norm_topk_prob, config_.capacity_factor,
                             config_.router_jitter};
    options.gemm = expert_gemm_.value_or(DefaultExpertGemm(m));
    Fp8Scope fp8(Fp8For(absl::StrCat(block, "mlp.experts")));  // Experts and shared experts; not the router.
    return x + SparseMlp(m, SparseWeights(i), options, tp, ep_.get(), router_stats_.get(), !recomputing_, i);
  }
  if (f.mlp == MlpKind::kSwiGlu) {
    at::Tensor in = CopyToTp(m, tp);
    m = at::silu(LoraColumn(BlockLinear(in, name(f.gate), P(name(f.gate))), in, i, f.gate)) *
        LoraColumn(BlockLinear(in, name(f.up), P(name(f.up))), in, i, f.up);
  } else if (config_.gelu_tanh) {
    m = at::gelu(BlockLinear(CopyToTp(m, tp), name(f.mlp_in), P(name(f.mlp_in)),
                             f.biases ? P(name(f.mlp_in, "bias")) : at::Tensor()),
                 "tanh");
  } else if (fused) {
    // Fused: the bias add rides in the GELU kernel (erf) instead of the matmul's epilogue.
    m = kernels::BiasGelu(BlockLinear(CopyToTp(m, tp), name(f.mlp_in), P(name(f.mlp_in))), P(name(f.mlp_in, "bias")),
                          true);
  } else {
    m = at::gelu(BlockLinear(CopyToTp(m, tp), name(f.mlp_in), P(name(f.mlp_in)),
                             f.biases ? P(name(f.mlp_in, "bias")) : at::Tensor()));
  }
  m = LoraRow(ReduceFromTp(BlockLinear(m, name(f.mlp_out), P(name(f.mlp_out))), tp), m, i, f.mlp_out);
  if (f.biases) m = m + P(name(f.mlp_out, "bias"));
  return x + m;
}

at::Tensor Decoder::RealIds(const at::Tensor& ids) { return at::where(ids < 0, -ids - 1, ids); }

void Decoder::set_positions(at::Tensor positions) {
  positions_ = std::move(positions);
  // Each position's span (once per micro-batch, not per layer).
  ends_ = positions_.defined() ? PositionSpanEnds(positions_) : at::Tensor();
}

at::Tensor Decoder::LocalPositions(int64_t T) const {
  if (!sp_ || sp_->size() == 1) return positions_.narrow(1, 0, T);  // Loss may leave out the last ones.

  const int64_t block = positions_.size(1) / sp_->size();
  return positions_.narrow(1, sp_->rank() * block, block);
}

at::Tensor Decoder::PaddedPositions(int64_t T) const {
  const at::Tensor slots = at::arange(cache_->length, cache_->length + T, at::kLong).unsqueeze(0);  // [1, T]
  return (slots - cache_->offsets.to(at::kCPU).unsqueeze(1)).clamp_min(0);                     // [B, T]
}

at::Tensor Decoder::LearnedPositions(const at::Tensor& table, int64_t first_position, int64_t T) const {
  if (positions_.defined() && cache_ == nullptr) return at::embedding(table, LocalPositions(T).to(table.device()));
  if (cache_ != nullptr && cache_->offsets.defined()) return at::embedding(table, PaddedPositions(T).to(table.device()));
  return table.narrow(0, first_position, T);
}

at::Tensor Decoder::Embed(const at::Tensor& tokens_in) {
  const at::Tensor tokens = masked_targets_ ? RealIds(tokens_in) : tokens_in;
  Communicator* tp = tp_.get();
  const int64_t vocab_start = tp->rank() * VocabPart();
  if (hooks_) hooks_->PreForward(0, false);
  const int64_t T = tokens.size(1);
  const int64_t first_position = FirstPosition(T);
  if (shape_.mode != TpMode::k1D) {
    // Embeddings split by hidden like the activations between blocks: a local lookup.
    at::Tensor x = at::embedding(Use(family_.token_embedding + ".weight"), tokens);
    if (family_.positions == PositionKind::kLearned) {
      x = x + LearnedPositions(Use(family_.position_embedding + ".weight"), first_position, T);
    }
    return x;
  }
  at::Tensor x = VocabParallelEmbedding(tokens, P(family_.token_embedding + ".weight"), vocab_start, tp);
  if (family_.positions == PositionKind::kLearned) {
    x = x + LearnedPositions(P(family_.position_embedding + ".weight"), first_position, T);
  }
  return x;
}

at::Tensor Decoder::Blocks(at::Tensor x, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    const int unit = UnitOfLayer(i);
    if (hooks_) hooks_->PreForward(unit, false);
    x = activation_checkpointing_ ? CheckpointedBlock(x, i) : Block(x, i);
    if (hooks_) x = hooks_->PostForward(unit, x);
  }
  return x;
}

at::Tensor Decoder::DecodeStep(const at::Tensor& tokens, KvCache* cache) {
  TORCH_CHECK(shape_.mode == TpMode::k1D && (!sp_ || sp_->size() == 1) && (!ep_ || ep_->size() == 1) &&
                  part_.embedding && part_.head && static_cast<int>(part_.layers.size()) == config_.layers,
              "DecodeStep needs the whole model on each rank of a 1D tp group (no pipeline, sequence, grid or "
              "expert parallelism)");
  TORCH_CHECK(!config_.score_head, "DecodeStep needs an LM head (a reward model scores, it does not decode)");
  at::NoGradGuard no_grad;
  cache->k.resize(config_.layers);
  cache->v.resize(config_.layers);
  cache_ = cache;
  at::Tensor x = Embed(tokens);
  // The unit hooks (ZeRO-3's gathers) as a forward pass's; without activation checkpointing.
  for (int i = 0; i < config_.layers; ++i) {
    const int unit = UnitOfLayer(i);
    if (hooks_) hooks_->PreForward(unit, false);
    x = Block(x, i);
    if (hooks_) x = hooks_->PostForward(unit, x);
  }
  x = Norm(x, family_.final_norm, fused_kernels_);
  cache_ = nullptr;
  cache->length += tokens.size(1);
  at::Tensor logits = Linear(x, P(tied_.empty() ? family_.lm_head + ".weight" : tied_)).to(at::kFloat);
  if (tp_->size() > 1) {
    // Each rank's vocabulary rows (the last rank's padded past vocab): gathered in rank order, the
    // padding dropped — the same logits on every member of the group.
    logits = GatherAlong(logits, 2, tp_.get()).narrow(2, 0, config_.vocab);
  }
  return logits;
}

at::Tensor Decoder::Loss(const at::Tensor& tokens_in, const at::Tensor& targets_in) {
  const int last = config_.layers - 1;
  at::Tensor tokens = tokens_in, targets = targets_in;
  if (masked_targets_ && shape_.mode == TpMode::k1D && !config_.IsMoeLayer(last) && config_.lora.dropout == 0) {
    at::Tensor trained = targets >= 0;  // [B, T]
    // Positions after the batch's last trained target reach no loss (attention is causal): without
    // sequence parallelism (its blocks are fixed) or a Mixture of Experts (its balancing statistics
    // count every routed token), they are left out — with set positions too (LocalPositions and
    // the masks take the first ones).
    const bool whole_sequence = (!sp_ || sp_->size() == 1) && !config_.IsMoe();
    if (whole_sequence && targets.size(1) > 1) {
      const at::Tensor any = trained.any(0).nonzero();
      const int64_t keep = any.size(0) > 0 ? any.max().item<int64_t>() + 1 : targets.size(1);
      if (keep < targets.size(1)) {
        tokens = tokens.narrow(1, 0, keep);
        targets = targets.narrow(1, 0, keep);
        trained = trained.narrow(1, 0, keep);
      }
    }
    at::Tensor rows = trained.reshape({-1}).nonzero().squeeze(1);
    if (rows.size(0) > 0 && (rows.size(0) < targets.numel() || targets.numel() < targets_in.numel())) {
      loss_rows_ = rows;
      loss_positions_ = targets_in.numel();
    }
  }
  auto clear = absl::MakeCleanup([&] { loss_rows_ = at::Tensor(); });  // Also when a collective throws.
  return Head(Blocks(Embed(tokens), 0, config_.layers), targets);
}

}  // namespace tessera::parallel
