// Helpers shared by gpu_bench's modes: timing on a device, flags, the benchmark model sizes, token
// files, and the FLOP counts behind MFU.
#ifndef TESSERA_BENCH_GPU_BENCH_UTIL_H_
#define TESSERA_BENCH_GPU_BENCH_UTIL_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "layout/model_config.h"

namespace tessera::bench {

// Waits for the device's queued work (CUDA); nothing on the CPU.
void Sync(const at::Device& d);
// Median seconds of `fn` over `reps` runs after `warmup` runs.
double TimeIt(const at::Device& d, const std::function<void()>& fn, int warmup = 3, int reps = 10);
// The value after "--name" among argv[2..], or `fallback`.
std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback);
// Model sizes by name: 125m, 1.3b (GPT-2 shapes, vocabulary 50304), llama1b (Llama 3.2 1B's blocks),
// mixtral (a Mixtral of 8 blocks, 8 experts of 3584, top-2, hidden 1024), tiny_llama, tiny_mixtral;
// anything else a tiny GPT.
layout::ModelConfig SizeConfig(const std::string& size);
// Writes `count` pseudo-random tokens below `vocab` to `path` (uint16, the flat token format).
void WriteRandomTokens(const std::string& path, size_t count, int vocab, uint64_t seed);
// Model FLOPs of one token, forward + backward: 6·N plus attention 12·layers·hidden·seq (PaLM's
// count); N the parameters one token passes through (a Mixture of Experts: its active ones).
double FlopsPerToken(const layout::ModelConfig& c, double n_params);
// Active parameters of `c` with `n_params` in all: the experts a token does not reach left out.
double ActiveParams(const layout::ModelConfig& c, double n_params);
// The bf16 matmul rate measured on `d` (8192² on CUDA), FLOP/s.
double MatmulPeak(const at::Device& d);

// Runs `fn` once under LibTorch's Kineto profiler and prints, for CPU-side ranges (ATen operators and
// tessera's RECORD_USER_SCOPE ranges; nested ones each count their whole time) and for GPU kernels,
// the `top` names with the most total time: "profile <label> cpu|gpu total_ms count name".
// With `shapes`, copies (aten::copy_, clone, contiguous, _to_copy) are keyed by their input shapes too.
void Profile(const std::string& label, const std::function<void()>& fn, const at::Device& d, bool shapes = false,
             size_t top = 25);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GPU_BENCH_UTIL_H_
