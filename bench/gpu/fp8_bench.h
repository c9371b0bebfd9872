// gpu_bench fp8: the FP8 linear layers (parallel/layers/fp8_linear.h) on the GPU. First every GEMM of
// both recipes against its fp32 emulation on the device (as fp8_linear_test does on the CPU), then the
// forward+backward time of one linear layer at the GPT 1.3B and Llama ~1B shapes, bf16 vs FP8 tensorwise
// vs FP8 rowwise, and the bare GEMM rates (bf16 mm vs _scaled_mm). Lines "fp8_check ...", "fp8_linear
// ...", "fp8_gemm ...". Exit 1 when a check fails.
#ifndef TESSERA_BENCH_GPU_FP8_BENCH_H_
#define TESSERA_BENCH_GPU_FP8_BENCH_H_

namespace tessera::bench {

int Fp8Bench(int argc, char** argv);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GPU_FP8_BENCH_H_
