#include "bench/gpu/generate_check.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/models/generate.h"

namespace tessera::bench {

// `tessera generate --device cuda` in-process: the same weights on both devices, greedy tokens and the
// prompt's logits compared (fp32; TF32 stays off in LibTorch by default).
int GenerateCheck() {
  if (!at::hasCUDA()) {
    std::printf("generate_result no_cuda_device\n");
    return 1;
  }
  bool ok = true;
  for (parallel::ModelFamily family : {parallel::ModelFamily::kGpt2, parallel::ModelFamily::kLlama}) {
    parallel::ModelConfig c;
    c.family = family;
    c.layers = 2;
    c.hidden = 128;
    c.heads = 4;
    c.vocab = 500;
    c.seq_len = 64;
    if (family == parallel::ModelFamily::kLlama) {
      c.kv_heads = 2;
      c.tie_embeddings = false;
    }
    auto tp = std::make_shared<parallel::SelfCommunicator>(0, "tp");
    parallel::Decoder cpu(c, tp, /*seed=*/7, at::Device(at::kCPU));
    parallel::Decoder gpu(c, tp, /*seed=*/7, at::Device(at::kCUDA, 0));
    std::map<std::string, at::Tensor> full;
    for (const auto& p : cpu.params()) full[p.name] = p.value;
    if (absl::Status s = gpu.LoadFull(full); !s.ok()) {
      std::printf("generate_result error %s\n", std::string(s.message()).c_str());
      return 1;
    }
    parallel::GenerateOptions o;
    o.max_new_tokens = 24;
    const std::vector<int64_t> prompt{3, 141, 59, 26, 5, 358, 97, 9};
    at::Tensor cpu_logits, gpu_logits;
    auto want = parallel::Generate(cpu, prompt, o, nullptr, &cpu_logits);
    auto got = parallel::Generate(gpu, prompt, o, nullptr, &gpu_logits);
    if (!want.ok() || !got.ok()) {
      std::printf("generate_result error %s\n", std::string((want.ok() ? got : want).status().message()).c_str());
      return 1;
    }
    const double max_abs = (gpu_logits - cpu_logits).abs().max().item<double>();
    const bool same = *want == *got && max_abs <= 1e-4;
    ok = ok && same;
    std::printf("generate family %s tokens %s max_abs_logit_diff %.3g\n", family == parallel::ModelFamily::kGpt2 ? "gpt2" : "llama",
                *want == *got ? "equal" : "DIFFERENT", max_abs);
  }
  std::printf("generate_result %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace tessera::bench
