#include "client/document_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tessera::client {

absl::StatusOr<std::unique_ptr<DocumentReader>> DocumentReader::Open(std::vector<std::string> inputs,
                                                                     std::string text_key) {
  if (inputs.empty()) return absl::InvalidArgumentError("no INPUT given");
  std::unique_ptr<DocumentReader> r(new DocumentReader());
  for (const std::string& in : inputs) {
    if (in == "-") continue;
    struct stat st;
    if (stat(in.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat(in, ": cannot read: ", std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(in, ": not a regular file"));
    r->total_bytes_ += static_cast<uint64_t>(st.st_size);
  }
  r->inputs_ = std::move(inputs);
  r->text_key_ = std::move(text_key);
  return r;
}

absl::Status DocumentReader::NextInput() {
  file_.close();
  file_.clear();
  stream_ = nullptr;
  if (next_input_ >= inputs_.size()) return absl::OkStatus();
  current_ = inputs_[next_input_++];
  line_ = 0;
  if (current_ == "-") {
    jsonl_ = true;
    stream_ = &std::cin;
    return absl::OkStatus();
  }
  jsonl_ = absl::EndsWith(current_, ".jsonl") || absl::EndsWith(current_, ".json");
  file_.open(current_, std::ios::binary);
  if (!file_) return absl::NotFoundError(absl::StrCat(current_, ": cannot read: ", std::strerror(errno)));
  stream_ = &file_;
  return absl::OkStatus();
}

absl::StatusOr<size_t> DocumentReader::Read(size_t max_docs, size_t max_bytes, std::vector<Document>* out) {
  size_t added = 0, bytes = 0;
  while (added < max_docs && bytes < max_bytes) {
    if (stream_ == nullptr) {
      if (next_input_ >= inputs_.size()) break;
      if (absl::Status s = NextInput(); !s.ok()) return s;
    }
    if (!jsonl_) {
      std::ostringstream ss;
      ss << stream_->rdbuf();
      if (stream_->bad()) return absl::InternalError(absl::StrCat(current_, ": read failed"));
      Document doc{ss.str(), current_};
      bytes_read_ += doc.text.size();
      bytes += doc.text.size();
      out->push_back(std::move(doc));
      ++added;
      stream_ = nullptr;
      continue;
    }
    std::string line;
    if (!std::getline(*stream_, line)) {
      if (stream_->bad()) return absl::InternalError(absl::StrCat(current_, ": read failed"));
      stream_ = nullptr;
      continue;
    }
    ++line_;
    bytes_read_ += line.size() + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // Blank lines are not documents.
    const std::string where = absl::StrCat(current_, ":", line_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON (byte ", e.byte, " of the line)"));
    }
    if (!j.is_object() || !j.contains(text_key_) || !j[text_key_].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not a JSON object with a string field \"", text_key_, "\" (see --text-key)"));
    }
    Document doc{j[text_key_].get<std::string>(), where};
    bytes += doc.text.size();
    out->push_back(std::move(doc));
    ++added;
  }
  return added;
}

}  // namespace tessera::client
