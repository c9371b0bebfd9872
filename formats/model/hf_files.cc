#include "formats/model/hf_files.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::model {

using checkpoint::MappedSafetensors;
using checkpoint::TensorEntry;

namespace {

namespace fs = std::filesystem;

// Tensors transformers saves that are not parameters: GPT-2's causal-mask buffers, older Llama
// saves' rotary frequencies (recomputed from rope_theta).
bool IsBuffer(const std::string& name) {
  return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias") ||
         absl::EndsWith(name, ".rotary_emb.inv_freq");
}

bool IsFloatingPoint(const std::string& dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "F16" || dtype == "F64";
}

std::string Shape(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

struct Stored {
  const MappedSafetensors* file;
  const TensorEntry* entry;
};

// The files of `dir` and their tensors by stored name.
absl::Status OpenFiles(const std::string& dir, HfFiles* out, std::map<std::string, Stored>* stored) {
  auto add_file = [&](const std::string& path) -> absl::StatusOr<const MappedSafetensors*> {
    auto f = MappedSafetensors::Open(path);
    if (!f.ok()) return f.status();
    out->files.push_back(std::move(*f));
    return out->files.back().get();
  };
  const std::string single = dir + "/model.safetensors", index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) {
    auto f = add_file(single);
    if (!f.ok()) return f.status();
    for (const auto& [name, e] : (*f)->header().entries) stored->emplace(name, Stored{*f, &e});
    return absl::OkStatus();
  }
  if (!fs::exists(index_path)) {
    return absl::NotFoundError(absl::StrCat(dir, ": has neither model.safetensors nor model.safetensors.index.json ",
                                            "(pytorch_model.bin is not read: save with safe_serialization=True)"));
  }
  std::ifstream in(index_path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index = nlohmann::json::parse(text.str(), nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object with a weight_map object"));
  }
  std::map<std::string, const MappedSafetensors*> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    const std::string where = absl::StrCat(index_path, ": weight_map.", it.key());
    if (!it->is_string()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a file name"));
    const std::string file = it->get<std::string>();
    // A shard is a file of this directory: nothing else is opened on an index's word.
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"", file, "\" is not a file name in ", dir));
    }
    auto shard = shards.find(file);
    if (shard == shards.end()) {
      auto f = add_file(dir + "/" + file);
      if (!f.ok()) return f.status();
      shard = shards.emplace(file, *f).first;
    }
    const auto& entries = shard->second->header().entries;
    auto e = entries.find(it.key());
    if (e == entries.end()) {
      return absl::DataLossError(absl::StrCat(where, ": ", shard->second->path(), " does not hold this tensor"));
    }
    stored->emplace(it.key(), Stored{shard->second, &e->second});
  }
  return absl::OkStatus();
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // Subnormal: normalise.
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

absl::StatusOr<std::vector<float>> StoredAsFloat(const MappedSafetensors& file, const TensorEntry& entry,
                                                 const std::string& where) {
  const char* src = file.data(entry);
  const uint64_t bytes = entry.end - entry.begin;
  std::vector<float> out;
  if (entry.dtype == "F32") {
    out.resize(bytes / 4);
    if (!out.empty()) std::memcpy(out.data(), src, bytes);
  } else if (entry.dtype == "BF16" || entry.dtype == "F16") {
    out.resize(bytes / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      if (entry.dtype == "F16") {
        out[i] = HalfToFloat(h);
      } else {
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
    }
  } else if (entry.dtype == "F64") {
    out.resize(bytes / 8);
    for (size_t i = 0; i < out.size(); ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dtype ", entry.dtype, " is not a floating-point weight (F32, BF16, F16, F64)"));
  }
  return out;
}

std::vector<float> ReadAsFloat(const HfStoredTensor& t, const ParamSpec& spec) {
  std::vector<float> values = *StoredAsFloat(*t.file, *t.entry, t.stored_name);  // The dtype was checked at open.
  const std::vector<int64_t>& stored = t.entry->shape;
  if (t.transposed) {
    const int64_t rows = stored[0], cols = stored[1];
    std::vector<float> out(values.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = values[r * cols + c];
    }
    return out;
  }
  if (t.positions) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    values.resize(n);  // Row-major: the first shape[0] rows.
  }
  return values;
}

absl::StatusOr<HfFiles> OpenHfFiles(const std::string& dir, const ModelConfig& config) {
  HfFiles out;
  std::map<std::string, Stored> stored;
  if (absl::Status s = OpenFiles(dir, &out, &stored); !s.ok()) return s;
  const FamilySpec& f = FamilyOf(config.family);
  const bool tied = !TiedEmbeddingName(config).empty();
  // tessera name → stored name.
  std::map<std::string, std::string> names;
  for (const auto& [name, s] : stored) {
    std::string n = absl::StartsWith(name, f.hf_prefix) ? name.substr(f.hf_prefix.size()) : name;
    if (IsBuffer(n)) continue;
    if (tied && n == "lm_head.weight") continue;  // A tied head is the token embedding itself.
    // A causal LM read as a reward model: its LM head is dropped (as transformers does).
    if (config.score_head && n == "lm_head.weight") continue;
    auto [it, added] = names.emplace(n, name);
    if (!added) return absl::InvalidArgumentError(absl::StrCat(dir, ": both ", it->second, " and ", name, " hold ", n));
  }
  for (const ParamSpec& p : ParamSpecs1D(config, ModelPart::Whole(config.layers), 1)) {
    auto it = names.find(p.name);
    const std::string hf_name = HfParamName(f, p.name);
    // A causal LM as a reward model's start: no score head (HfFiles::params lacks it; it keeps its draw).
    if (it == names.end() && p.name == kScoreWeight) continue;
    if (it == names.end()) return absl::NotFoundError(absl::StrCat(dir, ": tensor ", hf_name, " is missing"));
    const Stored& s = stored.at(it->second);
    if (!IsFloatingPoint(s.entry->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(s.file->path(), ": ", it->second, ": dtype ", s.entry->dtype,
                                                     " is not a floating-point weight (F32, BF16, F16, F64)"));
    }
    HfStoredTensor t{s.file, s.entry, it->second, f.hf_conv1d && p.layer >= 0 && s.entry->shape.size() == 2,
                     !f.position_embedding.empty() && p.name == f.position_embedding + ".weight"};
    std::vector<int64_t> shape = s.entry->shape;
    if (t.transposed) std::swap(shape[0], shape[1]);
    if (t.positions && shape.size() == 2 && shape[0] >= p.shape[0]) shape[0] = p.shape[0];
    if (shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.file->path(), ": ", it->second, " has shape ", Shape(s.entry->shape), ", the model of config.json and ",
          "the spec needs ", Shape(p.shape), t.transposed ? " (stored transposed)" : "",
          t.positions ? " (positions: at least seq_len rows)" : ""));
    }
    out.params.emplace(p.name, std::move(t));
    names.erase(it);
  }
  if (!names.empty()) {
    const std::string& name = names.begin()->second;
    return absl::InvalidArgumentError(absl::StrCat(stored.at(name).file->path(), ": ", name, " is not a parameter of a ",
                                                   FamilyName(config.family), " model of this config (",
                                                   names.size(), " such tensors); it would be dropped"));
  }
  return out;
}

}  // namespace tessera::formats::model
