#include "formats/model/peft_adapter.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::formats::model {
namespace {

using ::testing::HasSubstr;

std::string AdapterDir(const std::string& name, const std::string& config) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/adapter_config.json") << config;
  return dir;
}

TEST(PeftAdapterTest, ConfigRoundTripsThroughItsJson) {
  PeftLoraConfig c{8, 16.0, 0.0, {"q_proj", "v_proj"}, "/models/base"};
  auto read = ReadPeftLoraConfig(AdapterDir("roundtrip", PeftLoraConfigJson(c)));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, 8);
  EXPECT_DOUBLE_EQ(read->alpha, 16.0);
  EXPECT_EQ(read->targets, c.targets);
  EXPECT_EQ(read->base_model, "/models/base");
}

TEST(PeftAdapterTest, AScoreHeadIsASeqClsTasksModuleToSave) {
  PeftLoraConfig c{4, 8.0, 0.0, {"q_proj"}, ""};
  c.score_head = true;
  const std::string json = PeftLoraConfigJson(c);
  EXPECT_THAT(json, HasSubstr("\"SEQ_CLS\""));
  auto read = ReadPeftLoraConfig(AdapterDir("seqcls", json));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->score_head);
  EXPECT_FALSE(ReadPeftLoraConfig(AdapterDir("causal", PeftLoraConfigJson({4, 8.0, 0.0, {"q_proj"}, ""})))->score_head);
  // As peft saves a SEQ_CLS task (["classifier", "score"]), or the score alone.
  const std::string ok = R"("peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"])";
  auto alone = ReadPeftLoraConfig(AdapterDir("alone", "{" + ok + R"(, "task_type": "SEQ_CLS", "modules_to_save": ["score"]})"));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(alone->score_head);
  for (const auto& [extra, words] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "task_type": "CAUSAL_LM", "modules_to_save": ["score"])", "modules_to_save: is not supported"},
           {R"(, "task_type": "SEQ_CLS", "modules_to_save": ["score", "lm_head"])", "modules_to_save: is not supported"},
           {R"(, "task_type": "SEQ_CLS", "modules_to_save": "score")", "modules_to_save: is not supported"},
           {R"(, "task_type": "SEQ_CLS")", "a SEQ_CLS task must save its score head"}}) {
    auto bad = ReadPeftLoraConfig(AdapterDir("bad_seqcls", "{" + ok + extra + "}"));
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(words)) << extra;
  }
}

TEST(PeftAdapterTest, WhatIsNotComputedAsPeftDoesIsRefusedByKey) {
  const std::string ok = R"("peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"])";
  for (const auto& [extra, words] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "use_rslora": true)", "use_rslora: true is not supported"},
           {R"(, "use_dora": true)", "use_dora: true is not supported"},
           {R"(, "bias": "all")", "bias: only \"none\""},
           {R"(, "modules_to_save": ["lm_head"])", "modules_to_save: is not supported"},
           {R"(, "rank_pattern": {"q_proj": 8})", "rank_pattern: is not supported"}}) {
    auto read = ReadPeftLoraConfig(AdapterDir("bad", "{" + ok + extra + "}"));
    EXPECT_THAT(std::string(read.status().message()), HasSubstr(words)) << extra;
  }
  auto regex = ReadPeftLoraConfig(AdapterDir("regex", R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                          "target_modules": ".*proj"})"));
  EXPECT_THAT(std::string(regex.status().message()), HasSubstr("target_modules: must be a list"));
  auto empty = ReadPeftLoraConfig(AdapterDir("empty", ""));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("not a JSON object"));
  EXPECT_THAT(std::string(ReadPeftLoraConfig("/nonexistent-adapter").status().message()), HasSubstr("cannot open"));
}

TEST(PeftAdapterTest, TensorNamesMapBothWays) {
  const std::string key = "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight";
  EXPECT_EQ(TesseraNameOfPeftKey(key), "layers.3.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(PeftKeyOfTesseraName("layers.3.self_attn.q_proj.lora_A.weight"), key);
  EXPECT_EQ(TesseraNameOfPeftKey("base_model.model.lm_head.weight"), "");
  EXPECT_EQ(TesseraNameOfPeftKey("base_model.model.score.weight"), "score.weight");
  EXPECT_EQ(PeftKeyOfTesseraName("score.weight"), "base_model.model.score.weight");
  EXPECT_EQ(TesseraNameOfPeftKey("base_model.model.model.layers.0.mlp.down_proj.weight"), "");
}

}  // namespace
}  // namespace tessera::formats::model
