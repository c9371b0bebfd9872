#include "client/jsonl_records.h"

#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace tessera::client {

absl::Status ForEachJsonRecord(
    const std::vector<std::string>& inputs,
    const std::function<absl::Status(const nlohmann::ordered_json& record, const std::string& where)>& record) {
  for (const std::string& input : inputs) {
    std::ifstream file;
    std::istream* in = &std::cin;
    if (input != "-") {
      file.open(input, std::ios::binary);
      if (!file) return absl::NotFoundError(absl::StrCat(input, ": cannot be read"));
      in = &file;
    }
    std::string line;
    for (int64_t n = 1; std::getline(*in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = absl::StrCat(input, ":", n, ": ");
      const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return absl::InvalidArgumentError(where + "not valid JSON");
      if (!j.is_object()) return absl::InvalidArgumentError(where + "not a JSON object");
      if (absl::Status s = record(j, where); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::client
