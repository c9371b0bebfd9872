// `gpu_bench generate`: greedy generation (KV cache) of a GPT-2 and a GQA Llama with the same weights
// on cpu and cuda — the same tokens and prompt logits within 1e-4 (fp32). Prints "generate ..." lines
// and "generate_result ok|FAILED|no_cuda_device|error ..."; returns the exit code (0 only when equal).
#ifndef TESSERA_BENCH_GPU_GENERATE_CHECK_H_
#define TESSERA_BENCH_GPU_GENERATE_CHECK_H_

namespace tessera::bench {

int GenerateCheck();

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GPU_GENERATE_CHECK_H_
