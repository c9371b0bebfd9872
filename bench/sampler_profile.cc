// Where the sampler's time goes (parallel/models/generate.h), on the GRPO benchmark's shapes
// (bench/grpo_throughput.py: the Llama of bench/llama_throughput.py, 4 prompts × 8 completions of 32
// tokens, sampling at temperature 1 with no stop token): SampleBatch's generated tokens/s, against
// the model alone — the same prefill and 31 DecodeSteps of the same batch without drawing — so that
// the difference is the sampler's own per-token work. Not a peer comparison (that is
// grpo_throughput.py's); a profile for the sampler's authors. Median of --rounds, after one warmup.
//
//   bazel run -c opt //bench:sampler_profile -- --rounds 5
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/models/generate.h"

namespace tessera::parallel {
namespace {

constexpr int kPrompts = 4, kGenerations = 8, kNewTokens = 32;

ModelConfig BenchLlama() {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.layers = 4;
  c.hidden = 512;
  c.heads = 8;
  c.kv_heads = 2;
  c.ffn_hidden = 1344;
  c.vocab = 384;
  c.seq_len = 128;
  c.tie_embeddings = false;
  return c;
}

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  at::set_num_threads(2);
  const ModelConfig c = BenchLlama();
  Decoder model(c, std::make_shared<SelfCommunicator>(0, "tp[0]"), /*seed=*/1, c10::Device(c10::kCPU));
  for (Param& p : model.params()) p.value.requires_grad_(false);
  at::NoGradGuard no_grad;
  // Prompts of 18 to 24 tokens (examples/grpo's rendered prompts are about that long).
  std::vector<std::vector<int64_t>> prompts;
  for (int p = 0; p < kPrompts; ++p) {
    std::vector<int64_t> ids;
    for (int t = 0; t < 18 + 2 * p; ++t) ids.push_back((7 * t + 13 * p) % c.vocab);
    prompts.push_back(ids);
  }
  const std::vector<uint64_t> seeds = {1, 2, 3, 4};
  GenerateOptions o;
  o.max_new_tokens = kNewTokens;
  o.temperature = 1.0;
  o.num_samples = kGenerations;
  std::vector<double> sampler, model_only;
  for (int r = 0; r <= rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    auto done = SampleBatch(model, prompts, seeds, o);
    const double sampled = Seconds(start);
    if (!done.ok()) {
      std::fprintf(stderr, "%s\n", std::string(done.status().message()).c_str());
      return 1;
    }
    // The model alone: the prefill of the padded prompts, the cache repeated per completion, and the
    // decode steps of all 32 rows (every completion runs to 32 tokens here, as in the benchmark).
    start = std::chrono::steady_clock::now();
    {
      const int64_t longest = 24;
      KvCache cache;
      cache.capacity = longest + kNewTokens - 1;
      std::vector<int64_t> padded(kPrompts * longest, 0), offsets(kPrompts);
      for (int p = 0; p < kPrompts; ++p) {
        offsets[p] = longest - static_cast<int64_t>(prompts[p].size());
        std::copy(prompts[p].begin(), prompts[p].end(), padded.begin() + p * longest + offsets[p]);
      }
      cache.offsets = at::tensor(offsets, at::kLong);
      at::Tensor logits = model.DecodeStep(at::tensor(padded, at::kLong).view({kPrompts, longest}), &cache);
      cache.SelectRows(at::arange(kPrompts, at::kLong).repeat_interleave(kGenerations));
      at::Tensor next = at::full({kPrompts * kGenerations, 1}, 5, at::kLong);
      for (int n = 1; n < kNewTokens; ++n) logits = model.DecodeStep(next, &cache);
    }
    const double modeled = Seconds(start);
    if (r == 0) continue;  // Warmup.
    sampler.push_back(kPrompts * kGenerations * kNewTokens / sampled);
    model_only.push_back(kPrompts * kGenerations * kNewTokens / modeled);
  }
  const double s = Median(sampler), m = Median(model_only);
  std::printf("SampleBatch: %.0f generated tokens/s (%.2f ms a decode step of %d rows)\n", s,
              1e3 * kPrompts * kGenerations / s, kPrompts * kGenerations);
  std::printf("model alone (prefill + DecodeStep): %.0f tokens/s (%.2f ms a step); the sampler's own share %.0f%%\n", m,
              1e3 * kPrompts * kGenerations / m, 100.0 * (1 - s / m));
  return 0;
}

}  // namespace
}  // namespace tessera::parallel

int main(int argc, char** argv) { return tessera::parallel::Main(argc, argv); }
