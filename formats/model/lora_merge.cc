#include "formats/model/lora_merge.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/checkpoint/mapped_safetensors.h"
#include "formats/model/family.h"
#include "formats/model/hf_config.h"
#include "formats/model/hf_files.h"
#include "formats/model/peft_export.h"

namespace tessera::formats::model {

using checkpoint::MappedSafetensors;
using checkpoint::TensorEntry;

namespace {

std::string Shape(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// The base's parameters: where each lies, read as fp32 on demand.
class BaseModel {
 public:
  // `own`: the parameters the checkpoint holds whole (a reward model's score head), not read here.
  static absl::StatusOr<BaseModel> Open(const std::string& path, const ModelConfig& c,
                                        const std::map<std::string, const TensorEntry*>& own) {
    BaseModel out;
    if (std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
      auto files = OpenHfFiles(path, c);
      if (!files.ok()) return files.status();
      out.hf_ = std::make_unique<HfFiles>(std::move(*files));
      return out;
    }
    auto file = MappedSafetensors::Open(path);
    if (!file.ok()) return file.status();
    out.file_ = std::move(*file);
    for (const ParamSpec& p : ParamSpecs1D(c, ModelPart::Whole(c.layers), 1)) {
      if (own.count(p.name) > 0) continue;
      const auto& entries = out.file_->header().entries;
      auto e = entries.find(p.name);
      const std::string where = absl::StrCat(path, ": ", p.name);
      if (e == entries.end()) return absl::NotFoundError(absl::StrCat(where, " is missing"));
      if (e->second.shape != p.shape) {
        return absl::InvalidArgumentError(absl::StrCat(where, " has shape ", Shape(e->second.shape),
                                                       ", the checkpoint's model needs ", Shape(p.shape)));
      }
      if (auto v = StoredAsFloat(*out.file_, e->second, where); !v.ok()) return v.status();
      out.entries_[p.name] = &e->second;
    }
    return out;
  }

  std::vector<float> Read(const ParamSpec& p) const {
    if (hf_) return ReadAsFloat(hf_->params.at(p.name), p);
    return *StoredAsFloat(*file_, *entries_.at(p.name), p.name);  // Checked at Open.
  }

 private:
  std::unique_ptr<HfFiles> hf_;
  std::unique_ptr<MappedSafetensors> file_;
  std::map<std::string, const TensorEntry*> entries_;
};

}  // namespace

absl::StatusOr<HfExportResult> ExportMergedLora(const CheckpointModel& cp, const std::string& base,
                                                const std::string& out_dir, const HfExportOptions& options) {
  const ModelConfig& c = cp.config;
  if (!c.lora.enabled()) return absl::FailedPreconditionError(absl::StrCat(cp.path, ": not a LoRA checkpoint"));
  if (absl::Status s = HfExportable(c); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(cp.path, ": cannot be written as a transformers model: ", s.message()));
  }
  auto adapters = MappedSafetensors::Open(cp.path + "/model.safetensors");
  if (!adapters.ok()) return adapters.status();
  // The adapters of each adapted weight, checked before anything is written.
  struct Pair {
    const TensorEntry* a = nullptr;
    const TensorEntry* b = nullptr;
  };
  std::map<std::string, Pair> pairs;  // By the adapted weight's name.
  std::map<std::string, const TensorEntry*> own;  // Trained whole: a reward model's score head.
  auto entries = LoraAdapterEntries(cp, **adapters);
  if (!entries.ok()) return entries.status();
  for (const auto& [p, e] : *entries) {
    if (p.name == kScoreWeight) {
      own[p.name] = e;
      continue;
    }
    const bool is_a = p.name.find(".lora_A.") != std::string::npos;
    const std::string stem = p.name.substr(0, p.name.find(is_a ? ".lora_A." : ".lora_B."));
    (is_a ? pairs[stem + ".weight"].a : pairs[stem + ".weight"].b) = e;
  }
  auto model = BaseModel::Open(base, c, own);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat("the base ", base, ": ", model.status().message()));
  }
  ModelConfig merged = c;
  merged.lora = {};
  const float scale = static_cast<float>(c.lora.scale());
  const int64_t r = c.lora.rank;
  return WriteHfModel(
      merged,
      [&](const ParamSpec& p) {
        if (auto whole = own.find(p.name); whole != own.end()) {  // F32 of p's shape (LoraAdapterEntries).
          std::vector<float> w((whole->second->end - whole->second->begin) / sizeof(float));
          std::memcpy(w.data(), (*adapters)->data(*whole->second), w.size() * 4);
          return w;
        }
        std::vector<float> w = model->Read(p);
        auto pair = pairs.find(p.name);
        if (pair == pairs.end()) return w;
        // W[o, :] += scale · Σ_k B[o, k] · A[k, :].
        const int64_t rows = p.shape[0], cols = p.shape[1];
        std::vector<float> a(r * cols), b(rows * r);
        std::memcpy(a.data(), (*adapters)->data(*pair->second.a), a.size() * 4);
        std::memcpy(b.data(), (*adapters)->data(*pair->second.b), b.size() * 4);
        for (int64_t o = 0; o < rows; ++o) {
          std::vector<float> delta(cols, 0.0f);
          for (int64_t k = 0; k < r; ++k) {
            const float bk = b[o * r + k];
            const float* ak = &a[k * cols];
            for (int64_t j = 0; j < cols; ++j) delta[j] += bk * ak[j];
          }
          float* wo = &w[o * cols];
          for (int64_t j = 0; j < cols; ++j) wo[j] += delta[j] * scale;
        }
        return w;
      },
      out_dir, options);
}

}  // namespace tessera::formats::model
