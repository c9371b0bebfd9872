// ValidateJobSpec: one SpecError per problem, each naming its field.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "spec/job_spec.h"
#include "spec/layout_of.h"
#include "spec/limits.h"
#include "spec/model_config_of.h"
#include "spec/priority.h"
#include "spec/spec_checker.h"
#include "spec/validate_objective.h"
#include "spec/yaml_to_proto.h"
#include "layout/check_layout.h"
#include "layout/model_config.h"

namespace tessera::spec {
namespace {

using internal::Checker;

// Every enum field of `msg` (recursively) holds a value its enum declares: proto3 enums are open,
// and a request can carry any number (a tp_mode of 99 once crashed the validator: tools/fuzz.sh).
void CheckEnumsKnown(const google::protobuf::Message& msg, const std::string& path, Checker& c) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name = path.empty() ? f->name() : absl::StrCat(path, ".", f->name());
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      const int n = f->is_repeated() ? r->FieldSize(msg, f) : 1;
      for (int i = 0; i < n; ++i) {
        const int value = f->is_repeated() ? r->GetRepeatedEnumValue(msg, f, i) : r->GetEnumValue(msg, f);
        if (f->enum_type()->FindValueByNumber(value) == nullptr) {
          c.Fail(name, absl::StrCat(value, " is not a value of ", f->enum_type()->name()));
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(msg, f) && i < 64; ++i) {
          CheckEnumsKnown(r->GetRepeatedMessage(msg, f, i), absl::StrCat(name, "[", i, "]"), c);
        }
      } else {
        CheckEnumsKnown(r->GetMessage(msg, f), name, c);
      }
    }
  }
}

// Mixture of Experts: the sizes' bounds and what each family's sparse block has. What the layout
// needs of them (top-k within the experts, ep dividing them) is CheckLayout's.
void CheckExperts(const v1::ModelSpec& m, Checker& c) {
  const bool mixtral = m.family() == v1::MODEL_FAMILY_MIXTRAL;
  if (mixtral && m.experts() == 0) c.Fail("model.experts", "mixtral needs experts (at least 1)");
  if (m.experts() < 0) {
    c.Fail("model.experts", absl::StrCat(m.experts(), " must be at least 0 (0: a dense model)"));
    return;
  }
  c.InRange("model.experts", m.experts(), 0, limits::kMaxExperts);
  if (m.experts() == 0) {
    // Written MoE fields without experts would be silently ignored.
    if (m.moe_ffn_hidden() != 0) c.Fail("model.moe_ffn_hidden", "needs model.experts (a dense model has no experts)");
    if (m.shared_expert_ffn_hidden() != 0) c.Fail("model.shared_expert_ffn_hidden", "needs model.experts");
    if (m.dense_layers_size() > 0) c.Fail("model.dense_layers", "needs model.experts (every block is dense)");
    if (m.has_aux_loss_coef()) c.Fail("model.aux_loss_coef", "needs model.experts (there is no router)");
    if (m.capacity_factor() != 0) c.Fail("model.capacity_factor", "needs model.experts (there are no experts)");
    if (m.router_bias_rate() != 0) c.Fail("model.router_bias_rate", "needs model.experts (there is no router)");
    if (m.router_jitter() != 0) c.Fail("model.router_jitter", "needs model.experts (there is no router)");
    return;
  }
  c.InRange("model.moe_ffn_hidden", m.moe_ffn_hidden(), 0, limits::kMaxFfnHidden);
  c.InRange("model.shared_expert_ffn_hidden", m.shared_expert_ffn_hidden(), 0, limits::kMaxFfnHidden);
  c.InRange("model.moe_every", m.moe_every(), 1, limits::kMaxLayers);
  if (m.dense_layers_size() > limits::kMaxLayers) {
    c.Fail("model.dense_layers", absl::StrCat("has ", m.dense_layers_size(), " entries, more than the limit ",
                                              limits::kMaxLayers));
  } else {
    for (int i = 0; i < m.dense_layers_size(); ++i) {
      if (m.dense_layers(i) < 0 || m.dense_layers(i) >= m.layers()) {
        c.Fail(absl::StrCat("model.dense_layers[", i, "]"),
               absl::StrCat(m.dense_layers(i), " is not a block (0 to model.layers − 1 = ", m.layers() - 1, ")"));
      }
    }
  }
  if (m.has_aux_loss_coef() && !(m.aux_loss_coef() >= 0 && m.aux_loss_coef() <= limits::kMaxAuxLossCoef)) {
    c.Fail("model.aux_loss_coef", absl::StrCat(m.aux_loss_coef(), " must be between 0 and ", limits::kMaxAuxLossCoef));
  }
  if (!(m.capacity_factor() >= 0 && m.capacity_factor() <= limits::kMaxExperts)) {
    c.Fail("model.capacity_factor",
           absl::StrCat(m.capacity_factor(), " must be between 0 (dropless) and ", limits::kMaxExperts));
  }
  if (!(m.router_jitter() >= 0 && m.router_jitter() < 1)) {
    c.Fail("model.router_jitter", absl::StrCat(m.router_jitter(), " must be at least 0 (none) and below 1"));
  }
  if (!(m.router_bias_rate() >= 0 && m.router_bias_rate() <= 1)) {
    c.Fail("model.router_bias_rate", absl::StrCat(m.router_bias_rate(), " must be between 0 (off) and 1"));
  }
  if (mixtral) {
    if (m.shared_expert_ffn_hidden() != 0) c.Fail("model.shared_expert_ffn_hidden", "mixtral has no shared expert");
    if (m.has_norm_topk_prob() && !m.norm_topk_prob()) {
      c.Fail("model.norm_topk_prob", "mixtral always renormalises its top-k weights");
    }
    if (m.moe_every() != 1 || m.dense_layers_size() > 0) {
      c.Fail(m.moe_every() != 1 ? "model.moe_every" : "model.dense_layers", "every mixtral block is sparse");
    }
  }
}

void CheckModel(const v1::ModelSpec& m, Checker& c) {
  const bool gpt = m.family() == v1::MODEL_FAMILY_GPT;
  // mixtral is the Llama shape: every llama rule holds for it.
  const bool llama = m.family() == v1::MODEL_FAMILY_LLAMA || m.family() == v1::MODEL_FAMILY_MIXTRAL;
  if (!gpt && !llama) c.Fail("model.family", "must be gpt, llama or mixtral");
  c.InRange("model.layers", m.layers(), 1, limits::kMaxLayers);
  bool hidden_ok = c.InRange("model.hidden", m.hidden(), 1, limits::kMaxHidden);
  bool heads_ok = c.InRange("model.heads", m.heads(), 1, limits::kMaxHeads);
  if (hidden_ok && heads_ok && m.hidden() % m.heads() != 0) {
    c.Fail("model.heads", absl::StrCat(m.heads(), " does not divide model.hidden ", m.hidden()));
  }
  c.InRange("model.vocab", m.vocab(), 2, limits::kMaxVocab);
  c.InRange("model.seq_len", m.seq_len(), 1, limits::kMaxSeqLen);
  c.Path("model.init_from", m.init_from());
  c.Path("model.pretrained", m.pretrained());
  if (m.norm_eps() != 0 && !(m.norm_eps() > 0 && m.norm_eps() < 1)) {
    c.Fail("model.norm_eps", absl::StrCat(m.norm_eps(), " must be in (0, 1) (or 0: 1e-5)"));
  }
  if (m.kv_heads() < 0) c.Fail("model.kv_heads", absl::StrCat(m.kv_heads(), " must be at least 1 (or 0: heads)"));
  else c.InRange("model.kv_heads", m.kv_heads(), 0, limits::kMaxHeads);
  if (m.ffn_hidden() < 0) c.Fail("model.ffn_hidden", absl::StrCat(m.ffn_hidden(), " must be at least 1 (or 0: the default)"));
  else c.InRange("model.ffn_hidden", m.ffn_hidden(), 0, limits::kMaxFfnHidden);
  if (gpt) {
    // GPT-2's architecture is fixed: these describe other families.
    if (m.kv_heads() != 0 && m.kv_heads() != m.heads()) {
      c.Fail("model.kv_heads", absl::StrCat(m.kv_heads(), ": gpt has no grouped-query attention (0 or model.heads ",
                                            m.heads(), ")"));
    }
    if (m.ffn_hidden() != 0 && static_cast<int64_t>(m.ffn_hidden()) != 4 * static_cast<int64_t>(m.hidden())) {
      c.Fail("model.ffn_hidden", absl::StrCat(m.ffn_hidden(), ": gpt's MLP is 4·hidden = ",
                                              4 * static_cast<int64_t>(m.hidden())));
    }
    if (m.has_tie_embeddings() && !m.tie_embeddings()) c.Fail("model.tie_embeddings", "gpt's head is always tied");
    if (m.rope_theta() != 0) c.Fail("model.rope_theta", "gpt has learned positions, not rotary ones");
    if (m.has_rope_scaling()) c.Fail("model.rope_scaling", "gpt has learned positions, not rotary ones");
    if (m.qkv_bias()) c.Fail("model.qkv_bias", "gpt's linears always have biases (this is a llama option)");
    if (m.activation() == v1::ACTIVATION_SILU) c.Fail("model.activation", "gpt's MLP is gelu or gelu_tanh");
    if (m.qk_norm()) c.Fail("model.qk_norm", "gpt has no q/k norms (a llama option)");
    if (m.experts() != 0) c.Fail("model.experts", "gpt has no Mixture-of-Experts blocks (use llama or mixtral)");
  }
  CheckExperts(m, c);
  if (llama) {
    if (heads_ok && m.kv_heads() > 0 && m.heads() % m.kv_heads() != 0) {
      c.Fail("model.kv_heads", absl::StrCat(m.kv_heads(), " does not divide model.heads ", m.heads()));
    }
    if (hidden_ok && heads_ok && m.hidden() % m.heads() == 0 && (m.hidden() / m.heads()) % 2 != 0) {
      c.Fail("model.heads", absl::StrCat("rotary positions need an even head dimension; hidden/heads = ",
                                         m.hidden() / m.heads()));
    }
    if (m.activation() != v1::ACTIVATION_UNSPECIFIED && m.activation() != v1::ACTIVATION_SILU) {
      c.Fail("model.activation", "llama's MLP is SwiGLU (silu)");
    }
    if (!std::isfinite(m.rope_theta())) c.Fail("model.rope_theta", "must be finite");
    if (!(m.rope_theta() >= 0)) c.Fail("model.rope_theta", absl::StrCat(m.rope_theta(), " must be positive (or 0: 10000)"));
    if (m.has_rope_scaling()) {
      const v1::RopeScaling& r = m.rope_scaling();
      const double low = r.low_freq_factor() > 0 ? r.low_freq_factor() : 1, high = r.high_freq_factor() > 0 ? r.high_freq_factor() : 4;
      if (!(r.factor() >= 1)) c.Fail("model.rope_scaling.factor", absl::StrCat(r.factor(), " must be at least 1"));
      if (!(r.low_freq_factor() >= 0)) c.Fail("model.rope_scaling.low_freq_factor", "must be positive (or 0: 1)");
      if (!(high > low)) {
        c.Fail("model.rope_scaling.high_freq_factor", absl::StrCat(high, " must exceed low_freq_factor ", low));
      }
      if (r.original_max_positions() < 0) c.Fail("model.rope_scaling.original_max_positions", "must be positive (or 0: 8192)");
      else c.InRange("model.rope_scaling.original_max_positions", r.original_max_positions(), 0, limits::kMaxSeqLen);
      if (!std::isfinite(r.factor())) c.Fail("model.rope_scaling.factor", "must be finite");
      if (!std::isfinite(high)) c.Fail("model.rope_scaling.high_freq_factor", "must be finite");
    }
  }
}

// Bounds (docs/security.md, "Bounds") on the layout's sizes; what the layout can run is CheckLayout's
// (layout/check_layout.h), asked once these hold. Returns whether they all do.
bool CheckLayoutBounds(const v1::JobSpec& s, Checker& c) {
  const auto& p = s.parallel();
  bool ok = c.InRange("parallel.dp", p.dp(), 1, limits::kMaxDp);
  ok &= c.InRange("parallel.tp", p.tp(), 1, limits::kMaxAxis);
  ok &= c.InRange("parallel.pp", p.pp(), 1, limits::kMaxAxis);
  ok &= c.InRange("parallel.sp", p.sp(), 1, limits::kMaxAxis);
  ok &= c.InRange("parallel.tp_depth", p.tp_depth(), 1, limits::kMaxTpDepth);
  ok &= c.InRange("parallel.ep", p.ep(), 1, limits::kMaxAxis);
  ok &= c.InRange("parallel.pp_chunks", p.pp_chunks(), 1, limits::kMaxPpChunks);
  if (p.pp_layers_size() > limits::kMaxLayers) {
    c.Fail("parallel.pp_layers", absl::StrCat("has ", p.pp_layers_size(), " entries, more than the limit ", limits::kMaxLayers));
    ok = false;
  }
  for (int i = 0; i < p.pp_layers_size() && i < limits::kMaxLayers; ++i) {
    if (p.pp_layers(i) > limits::kMaxLayers) {
      c.InRange(absl::StrCat("parallel.pp_layers[", i, "]"), p.pp_layers(i), 1, limits::kMaxLayers);
      ok = false;
    }
  }
  ok &= s.train().micro_batch() >= 1 && s.train().micro_batch() <= limits::kMaxMicroBatch;
  ok &= s.train().global_batch() >= 1 && s.train().global_batch() <= limits::kMaxGlobalBatch;
  return ok;
}

// LoRA (docs/fine-tuning.md "LoRA"): the llama shape's linears.
void CheckLora(const v1::JobSpec& s, Checker& c) {
  if (!s.model().has_lora()) return;
  const v1::LoraSpec& l = s.model().lora();
  c.InRange("model.lora.rank", l.rank(), 1, limits::kMaxLoraRank);
  if (l.alpha() < 0 || !std::isfinite(l.alpha())) {
    c.Fail("model.lora.alpha", absl::StrCat(l.alpha(), " must be a finite positive number (0: the rank)"));
  }
  if (!(l.dropout() >= 0 && l.dropout() < 1)) {
    c.Fail("model.lora.dropout", absl::StrCat(l.dropout(), " must be in [0, 1)"));
  }
  // transformers' module names: the llama shape's linears (a Mixture of Experts' experts and shared
  // expert too), Mixtral's experts' w1 (gate), w3 (up), w2 (down).
  static const char* const kModules[] = {"q_proj", "k_proj", "v_proj",    "o_proj", "gate_proj",
                                         "up_proj", "down_proj", "w1", "w2",     "w3"};
  if (l.targets_size() == 0) c.Fail("model.lora.targets", absl::StrCat("is required (of ", absl::StrJoin(kModules, ", "), ")"));
  for (int i = 0; i < l.targets_size(); ++i) {
    if (std::find(std::begin(kModules), std::end(kModules), l.targets(i)) == std::end(kModules)) {
      c.Fail(absl::StrCat("model.lora.targets[", i, "]"),
             absl::StrCat("\"", l.targets(i), "\" is not a linear of the llama shape or of Mixtral's experts (",
                          absl::StrJoin(kModules, ", "), ")"));
    }
  }
  c.Path("model.lora.init_from", l.init_from());
  const bool pretrained = !s.model().pretrained().empty();  // Its family comes from config.json.
  if (!pretrained && s.model().family() == v1::MODEL_FAMILY_GPT) {
    c.Fail("model.lora", "is supported for the llama shape (llama, mixtral families) so far, not gpt");
  }
  // Its layout rules (tp_mode 1d; no dropout on experts' adapters) are CheckLayout's (CheckParallel).
}

void CheckParallel(const v1::JobSpec& s, Checker& c) {
  const auto& p = s.parallel();
  if (p.auto_layout()) {
    // The planner fills the layout; sizes given next to `auto` would be silently replaced.
    c.InRange("parallel.devices", p.devices(), 1, limits::kMaxWorldSize);
    for (const auto& [field, value] : std::vector<std::pair<std::string, int>>{
             {"parallel.dp", p.dp()}, {"parallel.pp", p.pp()}, {"parallel.tp", p.tp()}, {"parallel.sp", p.sp()}}) {
      if (value != 1) c.Fail(field, absl::StrCat(value, " conflicts with parallel: auto (the planner chooses it)"));
    }
  }
  std::vector<SpecError> conversion;
  const layout::ParallelLayout l = LayoutOf(s, &conversion);
  for (SpecError& e : conversion) c.Fail(std::move(e.field), std::move(e.message));
  const bool bounds_ok = CheckLayoutBounds(s, c);
  if (bounds_ok) {
    for (const layout::LayoutProblem& problem : layout::LayoutProblems(ModelConfigOf(s.model()), l, BatchOf(s), TargetOf(s))) {
      c.Fail(problem.field, problem.message);
    }
  }
  // WorldSize saturates instead of overflowing (65536·(2^31−1)·65536·65536 once overflowed here: found
  // by tools/fuzz.sh), and is 0 when a size is below 1 (reported above).
  if (l.WorldSize() > limits::kMaxWorldSize) {
    c.Fail("parallel", absl::StrCat("world size dp·tp·pp·sp = ", l.WorldSize(), " exceeds the limit ",
                                    limits::kMaxWorldSize));
  }
  if (p.zero_grad_reduce() == v1::ZERO_GRAD_REDUCE_UNSPECIFIED) {
    c.Fail("parallel.zero_grad_reduce", "must be micro_batch or step");
  }
  if (!(p.dp_bucket_mb() > 0)) {
    c.Fail("parallel.dp_bucket_mb", absl::StrCat(p.dp_bucket_mb(), " must be positive"));
  } else if (!(p.dp_bucket_mb() <= limits::kMaxDpBucketMb)) {
    c.Fail("parallel.dp_bucket_mb", absl::StrCat(p.dp_bucket_mb(), " exceeds the limit ", limits::kMaxDpBucketMb));
  }
}

void CheckTrain(const v1::JobSpec& s, Checker& c) {
  const auto& t = s.train();
  c.InRange("train.steps", t.steps(), 1, limits::kMaxSteps);
  // Their divisibility by micro_batch×dp is CheckLayout's (CheckParallel).
  c.InRange("train.micro_batch", t.micro_batch(), 1, limits::kMaxMicroBatch);
  c.InRange("train.global_batch", t.global_batch(), 1, limits::kMaxGlobalBatch);
  if (!(t.lr() > 0) || !std::isfinite(t.lr())) c.Fail("train.lr", absl::StrCat(t.lr(), " must be a finite positive number"));
  if (!(t.min_lr() >= 0) || t.min_lr() > t.lr()) {
    c.Fail("train.min_lr", absl::StrCat(t.min_lr(), " must be between 0 and train.lr ", t.lr()));
  }
  c.InRange("train.warmup_steps", t.warmup_steps(), 0, limits::kMaxSteps);
  if (!(t.weight_decay() >= 0) || !std::isfinite(t.weight_decay())) c.Fail("train.weight_decay", absl::StrCat(t.weight_decay(), " must not be negative"));
  if (t.betas_size() != 2) {
    c.Fail("train.betas", absl::StrCat("expected two values [beta1, beta2], got ", t.betas_size()));
  } else {
    for (int i = 0; i < 2; ++i) {
      if (!(t.betas(i) >= 0 && t.betas(i) < 1)) {
        c.Fail(absl::StrCat("train.betas[", i, "]"), absl::StrCat(t.betas(i), " must be in [0, 1)"));
      }
    }
  }
  if (!(t.eps() > 0) || !std::isfinite(t.eps())) c.Fail("train.eps", absl::StrCat(t.eps(), " must be positive"));
  if (!(t.grad_clip() >= 0) || !std::isfinite(t.grad_clip())) c.Fail("train.grad_clip", absl::StrCat(t.grad_clip(), " must not be negative (0 disables clipping)"));
  if (t.precision() == v1::PRECISION_UNSPECIFIED) c.Fail("train.precision", "must be fp32, bf16, fp16 or fp8");
  if (!(t.initial_loss_scale() >= 1) || !std::isfinite(t.initial_loss_scale())) {
    c.Fail("train.initial_loss_scale", absl::StrCat(t.initial_loss_scale(), " must be a finite number >= 1"));
  }
  c.InRange("train.loss_scale_window", t.loss_scale_window(), 1, limits::kMaxLossScaleWindow);
  // train.fp8 only matters with precision fp8; zeros (a spec stored before it existed, a request that
  // leaves it out) are its defaults: tensorwise, min_dim 256, amax_history 1 (spec_to_options.cc).
  const v1::Fp8Spec& f = t.fp8();
  if (t.precision() != v1::PRECISION_FP8) return;
  if (f.min_dim() != 0) c.InRange("train.fp8.min_dim", f.min_dim(), 16, 1 << 20);
  if (f.amax_history() != 0 && f.amax_history() != 1) {
    c.Fail("train.fp8.amax_history", absl::StrCat(f.amax_history(), ": only 1 (scales from the current amax) is supported; "
                                                  "delayed scaling was dropped by torchao too"));
  }
  if (f.filter_size() > 256) c.Fail("train.fp8.filter", absl::StrCat(f.filter_size(), " patterns; at most 256"));
  for (int i = 0; i < f.filter_size(); ++i) {
    if (f.filter(i).empty() || f.filter(i).size() > 256) {
      c.Fail(absl::StrCat("train.fp8.filter[", i, "]"), "a pattern of 1 to 256 characters");
    }
  }
}

}  // namespace

std::vector<SpecError> ValidateJobSpec(const v1::JobSpec& s) {
  std::vector<SpecError> errors;
  Checker c(&errors);
  CheckEnumsKnown(s, "", c);
  if (std::string problem = NameProblem(s.name()); !problem.empty()) c.Fail("name", problem);
  if (std::string problem = NameProblem(s.placement().pool()); !problem.empty()) c.Fail("placement.pool", problem);
  if (auto priority = ParsePriority(s.scheduling().priority()); !priority.ok()) {
    c.Fail("scheduling.priority", std::string(priority.status().message()));
  }
  CheckModel(s.model(), c);
  if (s.data().blend_size() == 0 && s.data().path().empty()) {
    c.Fail("data.path", "is required (a token file; see tessera data prepare), or data.blend");
  }
  if (s.data().blend_size() > 0 && !s.data().path().empty()) {
    c.Fail("data.path", "give data.path or data.blend, not both");
  }
  if (s.data().blend_size() > limits::kMaxBlendSources) {
    c.Fail("data.blend", absl::StrCat(s.data().blend_size(), " sources, more than the limit ", limits::kMaxBlendSources));
  }
  c.Path("data.path", s.data().path());
  c.Path("data.valid_path", s.data().valid_path());
  for (int i = 0; i < s.data().blend_size() && i < limits::kMaxBlendSources; ++i) {
    const auto& src = s.data().blend(i);
    const std::string at = absl::StrCat("data.blend[", i, "]");
    if (src.path().empty()) c.Fail(at + ".path", "is required");
    c.Path(at + ".path", src.path());
    if (!(src.weight() > 0) || !std::isfinite(src.weight())) {
      c.Fail(at + ".weight", absl::StrCat(src.weight(), " is not a positive number"));
    }
  }
  const double f = s.data().valid_fraction();
  if (f != 0 && !(f > 0 && f < 1)) c.Fail("data.valid_fraction", absl::StrCat(f, " must be in (0, 1) (or 0: none)"));
  if (f != 0 && !s.data().valid_path().empty()) {
    c.Fail("data.valid_fraction", "give data.valid_path or data.valid_fraction, not both");
  }
  c.InRange("train.eval_every", s.train().eval_every(), 0, limits::kMaxSteps);
  c.InRange("train.log_every", s.train().log_every(), 0, limits::kMaxSteps);
  c.InRange("train.eval_batches", s.train().eval_batches(), 1, limits::kMaxEvalBatches);
  if (s.train().eval_every() > 0 && f == 0 && s.data().valid_path().empty()) {
    c.Fail("train.eval_every", "needs validation data: data.valid_path or data.valid_fraction");
  }
  if (s.data().dtype() == v1::TOKEN_DTYPE_UNSPECIFIED) c.Fail("data.dtype", "must be uint16 or uint32");
  if (s.data().format() == v1::DATA_FORMAT_UNSPECIFIED) c.Fail("data.format", "must be auto, flat, megatron or llmc");
  // Megatron and llm.c files name their own id type; with format auto the rank checks it once it
  // knows the file is flat.
  if (s.data().format() == v1::DATA_FORMAT_FLAT && s.data().dtype() == v1::TOKEN_DTYPE_UINT16 &&
      s.model().vocab() > 65536) {
    c.Fail("data.dtype", absl::StrCat("uint16 cannot hold token ids of model.vocab ", s.model().vocab()));
  }
  CheckParallel(s, c);
  CheckLora(s, c);
  CheckTrain(s, c);
  CheckObjective(s, c);
  CheckGrpo(s, c);
  c.InRange("checkpoint.every_steps", s.checkpoint().every_steps(), 0, limits::kMaxSteps);
  c.InRange("checkpoint.keep", s.checkpoint().keep(), 1, limits::kMaxCheckpointsKept);
  c.Path("checkpoint.dir", s.checkpoint().dir());
  if (s.output_dir().empty()) c.Fail("output_dir", "is required");
  c.Path("output_dir", s.output_dir());
  if (s.optimizer().offload() == v1::OFFLOAD_UNSPECIFIED) c.Fail("optimizer.offload", "must be none or cpu");
  // What this build runs on CUDA is CheckLayout's rule (CheckParallel).
  if (s.device() != v1::DEVICE_CUDA && s.device() != v1::DEVICE_CPU) {
    c.Fail("device", "must be cpu or cuda");
  }
  return errors;
}

}  // namespace tessera::spec
