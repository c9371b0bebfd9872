// model.lora: parsed into the model's LoraConfig, and every problem named by its field.
#include "spec/job_spec.h"
#include "spec/model_config_of.h"
#include "spec/paths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::spec {
namespace {

using ::testing::HasSubstr;

constexpr char kLlama[] = R"(
name: lora
model: {family: llama, layers: 2, hidden: 64, heads: 4, vocab: 256, seq_len: 32,
        lora: {rank: 8, alpha: 16, targets: [q_proj, v_proj]}}
data: {path: data.bin}
train: {steps: 10, micro_batch: 2, global_batch: 4, lr: 1e-4}
)";

std::string Problems(const std::vector<std::string>& overrides) {
  auto spec = ParseJobSpec(kLlama, overrides);
  if (!spec.ok()) return std::string(spec.status().message());
  return std::string(ToStatus(ValidateJobSpec(*spec)).message());
}

TEST(LoraSpecTest, ParsesIntoTheModelConfig) {
  auto spec = ParseJobSpec(kLlama, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ToStatus(ValidateJobSpec(*spec)).ok());
  const layout::ModelConfig c = ModelConfigOf(spec->model());
  EXPECT_EQ(c.lora.rank, 8);
  EXPECT_DOUBLE_EQ(c.lora.scale(), 2.0);
  EXPECT_EQ(c.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_TRUE(c.lora.Targets("v_proj"));
  EXPECT_FALSE(c.lora.Targets("o_proj"));
  // alpha left out: the rank (scale 1). No lora: disabled.
  auto plain = ParseJobSpec(kLlama, {"model.lora.alpha=0"});
  ASSERT_TRUE(plain.ok());
  EXPECT_DOUBLE_EQ(ModelConfigOf(plain->model()).lora.scale(), 1.0);
  auto none = ParseJobSpec("name: x\nmodel: {family: llama}\ndata: {path: d}\n", {});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(ModelConfigOf(none->model()).lora.enabled());
}

TEST(LoraSpecTest, ProblemsNameTheField) {
  EXPECT_THAT(Problems({"model.lora.rank=0"}), HasSubstr("model.lora.rank: 0 must be at least 1"));
  EXPECT_THAT(Problems({"model.lora.rank=5000"}), HasSubstr("model.lora.rank: 5000 exceeds the limit 4096"));
  EXPECT_THAT(Problems({"model.lora.alpha=-1"}), HasSubstr("model.lora.alpha: -1 must be a finite positive number"));
  EXPECT_THAT(Problems({"model.lora.dropout=0.1"}), Not(HasSubstr("model.lora.dropout")));
  EXPECT_THAT(Problems({"model.lora.dropout=1.5"}), HasSubstr("model.lora.dropout: 1.5 must be in [0, 1)"));
  EXPECT_THAT(Problems({"model.lora.targets=[q_proj, lm_head]"}),
              HasSubstr("model.lora.targets[1]: \"lm_head\" is not a linear of the llama shape"));
  EXPECT_THAT(Problems({"model.lora.targets=[]"}), HasSubstr("model.lora.targets: is required"));
  EXPECT_THAT(Problems({"model.family=gpt"}), HasSubstr("model.lora: is supported for the llama shape"));
  EXPECT_EQ(Problems({"model.experts=4"}), "");  // Attention targets on a Mixture of Experts.
  EXPECT_EQ(Problems({"model.experts=4", "model.lora.targets=[q_proj, up_proj]"}), "");  // And its experts.
  EXPECT_EQ(Problems({"model.family=mixtral", "model.experts=4", "model.lora.targets=[w1, w2, w3]"}), "");
  EXPECT_THAT(Problems({"model.experts=4", "model.lora.targets=[q_proj, up_proj]", "model.lora.dropout=0.1"}),
              HasSubstr("model.lora.dropout: 0.1 with adapters on a Mixture of Experts' MLPs (up_proj) is not "
                        "supported yet"));
  EXPECT_EQ(Problems({"model.experts=4", "model.lora.dropout=0.1"}), "");  // Attention adapters only.
  EXPECT_THAT(Problems({"parallel.tp=4", "parallel.tp_mode=2d"}),
              HasSubstr("model.lora: with a grid tensor-parallel mode is not supported yet"));
}

// Paths are made absolute where the user stands (tessera run and submit): the base a LoRA checkpoint
// records, and the adapter to start from, name the same files from any directory. The adapter
// directory is an input confined to the data roots like the others (before: neither).
TEST(LoraSpecTest, EveryPathIsMadeAbsoluteAndTheAdapterIsAnInput) {
  auto spec = ParseJobSpec(kLlama, {"model.pretrained=models/base/", "model.lora.init_from=../adapters/./a",
                                    "output_dir=out/x", "checkpoint.dir=/abs/ckpt", "data.valid_path=v.bin"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  MakePathsAbsolute(&*spec, "/cwd/project");
  EXPECT_EQ(spec->data().path(), "/cwd/project/data.bin");
  EXPECT_EQ(spec->data().valid_path(), "/cwd/project/v.bin");
  EXPECT_EQ(spec->model().pretrained(), "/cwd/project/models/base");
  EXPECT_EQ(spec->model().lora().init_from(), "/cwd/adapters/a");
  EXPECT_EQ(spec->output_dir(), "/cwd/project/out/x");
  EXPECT_EQ(spec->checkpoint().dir(), "/abs/ckpt") << "absolute paths as written";
  EXPECT_EQ(spec->model().init_from(), "") << "unset stays unset";
  bool adapter_is_input = false;
  for (const auto& [field, path] : InputPaths(*spec)) adapter_is_input |= field == "model.lora.init_from";
  EXPECT_TRUE(adapter_is_input);
  PathRoots roots{{"/data"}, ""};
  auto confined = ToStatus(CheckJobPaths(*spec, roots, ""));
  EXPECT_THAT(confined.message(), HasSubstr("model.lora.init_from: '/cwd/adapters/a' is outside the data roots"));
}

}  // namespace
}  // namespace tessera::spec
