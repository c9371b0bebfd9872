#include "formats/data/indexed_dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessera::formats::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;

absl::Status SyncAndClose(std::FILE* f, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace

int IndexedDtypeSize(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8: case IndexedDtype::kInt8: return 1;
    case IndexedDtype::kInt16: case IndexedDtype::kUint16: return 2;
    case IndexedDtype::kInt32: case IndexedDtype::kFloat32: return 4;
    case IndexedDtype::kInt64: case IndexedDtype::kFloat64: return 8;
  }
  return 0;
}

const char* IndexedDtypeName(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8: return "uint8";
    case IndexedDtype::kInt8: return "int8";
    case IndexedDtype::kInt16: return "int16";
    case IndexedDtype::kInt32: return "int32";
    case IndexedDtype::kInt64: return "int64";
    case IndexedDtype::kFloat64: return "float64";
    case IndexedDtype::kFloat32: return "float32";
    case IndexedDtype::kUint16: return "uint16";
  }
  return "unknown";
}

IndexedDtype IndexedDtypeForVocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? IndexedDtype::kUint16 : IndexedDtype::kInt32;
}

absl::StatusOr<IndexedDatasetIndex> ReadIndexedDatasetIndex(const std::string& path, uint64_t bin_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  auto bad = [&](uint64_t offset, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": byte ", offset, ": ", why));
  };
  constexpr uint64_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (size < kHeader) return bad(size, absl::StrCat("the file ends inside the ", kHeader, "-byte header"));
  char magic[9];
  uint64_t version, sequences, documents;
  uint8_t code;
  in.read(magic, 9);
  in.read(reinterpret_cast<char*>(&version), 8);
  in.read(reinterpret_cast<char*>(&code), 1);
  in.read(reinterpret_cast<char*>(&sequences), 8);
  in.read(reinterpret_cast<char*>(&documents), 8);
  if (std::memcmp(magic, kMagic, 9) != 0) return bad(0, "not a Megatron index (magic is not MMIDIDX)");
  if (version != kVersion) return bad(9, absl::StrCat("version ", version, " is not supported (1)"));
  IndexedDatasetIndex index;
  index.dtype = static_cast<IndexedDtype>(code);
  if (IndexedDtypeSize(index.dtype) == 0) return bad(17, absl::StrCat("dtype code ", int{code}, " is not a dtype"));
  if (index.dtype == IndexedDtype::kFloat32 || index.dtype == IndexedDtype::kFloat64) {
    return bad(17, absl::StrCat("dtype ", IndexedDtypeName(index.dtype), " cannot hold token ids"));
  }
  // 4 + 8 bytes per sequence and 8 per document index, checked without overflow.
  const uint64_t rest = size - kHeader;
  if (sequences > rest / 12 || documents > (rest - sequences * 12) / 8) {
    return bad(size, absl::StrCat("truncated: ", sequences, " sequences and ", documents,
                                  " document indices need more than the ", rest, " bytes after the header"));
  }
  if (documents < 1) return bad(26, "the document count is 0 (it counts a leading 0 entry)");
  const uint64_t expected = kHeader + sequences * 12 + documents * 8;
  if (size > expected) {
    // Multimodal indexes append one mode byte per sequence; nothing else may follow.
    if (size != expected + sequences) return bad(expected, absl::StrCat(size - expected, " unexpected trailing bytes"));
  }
  index.sequence_lengths.resize(sequences);
  index.sequence_pointers.resize(sequences);
  index.document_indices.resize(documents);
  in.read(reinterpret_cast<char*>(index.sequence_lengths.data()), sequences * 4);
  in.read(reinterpret_cast<char*>(index.sequence_pointers.data()), sequences * 8);
  in.read(reinterpret_cast<char*>(index.document_indices.data()), documents * 8);
  if (!in) return bad(kHeader, "read failed");
  const uint64_t item = IndexedDtypeSize(index.dtype);
  const uint64_t lengths_at = kHeader, pointers_at = kHeader + sequences * 4, docs_at = pointers_at + sequences * 8;
  for (uint64_t i = 0; i < sequences; ++i) {
    const int64_t len = index.sequence_lengths[i], ptr = index.sequence_pointers[i];
    if (len < 0) return bad(lengths_at + 4 * i, absl::StrCat("sequence ", i, " has negative length ", len));
    if (ptr < 0 || static_cast<uint64_t>(ptr) > bin_size ||
        static_cast<uint64_t>(len) > (bin_size - static_cast<uint64_t>(ptr)) / item) {
      return bad(pointers_at + 8 * i, absl::StrCat("sequence ", i, " (", len, " tokens at byte ", ptr,
                                                   ") lies outside the ", bin_size, "-byte .bin file"));
    }
    index.num_tokens += len;
  }
  for (uint64_t d = 0; d < documents; ++d) {
    const int64_t v = index.document_indices[d];
    const int64_t prev = d == 0 ? 0 : index.document_indices[d - 1];
    if ((d == 0 && v != 0) || v < prev || static_cast<uint64_t>(v) > sequences) {
      return bad(docs_at + 8 * d, absl::StrCat("document index ", d, " is ", v,
                                               " (must rise from 0 to the sequence count ", sequences, ")"));
    }
  }
  if (static_cast<uint64_t>(index.document_indices.back()) != sequences) {
    return bad(docs_at + 8 * (documents - 1),
               absl::StrCat("the last document index is ", index.document_indices.back(), ", not ", sequences));
  }
  return index;
}

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(const std::string& prefix,
                                                                                  IndexedDtype dtype) {
  if (dtype != IndexedDtype::kUint16 && dtype != IndexedDtype::kInt32) {
    return absl::InvalidArgumentError("an indexed dataset is written as uint16 or int32");
  }
  const std::string tmp = prefix + ".bin.tmp";
  std::FILE* bin = std::fopen(tmp.c_str(), "wb");
  if (bin == nullptr) return absl::InvalidArgumentError(absl::StrCat(tmp, ": cannot write: ", std::strerror(errno)));
  return std::unique_ptr<IndexedDatasetWriter>(new IndexedDatasetWriter(prefix, dtype, bin));
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDtype dtype, std::FILE* bin)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(bin) {}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (bin_ != nullptr) std::fclose(bin_);
  if (!finished_) {
    std::remove((prefix_ + ".bin.tmp").c_str());
    std::remove((prefix_ + ".idx.tmp").c_str());
  }
}

absl::Status IndexedDatasetWriter::AddDocument(const std::vector<int32_t>& ids) {
  if (ids.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("document ", documents(), " has ", ids.size(),
                                                   " tokens, more than an int32 sequence length holds"));
  }
  const size_t item = IndexedDtypeSize(dtype_);
  buffer_.resize(ids.size() * item);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || (dtype_ == IndexedDtype::kUint16 && ids[i] > 65535)) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " does not fit ", IndexedDtypeName(dtype_)));
    }
    if (dtype_ == IndexedDtype::kUint16) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buffer_.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(buffer_.data() + 4 * i, &ids[i], 4);
    }
  }
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), bin_) != buffer_.size()) {
    return absl::InternalError(absl::StrCat(prefix_, ".bin.tmp: write failed: ", std::strerror(errno)));
  }
  lengths_.push_back(static_cast<int32_t>(ids.size()));
  tokens_ += static_cast<int64_t>(ids.size());
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::Finish() {
  const std::string bin_tmp = prefix_ + ".bin.tmp", idx_tmp = prefix_ + ".idx.tmp";
  std::FILE* bin = bin_;
  bin_ = nullptr;
  if (absl::Status s = SyncAndClose(bin, bin_tmp); !s.ok()) return s;
  std::FILE* idx = std::fopen(idx_tmp.c_str(), "wb");
  if (idx == nullptr) return absl::InternalError(absl::StrCat(idx_tmp, ": cannot write: ", std::strerror(errno)));
  const uint64_t sequences = lengths_.size(), documents = sequences + 1;
  const uint8_t code = static_cast<uint8_t>(dtype_);
  std::fwrite(kMagic, 1, 9, idx);
  std::fwrite(&kVersion, 8, 1, idx);
  std::fwrite(&code, 1, 1, idx);
  std::fwrite(&sequences, 8, 1, idx);
  std::fwrite(&documents, 8, 1, idx);
  std::fwrite(lengths_.data(), 4, sequences, idx);
  std::vector<int64_t> column(sequences);
  int64_t at = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    column[i] = at;
    at += int64_t{lengths_[i]} * IndexedDtypeSize(dtype_);
  }
  std::fwrite(column.data(), 8, sequences, idx);
  column.resize(documents);
  for (uint64_t d = 0; d < documents; ++d) column[d] = static_cast<int64_t>(d);
  std::fwrite(column.data(), 8, documents, idx);
  if (absl::Status s = SyncAndClose(idx, idx_tmp); !s.ok()) return s;
  // The old index goes first: between the renames a reader finds no dataset, never a mismatched one.
  std::remove((prefix_ + ".idx").c_str());
  if (std::rename(bin_tmp.c_str(), (prefix_ + ".bin").c_str()) != 0 ||
      std::rename(idx_tmp.c_str(), (prefix_ + ".idx").c_str()) != 0) {
    return absl::InternalError(absl::StrCat(prefix_, ": rename failed: ", std::strerror(errno)));
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace tessera::formats::data
