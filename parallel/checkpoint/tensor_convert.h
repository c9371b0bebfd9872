// Conversion between torch tensors and RawTensor (safetensors entries).
#ifndef TESSERA_PARALLEL_CHECKPOINT_TENSOR_CONVERT_H_
#define TESSERA_PARALLEL_CHECKPOINT_TENSOR_CONVERT_H_

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "formats/checkpoint/safetensors.h"

namespace tessera::parallel {

// A CPU copy of `t` as a RawTensor (F32, F16, BF16, F64, I64, I32, U8 supported).
absl::StatusOr<formats::checkpoint::RawTensor> ToRaw(const at::Tensor& t);

// A new tensor holding `raw`'s data. Fails on dtypes torch cannot hold.
absl::StatusOr<at::Tensor> FromRaw(const formats::checkpoint::RawTensor& raw);

// Reads a safetensors file into tensors.
absl::StatusOr<std::map<std::string, at::Tensor>> LoadTensors(const std::string& path);

// Writes tensors to a safetensors file (see WriteSafetensors: durable, `digest` of the file).
absl::Status SaveTensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {}, formats::checkpoint::FileDigest* digest = nullptr);

}  // namespace tessera::parallel

#endif  // TESSERA_PARALLEL_CHECKPOINT_TENSOR_CONVERT_H_
