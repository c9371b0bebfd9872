// gpu_bench moe [--device cuda|cpu] [--tokens N]: one sparse block (parallel/layers/sparse_mlp.h) at the
// `mixtral` size of gpu_bench train (hidden 1024, 8 experts of 3584, top-2) in bf16, its experts as a
// per-expert loop and as grouped GEMMs (ExpertGemm). First a check: the same output and gradients
// (input, router, every expert; bf16 tolerance) with expert 7 kept idle by a router bias of -100, whose
// gradient must be zeros under both; then forward+backward time of each with balanced routing.
// Lines "moe_check ..." and "moe_block ..."; exit 1 when the check fails.
#ifndef TESSERA_BENCH_GPU_MOE_BENCH_H_
#define TESSERA_BENCH_GPU_MOE_BENCH_H_

namespace tessera::bench {

int MoeBench(int argc, char** argv);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GPU_MOE_BENCH_H_
