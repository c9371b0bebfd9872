// gpu_bench train: full training steps of a benchmark model through the Trainer (bf16 parameters,
// fp32 masters, clipping, AdamW), median of steps 4..10 after 3 warm-ups:
//   gpu_bench train --size 125m|1.3b|llama1b|mixtral|tiny|tiny_llama|tiny_mixtral [--batch B] [--fused 0|1] [--fused_layers 0|1]
//                   [--fp8 tensorwise|rowwise] [--experts auto|loop|grouped] [--lora R]
//                   [--checkpoint sync|async] [--device cuda|cpu] [--dir D]
// --fused_layers 0 keeps the fused optimizer but ATen's layer norm and GELU (default: as --fused).
// --fp8: FP8 block linears. --experts: how a Mixture of Experts' experts compute (sparse_mlp.h
// ExpertGemm; auto: DefaultExpertGemm). --lora R: adapters of rank R (alpha 2R) on q, k, v, o, gate,
// up and down projections, only they train. --checkpoint: after the timed steps, one checkpoint into
// D/out: "blocked_s" is how long SaveCheckpoint held training (async: until the snapshot is taken),
// then for async the time of a step while the write runs and until it is committed.
// Prints "train size ... step_ms ... tokens_per_s ... mfu ..." (and "checkpoint ..."), or "error ...".
#ifndef TESSERA_BENCH_GPU_TRAIN_BENCH_H_
#define TESSERA_BENCH_GPU_TRAIN_BENCH_H_

namespace tessera::bench {

int TrainBench(int argc, char** argv);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GPU_TRAIN_BENCH_H_
