// The tp group's shape (1D or a grid) and the parameters' splits under it (decoder.h).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

using formats::model::FamilyOf;
using formats::model::FamilySpec;
using formats::model::GridSplit;
using formats::model::LoraParamSpecs;
using formats::model::ModelPart;
using formats::model::ParamSpec;
using formats::model::ParamSpecs1D;
using formats::model::TpSplit;

std::vector<ParamSpec> ModelParamSpecs(const ModelConfig& c, const ModelPart& part, int tp_size, const TpGrid& tp) {
  std::vector<ParamSpec> out = ParamSpecs1D(c, part, tp_size);
  if (tp.mode == TpMode::k1D) return out;
  const std::vector<int> grid = tp.Axes();
  // 2D/2.5D: the grid's last two axes are (i, j); 3D: (x, y, z).
  const int n = static_cast<int>(grid.size());
  const int i = n - 2, j = n - 1;
  const FamilySpec& f = FamilyOf(c.family);
  // Linears that take the activations' layout to the other one (3D), first of a pair: q, k, v (or
  // the fused qkv), the MLP's input(s); the output projections bring them back.
  std::set<std::string> first_roles;
  for (const std::string* role : {&f.qkv, &f.q, &f.k, &f.v, &f.mlp_in, &f.gate, &f.up}) {
    if (!role->empty()) first_roles.insert(*role);
  }
  auto role_of = [&](const ParamSpec& p) {
    if (p.layer < 0) return std::string();
    std::string r = p.name.substr(absl::StrCat(f.block_prefix, p.layer, ".").size());
    return r.substr(0, r.rfind('.'));  // Less ".weight" / ".bias".
  };
  auto embedding_like = [&](const std::string& name) {
    for (const std::string* base : {&f.token_embedding, &f.position_embedding, &f.lm_head}) {
      if (!base->empty() && name == *base + ".weight") return true;
    }
    return name == formats::model::kScoreWeight;  // [1, hidden]: split by hidden, as the LM head.
  };
  // Mixture of Experts: the router, the experts and the shared expert act on the block's input made
  // whole along the hidden axis (Decoder::GridSparseMlp), as 1D tp over that axis's q ranks: experts
  // split like 1D, router and shared gate whole; all copied over the axes that split the samples.
  // The q/k norms act on every head alike: whole on every rank.
  const int hidden_axis = n - 1;
  const std::string moe_prefix = f.moe + ".";
  auto whole_on_the_grid_row = [&](const ParamSpec& p, const std::string& role) {
    if (p.layer >= 0 && c.IsMoeLayer(p.layer) && !f.moe.empty() && role.rfind(moe_prefix, 0) == 0) return true;
    return c.qk_norm && (role == f.q_norm || role == f.k_norm);
  };
  for (ParamSpec& p : out) {
    GridSplit g;
    g.grid = grid;
    const std::string role = role_of(p);
    if (whole_on_the_grid_row(p, role)) {
      if (p.split == TpSplit::kDim0) g.dim0 = {hidden_axis};
      if (p.split == TpSplit::kDim1) g.dim1 = {hidden_axis};
      p.split = TpSplit::kGrid;
      p.grid = std::move(g);
      continue;
    }
    g.qkv = !f.qkv.empty() && role == f.qkv;
    const bool first_of_pair = first_roles.count(role) > 0;  // Input layout → other.
    if (tp.mode == TpMode::k3D) {
      const int x = 0, y = 1, z = 2;
      if (p.shape.size() == 1) {
        // Biases follow their linear's output layout (hidden over y after the first of a pair);
        // norms act between blocks (hidden over z).
        g.dim0 = {first_of_pair ? y : z};
      } else if (embedding_like(p.name)) {
        g.dim1 = {z};
      } else {
        // Wᵀ's row (input) blocks over the contraction axis, sub-chunked over x; columns over the other.
        g.dim0 = {first_of_pair ? y : z};
        g.dim1 = {first_of_pair ? z : y, x};
      }
    } else if (p.shape.size() == 1) {
      g.dim0 = {j};
    } else if (embedding_like(p.name)) {
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

std::vector<ParamSpec> TrainedParamSpecs(const ModelConfig& c, const ModelPart& part, int tp_size, const TpGrid& tp) {
  std::vector<ParamSpec> specs = ModelParamSpecs(c, part, tp_size, tp);
  return c.lora.enabled() ? LoraParamSpecs(c, specs) : specs;
}

}  // namespace tessera::parallel
