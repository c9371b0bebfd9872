#include "formats/data/preference_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/durable_file.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::data {
namespace {

constexpr char kFormat[] = "tessera-preference";
constexpr int kVersion = 1;

}  // namespace

PreferenceDatasetWriter::PreferenceDatasetWriter(std::string prefix, bool margins,
                                                 std::unique_ptr<IndexedDatasetWriter> tokens)
    : prefix_(std::move(prefix)), margins_(margins), tokens_(std::move(tokens)) {}

absl::StatusOr<std::unique_ptr<PreferenceDatasetWriter>> PreferenceDatasetWriter::Create(const std::string& prefix,
                                                                                         IndexedDtype dtype,
                                                                                         bool margins) {
  auto tokens = IndexedDatasetWriter::Create(prefix, dtype);
  if (!tokens.ok()) return tokens.status();
  return std::unique_ptr<PreferenceDatasetWriter>(new PreferenceDatasetWriter(prefix, margins, *std::move(tokens)));
}

PreferenceDatasetWriter::~PreferenceDatasetWriter() {
  if (!finished_) {
    std::remove((prefix_ + ".pref.margin.tmp").c_str());
    std::remove((prefix_ + ".pref.json.tmp").c_str());
  }
}

absl::Status PreferenceDatasetWriter::Add(const PreferencePair& pair) {
  if (pair.chosen.empty()) return absl::InvalidArgumentError("chosen: has no tokens");
  if (pair.rejected.empty()) return absl::InvalidArgumentError("rejected: has no tokens");
  for (const std::vector<int32_t>* part : {&pair.prompt, &pair.chosen, &pair.rejected}) {
    if (absl::Status s = tokens_->AddDocument(*part); !s.ok()) return s;
  }
  if (margins_) margin_values_.push_back(pair.margin);
  ++pairs_;
  return absl::OkStatus();
}

absl::Status PreferenceDatasetWriter::Finish() {
  // An earlier dataset at the prefix stays whole until every record was accepted: only now is its
  // .pref.json (the mark of a complete dataset, written last) removed, the tokens' files renamed
  // over, then the margins and the new .pref.json written — each durably, so that a crash leaves
  // either no .pref.json or one whose files are all there.
  const std::string margin_path = prefix_ + ".pref.margin", json_path = prefix_ + ".pref.json";
  std::remove(json_path.c_str());
  std::remove(margin_path.c_str());
  auto durably = [](const std::string& path, std::string_view content) -> absl::Status {
    const std::string tmp = path + ".tmp";
    if (auto written = formats::checkpoint::WriteFileDurably(tmp, content); !written.ok()) return written.status();
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = tokens_->Finish(); !s.ok()) return s;
  if (margins_) {
    // float64 little-endian: this machine's order (tessera runs on little-endian hosts only).
    const std::string_view bytes(reinterpret_cast<const char*>(margin_values_.data()),
                                 margin_values_.size() * sizeof(double));
    if (absl::Status s = durably(margin_path, bytes); !s.ok()) return s;
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["pairs"] = pairs_;
  meta["tokens"] = tokens_->tokens();
  meta["margins"] = margins_;
  if (absl::Status s = durably(json_path, meta.dump(2) + "\n"); !s.ok()) return s;
  const std::string dir = std::filesystem::path(json_path).parent_path().string();
  if (absl::Status s = formats::checkpoint::FsyncDirectory(dir.empty() ? "." : dir); !s.ok()) return s;
  finished_ = true;
  return absl::OkStatus();
}

PreferenceDataset::~PreferenceDataset() {
  if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), map_size_);
}

absl::StatusOr<std::unique_ptr<PreferenceDataset>> PreferenceDataset::Open(const std::string& prefix, int64_t vocab) {
  const std::string json_path = prefix + ".pref.json";
  std::ifstream in(json_path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(json_path, ": cannot open (a preference dataset is complete when it exists: ",
                                            "prepare one with `tessera data prepare --preference`)"));
  }
  const nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || meta.value("format", "") != kFormat) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": not a preference dataset's metadata (format ", kFormat, ")"));
  }
  if (!meta.contains("version") || meta["version"] != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": version ", meta.contains("version") ? meta["version"].dump() : "missing",
                                                   " is not supported (", kVersion, ")"));
  }
  for (const char* key : {"pairs", "tokens"}) {
    if (!meta.contains(key) || !meta[key].is_number_integer() || meta[key].get<int64_t>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(json_path, ": ", key, " must be a count"));
    }
  }
  if (!meta.contains("margins") || !meta["margins"].is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": margins must be true or false"));
  }
  std::unique_ptr<PreferenceDataset> ds(new PreferenceDataset(prefix, vocab));
  ds->pairs_ = meta["pairs"].get<int64_t>();
  if (ds->pairs_ == 0) return absl::InvalidArgumentError(absl::StrCat(json_path, ": holds no pair"));

  const std::string bin_path = prefix + ".bin";
  const int fd = open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(bin_path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(bin_path, ": not a regular file"));
  }
  auto index = ReadIndexedDatasetIndex(prefix + ".idx", static_cast<uint64_t>(st.st_size));
  if (!index.ok()) {
    close(fd);
    return index.status();
  }
  ds->index_ = *std::move(index);
  const IndexedDatasetIndex& x = ds->index_;
  // Overflow-free: pairs_ came from JSON as int64; 3 * a count above 2^61 cannot match a real index.
  if (ds->pairs_ > (int64_t{1} << 60) || static_cast<int64_t>(x.sequence_lengths.size()) != 3 * ds->pairs_ ||
      static_cast<int64_t>(x.document_indices.size()) != 3 * ds->pairs_ + 1) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: holds ", x.sequence_lengths.size(), " sequences in ",
                                                   x.document_indices.empty() ? 0 : x.document_indices.size() - 1,
                                                   " documents; ", json_path, " says ", ds->pairs_,
                                                   " pairs (three documents of one sequence each)"));
  }
  for (size_t d = 0; d < x.document_indices.size(); ++d) {
    if (x.document_indices[d] != static_cast<int64_t>(d)) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: document ", d, " is not one sequence"));
    }
  }
  for (int64_t p = 0; p < ds->pairs_; ++p) {
    for (int k : {1, 2}) {
      if (x.sequence_lengths[3 * p + k] == 0) {
        close(fd);
        return absl::InvalidArgumentError(absl::StrCat(prefix, ".idx: pair ", p, "'s ", k == 1 ? "chosen" : "rejected",
                                                       " completion is empty"));
      }
    }
  }
  if (meta["tokens"].get<int64_t>() != x.num_tokens) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": tokens ", meta["tokens"].get<int64_t>(),
                                                   " does not match the ", x.num_tokens, " tokens of ", bin_path));
  }
  ds->map_size_ = static_cast<size_t>(st.st_size);
  if (ds->map_size_ > 0) {
    void* m = mmap(nullptr, ds->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return absl::InternalError(absl::StrCat(bin_path, ": mmap failed: ", std::strerror(errno)));
    }
    ds->map_ = static_cast<const uint8_t*>(m);
  }
  close(fd);
  if (meta["margins"].get<bool>()) {
    const std::string margin_path = prefix + ".pref.margin";
    std::ifstream margins(margin_path, std::ios::binary);
    if (!margins) return absl::NotFoundError(absl::StrCat(margin_path, ": cannot open (", json_path, " says margins: true)"));
    margins.seekg(0, std::ios::end);
    const int64_t bytes = static_cast<int64_t>(margins.tellg());
    if (bytes != ds->pairs_ * static_cast<int64_t>(sizeof(double))) {
      return absl::InvalidArgumentError(absl::StrCat(margin_path, ": must hold one float64 per pair (", ds->pairs_ * 8,
                                                     " bytes), holds ", bytes));
    }
    margins.seekg(0);
    ds->margins_.resize(static_cast<size_t>(ds->pairs_));
    margins.read(reinterpret_cast<char*>(ds->margins_.data()), bytes);
    if (!margins) return absl::InternalError(absl::StrCat(margin_path, ": read failed"));
    for (int64_t p = 0; p < ds->pairs_; ++p) {
      if (!std::isfinite(ds->margins_[p]) || std::abs(ds->margins_[p]) > std::numeric_limits<float>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(margin_path, ": pair ", p, "'s margin ", ds->margins_[p],
                                                       " is not a finite float32 number (the loss is float32)"));
      }
    }
  }
  return ds;
}

absl::StatusOr<std::vector<int32_t>> PreferenceDataset::Sequence(int64_t s) const {
  const int size = IndexedDtypeSize(index_.dtype);
  const int32_t length = index_.sequence_lengths[s];
  const uint8_t* p = map_ + index_.sequence_pointers[s];  // Inside the .bin: ReadIndexedDatasetIndex checked.
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (int32_t k = 0; k < length; ++k) {
    int64_t id = 0;
    if (size == 2) {
      uint16_t v;
      std::memcpy(&v, p + 2 * k, 2);
      id = v;
    } else if (size == 4) {
      int32_t v;
      std::memcpy(&v, p + 4 * k, 4);
      id = v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(prefix_, ".idx: dtype ", IndexedDtypeName(index_.dtype),
                                                     " is not a token type (uint16 or int32)"));
    }
    if (id < 0 || id >= vocab_) {
      static constexpr const char* kParts[] = {"prompt", "chosen", "rejected"};
      return absl::DataLossError(absl::StrCat(prefix_, ".bin: pair ", s / 3, "'s ", kParts[s % 3], ": token ", id,
                                              " at position ", k, " is outside the model's vocabulary (", vocab_,
                                              "): prepared with another tokenizer than the model's?"));
    }
    ids[k] = static_cast<int32_t>(id);
  }
  return ids;
}

absl::StatusOr<PreferencePair> PreferenceDataset::Pair(int64_t i, const PreferenceTruncation& cut) const {
  if (i < 0 || i >= pairs_) {
    return absl::OutOfRangeError(absl::StrCat("pair ", i, " is not in ", prefix_, " (", pairs_, " pairs)"));
  }
  PreferencePair pair;
  std::vector<int32_t>* parts[] = {&pair.prompt, &pair.chosen, &pair.rejected};
  for (int k = 0; k < 3; ++k) {
    auto ids = Sequence(3 * i + k);
    if (!ids.ok()) return ids.status();
    *parts[k] = *std::move(ids);
  }
  cut.CutPrompt(&pair.prompt);
  cut.CutCompletion(&pair.chosen);
  cut.CutCompletion(&pair.rejected);
  if (!margins_.empty()) pair.margin = margins_[i];
  return pair;
}

}  // namespace tessera::formats::data
