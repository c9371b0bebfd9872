// ForEachJsonRecord: records in order with their places; bad lines refused naming the line — not
// JSON, not an object, an object with more keys than kMaxJsonKeys (300,000 keys used to take minutes
// in ordered_json's parser), nesting deeper than kMaxJsonDepth — each in well under a second.
#include "client/jsonl_records.h"

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera::client {
namespace {

std::string WriteLines(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

absl::Status Read(const std::string& path, std::vector<std::string>* places = nullptr) {
  return ForEachJsonRecord({path}, [&](const nlohmann::ordered_json&, const std::string& where) {
    if (places != nullptr) places->push_back(where);
    return absl::OkStatus();
  });
}

TEST(JsonlRecordsTest, RecordsInOrderWithTheirPlaces) {
  const std::string path = WriteLines("ok.jsonl", "{\"b\": 1, \"a\": [1, {\"c\": 2}]}\n\n  \n{\"x\": null}\n");
  std::vector<std::string> places;
  std::vector<std::string> first_keys;
  ASSERT_TRUE(ForEachJsonRecord({path}, [&](const nlohmann::ordered_json& j, const std::string& where) {
                places.push_back(where);
                first_keys.push_back(j.begin().key());
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(places, (std::vector<std::string>{path + ":1: ", path + ":4: "}));
  EXPECT_EQ(first_keys, (std::vector<std::string>{"b", "x"})) << "keys keep their order";
}

TEST(JsonlRecordsTest, BadLinesAreRefusedNamingTheLineQuickly) {
  std::string many = "{";
  for (int i = 0; i < 300000; ++i) absl::StrAppend(&many, i ? "," : "", "\"k", i, "\":", i);
  many += "}";
  std::string keys_at_limit = "{";
  for (int i = 0; i < kMaxJsonKeys; ++i) absl::StrAppend(&keys_at_limit, i ? "," : "", "\"k", i, "\":", i);
  keys_at_limit += "}";
  // 30 sibling objects of 9,000 keys: each under the per-object limit, 270,000 in the line (15 s to parse).
  std::string siblings = "{";
  for (int o = 0; o < 30; ++o) {
    absl::StrAppend(&siblings, o ? "," : "", "\"o", o, "\":{");
    for (int i = 0; i < 9000; ++i) absl::StrAppend(&siblings, i ? "," : "", "\"k", i, "\":", i);
    siblings += "}";
  }
  siblings += "}";
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_ok = "{\"a\":" + std::string(kMaxJsonDepth - 1, '[') + std::string(kMaxJsonDepth - 1, ']') + "}";
  struct Case {
    std::string name, line;
    std::string error;  // Empty: accepted.
  };
  const std::vector<Case> cases = {
      {"not_json", "{\"a\": ", "not valid JSON"},
      {"not_object", "[1, 2]", "not a JSON object"},
      {"many_keys", many, "an object with more than 10000 keys"},
      {"keys_at_limit", keys_at_limit, ""},
      {"keys_in_siblings", siblings, "more than 100000 keys in one line"},
      {"deep", deep, "nested deeper than 256"},
      {"deep_object", "{\"a\":" + deep + "}", "nested deeper than 256"},
      {"deep_at_limit", deep_ok, ""},
  };
  for (const Case& c : cases) {
    const std::string path = WriteLines(c.name + ".jsonl", "{\"ok\": 1}\n" + c.line + "\n");
    const auto start = std::chrono::steady_clock::now();
    const absl::Status s = Read(path);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
      EXPECT_EQ(std::string(s.message()), absl::StrCat(path, ":2: ", c.error)) << c.name;
    }
    EXPECT_LT(seconds, 5.0) << c.name << " (a bound against minutes, not a timing target)";
  }
}

}  // namespace
}  // namespace tessera::client
