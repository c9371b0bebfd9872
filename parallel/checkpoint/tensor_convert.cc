#include "parallel/checkpoint/tensor_convert.h"

#include <ATen/ATen.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::parallel {

using formats::checkpoint::FileDigest;
using formats::checkpoint::RawTensor;
using formats::checkpoint::ReadSafetensors;
using formats::checkpoint::TensorMap;
using formats::checkpoint::WriteSafetensors;

namespace {

struct DtypeName {
  at::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"}, {at::kDouble, "F64"},
    {at::kLong, "I64"},  {at::kInt, "I32"},  {at::kByte, "U8"},       {at::kBool, "BOOL"},
};

}  // namespace

absl::StatusOr<RawTensor> ToRaw(const at::Tensor& t) {
  for (const DtypeName& d : kDtypes) {
    if (d.type != t.scalar_type()) continue;
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    RawTensor raw;
    raw.dtype = d.name;
    raw.shape = c.sizes().vec();
    raw.bytes.assign(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
    return raw;
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot store dtype ", c10::toString(t.scalar_type())));
}

absl::StatusOr<at::Tensor> FromRaw(const RawTensor& raw) {
  for (const DtypeName& d : kDtypes) {
    if (raw.dtype != d.name) continue;
    at::Tensor t = at::empty(raw.shape, at::TensorOptions().dtype(d.type));
    std::memcpy(t.data_ptr(), raw.bytes.data(), raw.bytes.size());
    return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", raw.dtype));
}

absl::StatusOr<std::map<std::string, at::Tensor>> LoadTensors(const std::string& path) {
  auto raw = ReadSafetensors(path);
  if (!raw.ok()) return raw.status();
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, r] : *raw) {
    auto t = FromRaw(r);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", name, ": ", t.status().message()));
    out.emplace(name, std::move(*t));
  }
  return out;
}

absl::Status SaveTensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata, FileDigest* digest) {
  TensorMap raw;
  for (const auto& [name, t] : tensors) {
    auto r = ToRaw(t);
    if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", r.status().message()));
    raw.emplace(name, std::move(*r));
  }
  return WriteSafetensors(path, raw, metadata, digest);
}

}  // namespace tessera::parallel
