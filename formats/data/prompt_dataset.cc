#include "formats/data/prompt_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {
namespace {

constexpr char kFormat[] = "tessera-prompts";
constexpr int kVersion = 2;  // 2: the tokenizer and its stop token.
constexpr int64_t kMaxFieldsLine = int64_t{64} << 20;  // Bytes of one prompt's fields.

constexpr int64_t kMaxMetaBytes = int64_t{1} << 20;
constexpr int64_t kMaxTokenizerBytes = int64_t{1} << 30;

// A regular file's bytes (at most max_bytes), opened without blocking: a FIFO or a device planted
// where a file belongs is refused, never waited on or read without end.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size > max_bytes) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size, " bytes, more than the ", max_bytes, " allowed"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  int64_t got = 0;
  while (got < st.st_size) {
    const ssize_t n = pread(fd, bytes.data() + got, bytes.size() - got, got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  close(fd);
  bytes.resize(static_cast<size_t>(got));
  return bytes;
}

}  // namespace

PromptDatasetWriter::PromptDatasetWriter(std::string prefix, std::unique_ptr<IndexedDatasetWriter> tokens,
                                         std::FILE* fields)
    : prefix_(std::move(prefix)), tokens_(std::move(tokens)), fields_(fields) {}

absl::StatusOr<std::unique_ptr<PromptDatasetWriter>> PromptDatasetWriter::Create(const std::string& prefix,
                                                                                 IndexedDtype dtype) {
  std::remove((prefix + ".prompts.json").c_str());  // Complete again only when this writer finishes.
  auto tokens = IndexedDatasetWriter::Create(prefix, dtype);
  if (!tokens.ok()) return tokens.status();
  const std::string tmp = prefix + ".fields.jsonl.tmp";
  std::FILE* fields = std::fopen(tmp.c_str(), "wb");
  if (fields == nullptr) return absl::InvalidArgumentError(absl::StrCat(tmp, ": cannot write: ", std::strerror(errno)));
  return std::unique_ptr<PromptDatasetWriter>(new PromptDatasetWriter(prefix, *std::move(tokens), fields));
}

PromptDatasetWriter::~PromptDatasetWriter() {
  if (fields_ != nullptr) std::fclose(fields_);
  if (!finished_) {
    std::remove((prefix_ + ".fields.jsonl.tmp").c_str());
    std::remove((prefix_ + ".prompts.json.tmp").c_str());
  }
}

absl::Status PromptDatasetWriter::Add(const PromptRow& row) {
  if (row.ids.empty()) return absl::InvalidArgumentError("prompt: has no tokens");
  if (!row.fields.is_object()) return absl::InvalidArgumentError("fields: must be an object");
  nlohmann::json line = row.fields;
  line["prompt_text"] = row.text;
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (static_cast<int64_t>(text.size()) > kMaxFieldsLine) {
    return absl::InvalidArgumentError(absl::StrCat("the record is ", text.size(), " bytes, more than ", kMaxFieldsLine));
  }
  if (absl::Status s = tokens_->AddDocument(row.ids); !s.ok()) return s;
  if (std::fwrite(text.data(), 1, text.size(), fields_) != text.size()) {
    return absl::InternalError(absl::StrCat(prefix_, ".fields.jsonl.tmp: write failed"));
  }
  ++prompts_;
  return absl::OkStatus();
}

absl::Status PromptDatasetWriter::Finish() {
  const std::string fields_path = prefix_ + ".fields.jsonl", json_path = prefix_ + ".prompts.json";
  const bool flushed = std::fflush(fields_) == 0 && fsync(fileno(fields_)) == 0;
  std::fclose(fields_);
  fields_ = nullptr;
  if (!flushed) return absl::InternalError(absl::StrCat(fields_path, ".tmp: write failed"));
  if (std::rename((fields_path + ".tmp").c_str(), fields_path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(fields_path, ": rename failed: ", std::strerror(errno)));
  }
  if (absl::Status s = tokens_->Finish(); !s.ok()) return s;
  {
    const std::string path = prefix_ + ".tokenizer.json", tmp = path + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << tokenizer_json_;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat(tmp, ": write failed"));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
    }
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["prompts"] = prompts_;
  meta["tokens"] = tokens_->tokens();
  if (stop_token_ >= 0) meta["stop_token"] = stop_token_;
  const std::string tmp = json_path + ".tmp";
  {
    std::ofstream js(tmp, std::ios::trunc);
    js << meta.dump(2) << "\n";
    js.close();
    if (!js) return absl::InternalError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), json_path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(json_path, ": rename failed: ", std::strerror(errno)));
  }
  finished_ = true;
  return absl::OkStatus();
}

PromptDataset::~PromptDataset() {
  if (fields_fd_ >= 0) close(fields_fd_);
}

absl::StatusOr<std::unique_ptr<PromptDataset>> PromptDataset::Open(const std::string& prefix, int64_t vocab) {
  const std::string json_path = prefix + ".prompts.json", fields_path = prefix + ".fields.jsonl";
  auto meta_bytes = ReadRegularFile(json_path, kMaxMetaBytes);
  if (absl::IsNotFound(meta_bytes.status())) {
    return absl::NotFoundError(absl::StrCat(json_path, ": cannot open (a prompt dataset is complete when it exists: ",
                                            "prepare one with `tessera data prepare --prompts`)"));
  }
  if (!meta_bytes.ok()) return meta_bytes.status();
  const nlohmann::json meta = nlohmann::json::parse(*meta_bytes, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || meta.value("format", "") != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": not a prompt dataset's metadata (format ", kFormat, ")"));
  }
  if (!meta.contains("version") || meta["version"] != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": version ", meta.contains("version") ? meta["version"].dump() : "missing",
                                                   " is not supported (", kVersion,
                                                   "; prepare it again with `tessera data prepare --prompts`)"));
  }
  int64_t stop_token = -1;
  if (meta.contains("stop_token")) {
    if (!meta["stop_token"].is_number_integer() || meta["stop_token"].get<int64_t>() < 0 ||
        meta["stop_token"].get<int64_t>() >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(json_path, ": stop_token ", meta["stop_token"].dump(),
                                                     " is not an id below the model's vocabulary ", vocab));
    }
    stop_token = meta["stop_token"].get<int64_t>();
  }
  for (const char* key : {"prompts", "tokens"}) {
    if (!meta.contains(key) || !meta[key].is_number_integer() || meta[key].get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(json_path, ": ", key, " must be a count"));
    }
  }
  const int64_t prompts = meta["prompts"].get<int64_t>();
  if (prompts == 0) return absl::InvalidArgumentError(absl::StrCat(json_path, ": holds no prompt"));
  auto tokens = MappedIndexedDataset::Open(prefix);
  if (!tokens.ok()) return tokens.status();
  const IndexedDatasetIndex& x = (*tokens)->index();
  if ((*tokens)->sequences() != prompts || static_cast<int64_t>(x.document_indices.size()) != prompts + 1) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: holds ", (*tokens)->sequences(), " sequences; ",
                                                   json_path, " says ", prompts, " prompts (one document of one sequence each)"));
  }
  for (int64_t d = 0; d <= prompts; ++d) {
    if (x.document_indices[d] != d) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: document ", d, " is not one sequence"));
    }
  }
  for (int64_t p = 0; p < prompts; ++p) {
    if (x.sequence_lengths[p] == 0) return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: prompt ", p, " is empty"));
  }
  if (meta["tokens"].get<int64_t>() != x.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": tokens ", meta["tokens"].get<int64_t>(),
                                                   " does not match the ", x.num_tokens, " tokens of ", prefix, ".bin"));
  }
  std::unique_ptr<PromptDataset> ds(new PromptDataset(prefix, vocab));
  ds->tokens_ = *std::move(tokens);
  ds->stop_token_ = stop_token;
  // The fields: one line per prompt (offsets found once; each line read and parsed when asked for).
  ds->fields_fd_ = open(fields_path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (ds->fields_fd_ < 0) return absl::NotFoundError(absl::StrCat(fields_path, ": cannot open: ", std::strerror(errno)));
  if (struct stat st {}; fstat(ds->fields_fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(fields_path, ": not a regular file"));
  }
  // Line starts, found in one pass with a fixed buffer (a line is never held whole: a damaged file
  // with a gigantic line is refused by its length).
  char buf[1 << 16];
  int64_t at = 0, line_start = 0;
  bool in_line = false;
  while (true) {
    const ssize_t n = pread(ds->fields_fd_, buf, sizeof(buf), at);
    if (n < 0) return absl::DataLossError(absl::StrCat(fields_path, ": read failed: ", std::strerror(errno)));
    if (n == 0) break;
    for (ssize_t k = 0; k < n; ++k) {
      if (!in_line) {
        if (static_cast<int64_t>(ds->field_offsets_.size()) == prompts) {
          return absl::InvalidArgumentError(absl::StrCat(fields_path, ": holds more lines than the ", prompts, " prompts"));
        }
        ds->field_offsets_.push_back(at + k);
        line_start = at + k;
        in_line = true;
      }
      if (buf[k] == '\n') in_line = false;
    }
    at += n;
    if (in_line && at - line_start > kMaxFieldsLine) {
      return absl::InvalidArgumentError(absl::StrCat(fields_path, ": line ", ds->field_offsets_.size(), " is longer than ",
                                                     kMaxFieldsLine, " bytes"));
    }
  }
  if (in_line) {
    return absl::InvalidArgumentError(absl::StrCat(fields_path, ": the last line has no newline (the file was cut)"));
  }
  if (static_cast<int64_t>(ds->field_offsets_.size()) != prompts) {
    return absl::InvalidArgumentError(absl::StrCat(fields_path, ": holds ", ds->field_offsets_.size(), " lines for ",
                                                   prompts, " prompts"));
  }
  ds->fields_end_ = at;
  return ds;
}

absl::StatusOr<std::string> PromptDataset::ReadTokenizerJson() const {
  return ReadRegularFile(tokenizer_path(), kMaxTokenizerBytes);
}

int64_t PromptDataset::length(int64_t i) const { return tokens_->index().sequence_lengths[i]; }

absl::StatusOr<PromptRow> PromptDataset::Row(int64_t i) const {
  if (i < 0 || i >= prompts()) {
    return absl::OutOfRangeError(absl::StrCat("prompt ", i, " is not in ", prefix_, " (", prompts(), " prompts)"));
  }
  PromptRow row;
  auto ids = tokens_->Sequence(i, vocab_);
  if (!ids.ok()) return ids.status();
  row.ids = *std::move(ids);
  const int64_t begin = field_offsets_[i];
  const int64_t end = (i + 1 < prompts() ? field_offsets_[i + 1] : fields_end_) - 1;  // Without the newline.
  std::string text(static_cast<size_t>(std::max<int64_t>(0, end - begin)), '\0');
  if (!text.empty() && pread(fields_fd_, text.data(), text.size(), begin) != static_cast<ssize_t>(text.size())) {
    return absl::DataLossError(absl::StrCat(prefix_, ".fields.jsonl: line ", i + 1, ": cannot be read"));
  }
  nlohmann::json fields = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (fields.is_discarded() || !fields.is_object() || !fields.contains("prompt_text") || !fields["prompt_text"].is_string()) {
    return absl::DataLossError(absl::StrCat(prefix_, ".fields.jsonl: line ", i + 1,
                                            ": not a JSON object with a string prompt_text"));
  }
  row.text = fields["prompt_text"].get<std::string>();
  fields.erase("prompt_text");
  row.fields = std::move(fields);
  return row;
}

}  // namespace tessera::formats::data
