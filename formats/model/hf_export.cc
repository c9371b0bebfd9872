#include "formats/model/hf_export.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/checkpoint/durable_file.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "formats/checkpoint/safetensors.h"
#include "formats/model/family.h"
#include "formats/model/hf_config.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::model {

using checkpoint::FsyncDirectory;
using checkpoint::MappedSafetensors;
using checkpoint::RawTensor;
using checkpoint::TensorEntry;
using checkpoint::TensorMap;
using checkpoint::WriteFileDurably;
using checkpoint::WriteSafetensors;

namespace {

namespace fs = std::filesystem;

// fp32 → bf16, round to nearest even; NaN stays a (quiet) NaN.
uint16_t ToBf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

struct Item {
  const ParamSpec* spec;
  std::string hf_name;
  bool transpose;               // Written [in, out] (GPT-2's Conv1D).
  std::vector<int64_t> shape;   // As written.
  uint64_t bytes;
};

// The parameter's bytes as written: transposed if asked, in the export dtype.
std::string Convert(std::vector<float> values, const Item& item, ExportDtype dtype) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (item.transpose) {
    const int64_t rows = item.spec->shape[0], cols = item.spec->shape[1];
    std::vector<float> t(n);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = values[r * cols + c];
    }
    values.swap(t);
  }
  if (dtype == ExportDtype::kF32) return std::string(reinterpret_cast<const char*>(values.data()), n * 4);
  std::string out(n * 2, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = ToBf16(values[i]);
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

}  // namespace

absl::Status PrepareExportDirectory(const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec))) {
    return absl::FailedPreconditionError(absl::StrCat(out_dir, ": exists and is not an empty directory (nothing is overwritten)"));
  }
  fs::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out_dir, ": cannot create: ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<HfExportResult> WriteHfModel(const ModelConfig& c, const HfParamValues& values,
                                            const std::string& out_dir, const HfExportOptions& options) {
  if (absl::Status s = PrepareExportDirectory(out_dir); !s.ok()) return s;
  const FamilySpec& f = FamilyOf(c.family);
  const int width = options.dtype == ExportDtype::kF32 ? 4 : 2;
  const std::vector<ParamSpec> specs = ParamSpecs1D(c, ModelPart::Whole(c.layers), 1);
  std::vector<Item> items;
  for (const ParamSpec& p : specs) {
    Item item{&p, HfParamName(f, p.name),
              f.hf_conv1d && p.layer >= 0 && p.shape.size() == 2, p.shape, 0};
    if (item.transpose) std::swap(item.shape[0], item.shape[1]);
    uint64_t n = 1;
    for (int64_t d : p.shape) n *= static_cast<uint64_t>(d);
    item.bytes = n * width;
    items.push_back(std::move(item));
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.hf_name < b.hf_name; });
  // Greedy shards in name order; a tensor above the limit is a shard of its own.
  std::vector<std::vector<const Item*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const Item& item : items) {
    if (!shards.back().empty() && in_shard + item.bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&item);
    in_shard += item.bytes;
    total += item.bytes;
  }
  const int n = static_cast<int>(shards.size());
  nlohmann::json weight_map = nlohmann::json::object();
  for (int k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k + 1, n);
    const std::string file_name = n == 1 ? "model.safetensors" : name;
    TensorMap tensors;
    for (const Item* item : shards[k]) {
      tensors[item->hf_name] = RawTensor{options.dtype == ExportDtype::kF32 ? "F32" : "BF16", item->shape,
                                         Convert(values(*item->spec), *item, options.dtype)};
      weight_map[item->hf_name] = file_name;
    }
    absl::Status s = WriteSafetensors(out_dir + "/" + file_name, tensors, {{"format", "pt"}});
    if (!s.ok()) return s;
  }
  if (n > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    auto s = WriteFileDurably(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n");
    if (!s.ok()) return s.status();
  }
  const std::string dtype = options.dtype == ExportDtype::kF32 ? "float32" : "bfloat16";
  auto s = WriteFileDurably(out_dir + "/config.json", HfConfigJson(c, c.seq_len, dtype, options.pad_token_id));
  if (!s.ok()) return s.status();
  if (absl::Status d = FsyncDirectory(out_dir); !d.ok()) return d;
  return HfExportResult{n, total};
}

absl::StatusOr<HfExportResult> ExportToHf(const CheckpointModel& cp, const std::string& out_dir,
                                          const HfExportOptions& options) {
  if (absl::Status s = HfExportable(cp.config); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(cp.path, ": cannot be written as a transformers model: ", s.message()));
  }
  auto file = MappedSafetensors::Open(cp.path + "/model.safetensors");
  if (!file.ok()) return file.status();
  const ModelConfig& c = cp.config;
  std::map<std::string, const TensorEntry*> found;
  for (const ParamSpec& p : ParamSpecs1D(c, ModelPart::Whole(c.layers), 1)) {
    const auto& entries = (*file)->header().entries;
    auto e = entries.find(p.name);
    const std::string where = absl::StrCat((*file)->path(), ": ", p.name);
    if (e == entries.end()) return absl::DataLossError(absl::StrCat(where, " is missing"));
    if (e->second.dtype != "F32") return absl::DataLossError(absl::StrCat(where, " is ", e->second.dtype, ", not F32"));
    if (e->second.shape != p.shape) {
      return absl::DataLossError(absl::StrCat(where, " does not have the shape trainer_state.json's model gives"));
    }
    found[p.name] = &e->second;
  }
  return WriteHfModel(
      c,
      [&](const ParamSpec& p) {
        const TensorEntry& e = *found.at(p.name);
        std::vector<float> v((e.end - e.begin) / 4);
        if (!v.empty()) std::memcpy(v.data(), (*file)->data(e), e.end - e.begin);
        return v;
      },
      out_dir, options);
}

}  // namespace tessera::formats::model
