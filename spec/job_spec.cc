#include "spec/job_spec.h"

#include "spec/layout_of.h"

#include <fstream>
#include <memory>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spec/limits.h"
#include "spec/yaml_to_proto.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

namespace tessera::spec {

v1::JobSpec DefaultJobSpec() {
  v1::JobSpec s;
  auto* m = s.mutable_model();
  m->set_family(v1::MODEL_FAMILY_GPT);
  m->set_layers(4);
  m->set_hidden(256);
  m->set_heads(4);
  m->set_vocab(256);
  m->set_seq_len(128);
  m->set_experts_per_token(2);
  m->set_moe_every(1);
  auto* d = s.mutable_data();
  d->set_dtype(v1::TOKEN_DTYPE_UINT16);
  d->set_format(v1::DATA_FORMAT_AUTO);
  d->set_seed(1234);
  auto* p = s.mutable_parallel();
  p->set_dp(1);
  p->set_tp(1);
  p->set_tp_mode(v1::TP_MODE_1D);
  p->set_pp(1);
  p->set_sp(1);
  p->set_order("tp-sp-pp-dp");
  p->set_dp_bucket_mb(25);
  p->set_pp_schedule(v1::PP_SCHEDULE_1F1B);
  p->set_pp_chunks(1);
  p->set_sp_mode(v1::SP_MODE_RING);
  p->set_tp_depth(1);
  p->set_ep(1);
  p->set_devices(1);
  p->set_zero_grad_reduce(v1::ZERO_GRAD_REDUCE_MICRO_BATCH);
  auto* t = s.mutable_train();
  t->set_steps(100);
  t->set_micro_batch(8);
  t->set_global_batch(8);
  t->set_lr(3e-4);
  t->set_min_lr(0.0);
  t->set_warmup_steps(0);
  t->set_schedule(v1::LR_SCHEDULE_COSINE);
  t->set_weight_decay(0.1);
  t->add_betas(0.9);
  t->add_betas(0.95);
  t->set_eps(1e-8);
  t->set_grad_clip(1.0);
  t->set_fused_kernels(true);
  t->set_precision(v1::PRECISION_FP32);
  t->mutable_fp8()->set_recipe(v1::FP8_RECIPE_TENSORWISE);
  t->mutable_fp8()->set_min_dim(256);
  t->mutable_fp8()->set_amax_history(1);
  t->set_initial_loss_scale(65536);
  t->set_loss_scale_window(1000);
  t->set_eval_every(0);
  t->set_log_every(10);
  t->set_eval_batches(10);
  t->set_objective(v1::OBJECTIVE_CROSS_ENTROPY);
  s.mutable_dpo()->set_beta(0.1);
  s.mutable_dpo()->set_loss_type(v1::DPO_LOSS_TYPE_SIGMOID);
  s.mutable_dpo()->set_reference("initial");
  v1::GrpoSpec* g = s.mutable_grpo();  // TRL 0.24's GRPOConfig defaults.
  g->set_num_generations(8);
  g->set_max_completion_tokens(256);
  g->set_temperature(1.0);
  g->set_top_p(1.0);
  g->set_epsilon(0.2);
  g->set_loss_type(v1::GRPO_LOSS_TYPE_DAPO);
  g->set_scale_rewards(v1::REWARD_SCALE_GROUP);
  g->set_num_iterations(1);
  s.mutable_optimizer()->set_offload(v1::OFFLOAD_NONE);
  t->set_seed(1234);
  auto* c = s.mutable_checkpoint();
  c->set_every_steps(0);
  c->set_keep(2);
  s.set_device(v1::DEVICE_CPU);
  s.mutable_placement()->set_pool("default");
  return s;
}

namespace {

// {"a.b.c", v} -> a: {b: {c: v}}.
YAML::Node NestOverride(const std::vector<std::string>& parts, const YAML::Node& value) {
  YAML::Node node = value;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    YAML::Node parent(YAML::NodeType::Map);
    parent[*it] = node;
    node = parent;
  }
  return node;
}

// `--set a.b=null`: field a.b of `spec` back to its value in DefaultJobSpec() (an optional path
// emptied, a number its default). "" when done, else what is wrong with the path.
std::string ResetToDefault(const std::vector<std::string>& parts, google::protobuf::Message* spec) {
  const v1::JobSpec defaults = DefaultJobSpec();
  google::protobuf::Message* msg = spec;
  const google::protobuf::Message* def = &defaults;
  for (size_t i = 0; i < parts.size(); ++i) {
    const google::protobuf::FieldDescriptor* f = msg->GetDescriptor()->FindFieldByName(parts[i]);
    if (f == nullptr) return UnknownFieldMessage(msg->GetDescriptor(), parts[i]);
    if (i + 1 == parts.size()) {
      std::unique_ptr<google::protobuf::Message> copy(def->New());
      copy->CopyFrom(*def);
      msg->GetReflection()->ClearField(msg, f);
      msg->GetReflection()->SwapFields(msg, copy.get(), {f});
      return "";
    }
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE || f->is_repeated()) {
      return absl::StrCat("is not a section: ", parts[i + 1], " cannot be below it");
    }
    msg = msg->GetReflection()->MutableMessage(msg, f);
    def = &def->GetReflection()->GetMessage(*def, f);
  }
  return "";
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpec(std::string_view text,
                                         const std::vector<std::string>& overrides,
                                         v1::JobSpec* written) {
  v1::JobSpec spec = DefaultJobSpec();
  std::vector<SpecError> errors;
  YAML::Node root;
  if (text.size() > limits::kMaxSpecBytes) {
    return ToStatus({{"", absl::StrCat("the spec is ", text.size(), " bytes, more than the limit ", limits::kMaxSpecBytes)}});
  }
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    return ToStatus({{"", absl::StrCat("not valid YAML: line ", e.mark.line + 1, ", column ", e.mark.column + 1,
                                       ": nested deeper than ", e.depth(), " levels")}});
  } catch (const YAML::Exception& e) {
    return ToStatus({{"", absl::StrCat("not valid YAML: line ", e.mark.line + 1, ", column ",
                                       e.mark.column + 1, ": ", e.msg)}});
  }
  if (root && !root.IsNull() && !root.IsMap()) {
    return ToStatus({{"", "a job spec is a YAML mapping (name:, model:, data:, ...)"}});
  }
  MergeYaml(root, "", &spec, &errors);
  std::vector<SpecError> ignored;  // The same errors again.
  if (written != nullptr) MergeYaml(root, "", written, &ignored);
  for (const std::string& o : overrides) {
    size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      errors.push_back({"--set " + o, "expected dotted.field=value"});
      continue;
    }
    std::vector<std::string> parts = absl::StrSplit(o.substr(0, eq), '.');
    YAML::Node value;
    try {
      value = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      errors.push_back({o.substr(0, eq), absl::StrCat("value is not valid YAML: ", e.msg)});
      continue;
    }
    const std::string raw = o.substr(eq + 1);
    if (raw == "null" || raw == "~") {
      // Back to the default (the YAML file's value dropped): e.g. model.init_from=null starts from the seed.
      if (std::string problem = ResetToDefault(parts, &spec); !problem.empty()) {
        errors.push_back({o.substr(0, eq), problem});
      } else if (written != nullptr) {
        ResetToDefault(parts, written);
      }
      continue;
    }
    // Built once: YAML nodes share what they refer to, and NestOverride reassigns them.
    const YAML::Node nested = NestOverride(parts, value);
    MergeYaml(nested, "", &spec, &errors);
    if (written != nullptr) MergeYaml(nested, "", written, &ignored);
  }
  if (!errors.empty()) return ToStatus(errors);
  if (spec.output_dir().empty() && !spec.name().empty()) {
    spec.set_output_dir(absl::StrCat("out/", spec.name()));
  }
  if (spec.checkpoint().dir().empty() && !spec.output_dir().empty()) {
    spec.mutable_checkpoint()->set_dir(absl::StrCat(spec.output_dir(), "/checkpoints"));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpec(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the spec file"));
  // One byte more than the limit is enough to refuse a larger file (or an endless one: /dev/zero).
  std::string text(limits::kMaxSpecBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  v1::JobSpec written;
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, overrides, &written);
  if (!spec.ok()) return spec.status();
  if (absl::Status s = ApplyPretrained(written.model(), &*spec); !s.ok()) return s;
  absl::Status valid = ToStatus(ValidateJobSpec(*spec));
  if (!valid.ok()) return valid;
  return spec;
}

int64_t WorldSize(const v1::JobSpec& spec) { return LayoutOf(spec).WorldSize(); }

int AccumulationSteps(const v1::JobSpec& spec) {
  return static_cast<int>(
      layout::MicroBatchesPerStep({spec.train().micro_batch(), spec.train().global_batch()}, spec.parallel().dp()));
}

}  // namespace tessera::spec
