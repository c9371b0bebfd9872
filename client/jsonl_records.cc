#include "client/jsonl_records.h"

#include <fstream>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::client {
namespace {

// A SAX pass over a line (linear in it) that fails on the first object with more than kMaxJsonKeys
// keys, more than kMaxJsonLineKeys keys in the whole line, or the first value nested deeper than
// kMaxJsonDepth: ordered_json searches an object's keys on every insertion (quadratic per object:
// 300,000 keys took minutes; the limits bound the parse to about a second), and its tree would be
// visited recursively.
class ShapeCheck : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string problem;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(true); }
  bool key(string_t&) override {
    if (++keys_.back() > kMaxJsonKeys) {
      problem = absl::StrCat("an object with more than ", kMaxJsonKeys, " keys");
      return false;
    }
    if (++line_keys_ > kMaxJsonLineKeys) {
      problem = absl::StrCat("more than ", kMaxJsonLineKeys, " keys in one line");
      return false;
    }
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    problem = "not valid JSON";
    return false;
  }

 private:
  bool Open(bool object) {
    keys_.push_back(object ? 0 : -1);
    if (keys_.size() <= kMaxJsonDepth) return true;
    problem = absl::StrCat("nested deeper than ", kMaxJsonDepth);
    return false;
  }
  bool Close() {
    keys_.pop_back();
    return true;
  }
  std::vector<int64_t> keys_;  // Per open value: its keys so far (-1: an array).
  int64_t line_keys_ = 0;
};

}  // namespace

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
      ShapeCheck shape;
      if (!nlohmann::json::sax_parse(line, &shape, nlohmann::json::input_format_t::json, /*strict=*/true,
                                     /*ignore_comments=*/false)) {
        return absl::InvalidArgumentError(where + (shape.problem.empty() ? "not valid JSON" : shape.problem));
      }
      const nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return absl::InvalidArgumentError(where + "not valid JSON");
      if (!j.is_object()) return absl::InvalidArgumentError(where + "not a JSON object");
      if (absl::Status s = record(j, where); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::client
