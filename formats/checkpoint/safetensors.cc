#include "formats/checkpoint/safetensors.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/durable_file.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::checkpoint {

int64_t RawTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int DtypeBytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata, FileDigest* digest) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const int width = DtypeBytes(t.dtype);
    if (width == 0) return absl::InvalidArgumentError(absl::StrCat(name, ": unknown dtype ", t.dtype));
    if (static_cast<int64_t>(t.bytes.size()) != t.numel() * width) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", t.bytes.size(), " bytes for ", t.numel(),
                                                     " elements of ", t.dtype));
    }
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // Data starts 8-byte aligned.
  uint64_t n = text.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  DurableWriter out;
  absl::Status s = out.Open(path);
  if (s.ok()) s = out.Append(std::string_view(len, 8));
  if (s.ok()) s = out.Append(text);
  for (const auto& [name, t] : tensors) {
    if (s.ok()) s = out.Append(t.bytes);
  }
  if (!s.ok()) return s;
  auto written = out.Finish();
  if (!written.ok()) return written.status();
  if (digest != nullptr) *digest = *written;
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, std::string_view json,
                                                         uint64_t data_size) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid safetensors file: ", why));
  };
  nlohmann::json header = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + json.size();
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object()) {
        for (auto m = it->begin(); m != it->end(); ++m) {
          if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
        }
      }
      continue;
    }
    const nlohmann::json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return bad(absl::StrCat("entry ", it.key(), " lacks dtype, shape or data_offsets"));
    }
    TensorEntry t;
    t.dtype = e["dtype"].get<std::string>();
    const int width = DtypeBytes(t.dtype);
    if (width == 0) return bad(absl::StrCat(it.key(), ": unknown dtype ", t.dtype));
    uint64_t bytes = width;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) return bad(absl::StrCat(it.key(), ": shape must be non-negative integers"));
      const uint64_t n = d.get<uint64_t>();
      if (n > (uint64_t{1} << 62) || (n != 0 && bytes > (uint64_t{1} << 62) / n)) {
        return bad(absl::StrCat(it.key(), ": shape is too large (more than 2^62 bytes)"));
      }
      bytes *= n;
      t.shape.push_back(static_cast<int64_t>(n));
    }
    if (!e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned()) {
      return bad(absl::StrCat(it.key(), ": data_offsets must be non-negative integers"));
    }
    t.begin = e["data_offsets"][0].get<uint64_t>();
    t.end = e["data_offsets"][1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size) {
      return bad(absl::StrCat(it.key(), ": data_offsets [", t.begin, ", ", t.end, ") outside the ", data_size,
                              " data bytes (truncated file?)"));
    }
    if (t.end - t.begin != bytes) {
      return bad(absl::StrCat(it.key(), ": ", t.end - t.begin, " bytes do not match shape and dtype (", bytes, ")"));
    }
    out.entries.emplace(it.key(), std::move(t));
  }
  return out;
}

absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path,
                                          std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string file = buf.str();
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid safetensors file: ", why));
  };
  if (file.size() < 8) return bad("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  if (n > file.size() - 8) return bad(absl::StrCat("header length ", n, " exceeds the file"));
  auto header = ParseSafetensorsHeader(path, std::string_view(file).substr(8, n), file.size() - 8 - n);
  if (!header.ok()) return header.status();
  if (metadata != nullptr) *metadata = header->metadata;
  TensorMap tensors;
  for (auto& [name, e] : header->entries) {
    RawTensor t;
    t.dtype = e.dtype;
    t.shape = e.shape;
    t.bytes = file.substr(header->data_start + e.begin, e.end - e.begin);
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

}  // namespace tessera::formats::checkpoint
