// Decoder's LoRA parts (decoder.h, docs/fine-tuning.md "LoRA"): the frozen base, the adapters of
// the dense linears and of a sparse block's experts, and LoRA dropout's masks.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <string>

#include "parallel/layers/linear.h"
#include "parallel/layers/tp_ops.h"
#include "parallel/models/decoder.h"

namespace tessera::parallel {

using formats::model::BlockParamName;
using formats::model::ExpertParamName;
using formats::model::FamilySpec;
using formats::model::ModuleOf;
using formats::model::SharedExpertParamName;

void Decoder::CastFrozen(at::ScalarType dtype) {
  for (Param& p : frozen_) p.value = p.value.to(dtype);
}

at::Tensor Decoder::LoraDropout(const at::Tensor& in, int i, const std::string& role, bool columns_split) const {
  const double p = config_.lora.dropout;
  if (p == 0 || !dropout_seed_) return in;
  const int64_t B = in.size(0), T = in.size(1), C = in.size(2);
  const int64_t sp = sp_ ? sp_->size() : 1, tp = columns_split ? tp_->size() : 1;
  const uint64_t seed = TensorSeed(*dropout_seed_, BlockParamName(family_, i, role));
  at::Generator gen;
  if (device_.is_cpu()) {
    gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  } else {
    gen = at::globalContext().defaultGenerator(device_).clone();
    gen.set_current_seed(seed);
  }
  // This generator is ours alone (the kernel takes its lock).
  at::Tensor u = at::rand({B, T * sp, C * tp}, gen, at::TensorOptions().dtype(at::kFloat).device(device_));
  if (sp > 1) u = u.narrow(1, sp_->rank() * T, T);
  if (tp > 1) u = u.narrow(2, tp_->rank() * C, C);
  const at::Tensor keep = (u < 1 - p).to(at::kFloat).div_(1 - p);
  return in * keep.to(in.scalar_type());
}

at::Tensor Decoder::LoraColumn(const at::Tensor& y, const at::Tensor& in, int i, const std::string& role,
                               std::pair<int64_t, int64_t> rows) const {
  if (!adapters_enabled_ || !config_.lora.enabled() || !config_.lora.Targets(ModuleOf(BlockParamName(family_, i, role)))) {
    return y;
  }
  at::Tensor b = P(BlockParamName(family_, i, role, "lora_B.weight"));
  if (rows.second >= 0) b = CopyToTp(b, tp_.get()).narrow(0, rows.first, rows.second);
  const at::Tensor a = CopyToTp(P(BlockParamName(family_, i, role, "lora_A.weight")), tp_.get());
  return AddLinear(y, Linear(LoraDropout(in, i, role, /*columns_split=*/false), a), b, config_.lora.scale());
}

at::Tensor Decoder::LoraRow(const at::Tensor& y, const at::Tensor& in, int i, const std::string& role) const {
  if (!adapters_enabled_ || !config_.lora.enabled() || !config_.lora.Targets(ModuleOf(BlockParamName(family_, i, role)))) {
    return y;
  }
  const at::Tensor t = ReduceFromTp(
      Linear(LoraDropout(in, i, role, /*columns_split=*/true), P(BlockParamName(family_, i, role, "lora_A.weight"))),
      tp_.get());
  return AddLinear(y, t, P(BlockParamName(family_, i, role, "lora_B.weight")), config_.lora.scale());
}

int64_t Decoder::frozen_bytes() const {
  int64_t n = 0;
  for (const Param& p : frozen_) n += static_cast<int64_t>(p.value.nbytes());
  return n;
}

void Decoder::ExpertAdapters(int i, int first, int last, SparseMlpWeights* out) const {
  const FamilySpec& f = family_;
  SparseMlpWeights& w = *out;
  // Adapters of the targeted linears (LoraParamSpecs names them after their weight): A of a
  // column-parallel linear and B of a row-parallel one are whole on every tp rank, their gradients
  // summed over tp.
  Communicator* tp = tp_.get();
  auto adapters = [&](const std::string& weight, bool column, at::Tensor* a, at::Tensor* b) {
    const std::string stem = weight.substr(0, weight.size() - std::string(".weight").size());
    if (!holds(stem + ".lora_A.weight")) return false;
    *a = column ? CopyToTp(P(stem + ".lora_A.weight"), tp) : P(stem + ".lora_A.weight");
    *b = column ? P(stem + ".lora_B.weight") : CopyToTp(P(stem + ".lora_B.weight"), tp);
    return true;
  };
  auto expert = [&](const std::string& gate, const std::string& up, const std::string& down, ExpertLora* l) {
    return adapters(gate, true, &l->gate_a, &l->gate_b) | adapters(up, true, &l->up_a, &l->up_b) |
           adapters(down, false, &l->down_a, &l->down_b);
  };
  bool any = false;
  for (int e = first; e < last; ++e) {
    w.lora.emplace_back();
    any |= expert(ExpertParamName(f, i, e, f.expert_gate), ExpertParamName(f, i, e, f.expert_up),
                  ExpertParamName(f, i, e, f.expert_down), &w.lora.back());
  }
  if (config_.shared_expert_ffn_hidden > 0) {
    any |= expert(SharedExpertParamName(f, i, "gate_proj"), SharedExpertParamName(f, i, "up_proj"),
                  SharedExpertParamName(f, i, "down_proj"), &w.shared_lora);
  }
  if (any && adapters_enabled_) {
    w.lora_scale = config_.lora.scale();
  } else {
    w.lora.clear();
  }
}

}  // namespace tessera::parallel
