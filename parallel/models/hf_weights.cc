#include "parallel/models/hf_weights.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/model/family.h"
#include "nlohmann/json.hpp"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

struct Stored {
  const MappedSafetensors* file;
  const TensorEntry* entry;
};

// Tensors transformers saves that are not parameters: GPT-2's causal-mask buffers, older Llama
// saves' rotary frequencies (recomputed from rope_theta).
bool IsBuffer(const std::string& name) {
  return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias") ||
         absl::EndsWith(name, ".rotary_emb.inv_freq");
}

absl::StatusOr<at::Tensor> View(const Stored& s, const std::string& name) {
  at::ScalarType type;
  const std::string& d = s.entry->dtype;
  if (d == "F32") {
    type = at::kFloat;
  } else if (d == "BF16") {
    type = at::kBFloat16;
  } else if (d == "F16") {
    type = at::kHalf;
  } else if (d == "F64") {
    type = at::kDouble;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(s.file->path(), ": ", name, ": dtype ", d,
                                                   " is not a floating-point weight (F32, BF16, F16, F64)"));
  }
  const auto options = at::TensorOptions().dtype(type);
  char* data = s.file->data(*s.entry);
  if (data == nullptr) return at::empty(s.entry->shape, options);
  return at::from_blob(data, s.entry->shape, options);
}

std::string Shape(at::IntArrayRef shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// The files of `dir` and their tensors by stored name.
absl::Status OpenFiles(const std::string& dir, HfWeights* out, std::map<std::string, Stored>* stored) {
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

}  // namespace

absl::StatusOr<HfWeights> OpenHfWeights(const std::string& dir, const ModelConfig& config) {
  HfWeights out;
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
    auto [it, added] = names.emplace(n, name);
    if (!added) return absl::InvalidArgumentError(absl::StrCat(dir, ": both ", it->second, " and ", name, " hold ", n));
  }
  for (const ParamSpec& p : ParamSpecs1D(config, ModelPart::Whole(config.layers), 1)) {
    auto it = names.find(p.name);
    const std::string hf_name = (p.name == "lm_head.weight" ? "" : f.hf_prefix) + p.name;
    if (it == names.end()) return absl::NotFoundError(absl::StrCat(dir, ": tensor ", hf_name, " is missing"));
    const Stored& s = stored.at(it->second);
    auto view = View(s, it->second);
    if (!view.ok()) return view.status();
    at::Tensor t = *view;
    if (f.hf_conv1d && p.layer >= 0 && t.dim() == 2) t = t.t();  // Conv1D [in, out] → [out, in].
    const bool positions = !f.position_embedding.empty() && p.name == f.position_embedding + ".weight";
    if (positions && t.dim() == 2 && t.size(0) >= p.shape[0]) t = t.narrow(0, 0, p.shape[0]);
    if (!t.sizes().equals(p.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.file->path(), ": ", it->second, " has shape ", Shape(s.entry->shape), ", the model of config.json and ",
          "the spec needs ", Shape(p.shape), f.hf_conv1d && p.layer >= 0 && t.dim() == 2 ? " (stored transposed)" : "",
          positions ? " (positions: at least seq_len rows)" : ""));
    }
    out.tensors.emplace(p.name, t);
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

}  // namespace tessera::parallel
