#include "formats/model/family.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tessera::formats::model {

const FamilySpec& FamilyOf(ModelFamily family) {
  static const FamilySpec kGpt2 = {
      .norm = NormKind::kLayerNorm, .mlp = MlpKind::kGelu, .positions = PositionKind::kLearned,
      .biases = true, .fused_qkv = true, .residual_init = true, .hf_prefix = "transformer.", .hf_conv1d = true,
      .token_embedding = "wte", .position_embedding = "wpe", .final_norm = "ln_f", .lm_head = "",
      .block_prefix = "h.", .attn_norm = "ln_1", .qkv = "attn.c_attn", .q = "", .k = "", .v = "",
      .attn_out = "attn.c_proj", .mlp_norm = "ln_2", .mlp_in = "mlp.c_fc", .gate = "", .up = "",
      .mlp_out = "mlp.c_proj"};
  static const FamilySpec kLlama = {
      .norm = NormKind::kRmsNorm, .mlp = MlpKind::kSwiGlu, .positions = PositionKind::kRotary,
      .biases = false, .fused_qkv = false, .residual_init = false, .hf_prefix = "model.", .hf_conv1d = false,
      .token_embedding = "embed_tokens", .position_embedding = "", .final_norm = "norm", .lm_head = "lm_head",
      .block_prefix = "layers.", .attn_norm = "input_layernorm", .qkv = "", .q = "self_attn.q_proj",
      .k = "self_attn.k_proj", .v = "self_attn.v_proj", .attn_out = "self_attn.o_proj",
      .mlp_norm = "post_attention_layernorm", .mlp_in = "", .gate = "mlp.gate_proj", .up = "mlp.up_proj",
      .mlp_out = "mlp.down_proj", .q_norm = "self_attn.q_norm", .k_norm = "self_attn.k_norm", .moe = "mlp",
      .router = "gate", .experts = "experts", .expert_gate = "gate_proj", .expert_up = "up_proj",
      .expert_down = "down_proj", .shared_expert = "shared_expert", .shared_expert_gate = "shared_expert_gate"};
  // Mixtral: Llama's names but for its sparse blocks (MixtralSparseMoeBlock: w1 gate, w3 up, w2 down).
  static const FamilySpec kMixtral = [] {
    FamilySpec f = kLlama;
    f.moe = "block_sparse_moe";
    f.expert_gate = "w1";
    f.expert_up = "w3";
    f.expert_down = "w2";
    f.shared_expert = "";
    f.shared_expert_gate = "";
    return f;
  }();
  switch (family) {
    case ModelFamily::kGpt2: return kGpt2;
    case ModelFamily::kLlama: return kLlama;
    case ModelFamily::kMixtral: return kMixtral;
  }
  // Only a value cast from an integer no enumerator has: a broken invariant, never a silent GPT-2.
  std::fprintf(stderr, "FamilyOf: model family %d is not one of gpt, llama, mixtral\n", static_cast<int>(family));
  std::abort();
}

const char* FamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kGpt2: return "gpt";
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kMixtral: return "mixtral";
  }
  return "?";
}

std::string BlockParamName(const FamilySpec& f, int layer, const std::string& role, const char* kind) {
  return absl::StrCat(f.block_prefix, layer, ".", role, ".", kind);
}

std::string ModuleOf(const std::string& param_name) {
  const size_t kind = param_name.rfind('.');
  if (kind == std::string::npos) return "";
  const size_t module = param_name.rfind('.', kind - 1);
  return param_name.substr(module == std::string::npos ? 0 : module + 1,
                           kind - (module == std::string::npos ? 0 : module + 1));
}

std::vector<ParamSpec> LoraParamSpecs(const ModelConfig& c, const std::vector<ParamSpec>& base) {
  std::vector<ParamSpec> out;
  if (!c.lora.enabled()) return out;
  const std::string suffix = ".weight";
  for (const ParamSpec& p : base) {
    if (p.layer < 0 || p.shape.size() != 2 || !c.lora.Targets(ModuleOf(p.name))) continue;
    if (p.name.size() < suffix.size() || p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string stem = p.name.substr(0, p.name.size() - suffix.size());
    const int64_t rows = p.shape[0], cols = p.shape[1], r = c.lora.rank;
    ParamSpec a{stem + ".lora_A.weight", {r, cols}, TpSplit::kReplicated, 0, 0, {}, p.layer, -1, true,
                1.0 / std::sqrt(static_cast<double>(cols))};
    ParamSpec b{stem + ".lora_B.weight", {rows, r}, TpSplit::kReplicated, 0, 0, {}, p.layer, -1, true, 0};
    if (p.split == TpSplit::kDim0) b.split = TpSplit::kDim0;
    if (p.split == TpSplit::kDim1) a.split = TpSplit::kDim1;
    a.expert = b.expert = p.expert;  // An expert's adapters live (and are reduced) with it.
    out.push_back(std::move(a));
    out.push_back(std::move(b));
  }
  for (const ParamSpec& p : base) {
    if (p.name != kScoreWeight) continue;
    ParamSpec head = p;
    head.lora = true;
    out.push_back(std::move(head));
  }
  return out;
}

std::string RouterName(const FamilySpec& f, int layer) {
  return absl::StrCat(f.block_prefix, layer, ".", f.moe, ".", f.router, ".weight");
}

std::string ExpertParamName(const FamilySpec& f, int layer, int expert, const std::string& role) {
  return absl::StrCat(f.block_prefix, layer, ".", f.moe, ".", f.experts, ".", expert, ".", role, ".weight");
}

std::string SharedExpertParamName(const FamilySpec& f, int layer, const std::string& role) {
  return absl::StrCat(f.block_prefix, layer, ".", f.moe, ".", f.shared_expert, ".", role, ".weight");
}

std::string SharedExpertGateName(const FamilySpec& f, int layer) {
  return absl::StrCat(f.block_prefix, layer, ".", f.moe, ".", f.shared_expert_gate, ".weight");
}

ModelPart ModelPart::Whole(int layers) {
  ModelPart part;
  for (int i = 0; i < layers; ++i) part.layers.push_back(i);
  return part;
}

std::string HfParamName(const FamilySpec& f, const std::string& name) {
  return name == "lm_head.weight" || name == kScoreWeight ? name : f.hf_prefix + name;
}

std::string TiedEmbeddingName(const ModelConfig& c) {
  const FamilySpec& f = FamilyOf(c.family);
  if (c.score_head) return "";
  return c.family == ModelFamily::kGpt2 || c.tie_embeddings ? f.token_embedding + ".weight" : "";
}

std::vector<ParamSpec> ParamSpecs1D(const ModelConfig& c, const ModelPart& part, int tp) {
  const FamilySpec& f = FamilyOf(c.family);
  const int64_t h = c.hidden, ffn = c.FfnHidden(), kv = static_cast<int64_t>(c.KvHeads()) * c.HeadDim();
  const double std = 0.02;
  const double out_std = f.residual_init ? 0.02 / std::sqrt(2.0 * c.layers) : std;
  const bool tied = !TiedEmbeddingName(c).empty();
  const TpSplit kv_split = c.KvHeads() >= tp ? TpSplit::kDim0 : TpSplit::kReplicated;
  std::vector<ParamSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, TpSplit split, double init_std, double fill,
                 int layer = -1, int expert = -1) {
    out.push_back({std::move(name), std::move(shape), split, init_std, fill, {}, layer, expert});
  };
  auto norm = [&](const std::string& base, int layer) {
    add(base + ".weight", {h}, TpSplit::kReplicated, 0, 1, layer);
    if (f.biases) add(base + ".bias", {h}, TpSplit::kReplicated, 0, 0, layer);
  };
  if (part.embedding || (part.head && tied)) {
    add(f.token_embedding + ".weight", {c.vocab, h}, TpSplit::kPaddedDim0, std, 0);
  }
  if (part.embedding && f.positions == PositionKind::kLearned) {
    add(f.position_embedding + ".weight", {c.seq_len, h}, TpSplit::kReplicated, std, 0);
  }
  for (int i : part.layers) {
    auto name = [&](const std::string& role, const char* kind = "weight") { return BlockParamName(f, i, role, kind); };
    norm(absl::StrCat(f.block_prefix, i, ".", f.attn_norm), i);
    if (f.fused_qkv) {
      add(name(f.qkv), {3 * h, h}, TpSplit::kQkvDim0, std, 0, i);
      if (f.biases) add(name(f.qkv, "bias"), {3 * h}, TpSplit::kQkvDim0, 0, 0, i);
    } else {
      add(name(f.q), {h, h}, TpSplit::kDim0, std, 0, i);
      add(name(f.k), {kv, h}, kv_split, std, 0, i);
      add(name(f.v), {kv, h}, kv_split, std, 0, i);
      if (c.qkv_bias) {
        add(name(f.q, "bias"), {h}, TpSplit::kDim0, 0, 0, i);
        add(name(f.k, "bias"), {kv}, kv_split, 0, 0, i);
        add(name(f.v, "bias"), {kv}, kv_split, 0, 0, i);
      }
    }
    if (c.qk_norm) {
      add(name(f.q_norm), {c.HeadDim()}, TpSplit::kReplicated, 0, 1, i);
      add(name(f.k_norm), {c.HeadDim()}, TpSplit::kReplicated, 0, 1, i);
    }
    add(name(f.attn_out), {h, h}, TpSplit::kDim1, out_std, 0, i);
    if (f.biases) add(name(f.attn_out, "bias"), {h}, TpSplit::kReplicated, 0, 0, i);
    norm(absl::StrCat(f.block_prefix, i, ".", f.mlp_norm), i);
    if (c.IsMoeLayer(i)) {
      // A sparse block: the router (replicated), each expert's SwiGLU split over tp like a dense MLP,
      // the shared expert likewise and its gate (replicated).
      const int64_t e_ffn = c.MoeFfnHidden(), s_ffn = c.shared_expert_ffn_hidden;
      add(RouterName(f, i), {c.experts, h}, TpSplit::kReplicated, std, 0, i);
      const int first = part.expert_first, last = part.expert_count < 0 ? c.experts : first + part.expert_count;
      for (int e = first; e < last; ++e) {
        add(ExpertParamName(f, i, e, f.expert_gate), {e_ffn, h}, TpSplit::kDim0, std, 0, i, e);
        add(ExpertParamName(f, i, e, f.expert_up), {e_ffn, h}, TpSplit::kDim0, std, 0, i, e);
        add(ExpertParamName(f, i, e, f.expert_down), {h, e_ffn}, TpSplit::kDim1, out_std, 0, i, e);
      }
      if (s_ffn > 0) {
        add(SharedExpertParamName(f, i, "gate_proj"), {s_ffn, h}, TpSplit::kDim0, std, 0, i);
        add(SharedExpertParamName(f, i, "up_proj"), {s_ffn, h}, TpSplit::kDim0, std, 0, i);
        add(SharedExpertParamName(f, i, "down_proj"), {h, s_ffn}, TpSplit::kDim1, out_std, 0, i);
        add(SharedExpertGateName(f, i), {1, h}, TpSplit::kReplicated, std, 0, i);
      }
      continue;
    }
    if (f.mlp == MlpKind::kGelu) {
      add(name(f.mlp_in), {ffn, h}, TpSplit::kDim0, std, 0, i);
      if (f.biases) add(name(f.mlp_in, "bias"), {ffn}, TpSplit::kDim0, 0, 0, i);
    } else {
      add(name(f.gate), {ffn, h}, TpSplit::kDim0, std, 0, i);
      add(name(f.up), {ffn, h}, TpSplit::kDim0, std, 0, i);
    }
    add(name(f.mlp_out), {h, ffn}, TpSplit::kDim1, out_std, 0, i);
    if (f.biases) add(name(f.mlp_out, "bias"), {h}, TpSplit::kReplicated, 0, 0, i);
  }
  if (part.head) {
    norm(f.final_norm, -1);
    if (c.score_head) {
      add(kScoreWeight, {1, h}, TpSplit::kReplicated, std, 0);
    } else if (!tied) {
      add(f.lm_head + ".weight", {c.vocab, h}, TpSplit::kPaddedDim0, std, 0);
    }
  }
  return out;
}

}  // namespace tessera::formats::model
