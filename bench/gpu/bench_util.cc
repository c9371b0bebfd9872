#include "bench/gpu/bench_util.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_join.h"

namespace tessera::bench {

void Sync(const at::Device& d) {
  if (d.is_cuda()) c10::cuda::device_synchronize();
}

double TimeIt(const at::Device& d, const std::function<void()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  Sync(d);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto s = std::chrono::steady_clock::now();
    fn();
    Sync(d);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string Arg(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return fallback;
}

layout::ModelConfig SizeConfig(const std::string& size) {
  if (size == "125m") return {12, 768, 12, 50304, 1024};
  if (size == "1.3b") return {24, 2048, 16, 50304, 1024};
  if (size == "llama1b") {  // Llama 3.2 1B's blocks (GQA 32/8, SwiGLU 8192, tied head), a 32,000 vocabulary.
    layout::ModelConfig c{16, 2048, 32, 32000, 2048};
    c.family = layout::ModelFamily::kLlama;
    c.kv_heads = 8;
    c.ffn_hidden = 8192;
    c.rope_theta = 500000;
    return c;
  }
  if (size == "mixtral" || size == "tiny_mixtral") {  // Mixtral's block (GQA 16/4, 8 experts, top-2), ~0.76B.
    layout::ModelConfig c = size == "mixtral" ? layout::ModelConfig{8, 1024, 16, 32000, 2048}
                                              : layout::ModelConfig{2, 64, 16, 256, 64};
    c.family = layout::ModelFamily::kMixtral;
    c.kv_heads = 4;
    c.ffn_hidden = size == "mixtral" ? 3584 : 128;
    c.experts = 8;
    c.experts_per_token = 2;
    c.rope_theta = 1e6;
    c.tie_embeddings = false;
    return c;
  }
  if (size == "tiny_llama") {  // The same shape rules as llama1b, small enough for a CPU check.
    layout::ModelConfig c{2, 64, 4, 256, 64};
    c.family = layout::ModelFamily::kLlama;
    c.kv_heads = 2;
    return c;
  }
  return {2, 64, 4, 256, 64};
}

void WriteRandomTokens(const std::string& path, size_t count, int vocab, uint64_t seed) {
  std::vector<uint16_t> tokens(count);
  for (uint16_t& t : tokens) seed = seed * 6364136223846793005ull + 1442695040888963407ull, t = (seed >> 33) % vocab;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

double ActiveParams(const layout::ModelConfig& c, double n_params) {
  if (!c.IsMoe()) return n_params;
  const double expert = 3.0 * c.hidden * c.MoeFfnHidden();
  return n_params - static_cast<double>(c.MoeLayers()) * (c.experts - c.experts_per_token) * expert;
}

double FlopsPerToken(const layout::ModelConfig& c, double n_params) {
  return 6.0 * ActiveParams(c, n_params) + 12.0 * c.layers * c.hidden * c.seq_len;
}

double MatmulPeak(const at::Device& d) {
  auto o = at::TensorOptions().dtype(at::kBFloat16).device(d);
  const int64_t n = d.is_cuda() ? 8192 : 1024;
  at::Tensor a = at::randn({n, n}, o), b = at::randn({n, n}, o);
  const double t = TimeIt(d, [&] { at::mm(a, b); });
  return 2.0 * n * n * n / t;
}

void Profile(const std::string& label, const std::function<void()>& fn, const at::Device& d, bool shapes, size_t top) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const prof::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO, /*report_input_shapes=*/shapes);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (d.is_cuda()) activities.insert(ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  fn();
  Sync(d);
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::map<std::string, std::pair<double, int>> cpu, gpu;
  for (const auto& e : result->events()) {
    auto& m = e.deviceType() == c10::DeviceType::CUDA ? gpu : cpu;
    std::string key = e.name();
    if (shapes && (key == "aten::copy_" || key == "aten::clone" || key == "aten::contiguous" || key == "aten::_to_copy")) {
      for (const auto& shape : e.shapes()) key += " [" + absl::StrJoin(shape, ",") + "]";
    }
    auto& [ms, n] = m[key];
    ms += e.durationNs() / 1e6;
    ++n;
  }
  for (auto* m : {&cpu, &gpu}) {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [name, v] : *m) rows.push_back({v.first, name}), total += m == &gpu ? v.first : 0;
    std::sort(rows.rbegin(), rows.rend());
    const char* side = m == &cpu ? "cpu" : "gpu";
    if (m == &gpu) std::printf("profile %s gpu_kernel_total_ms %.2f\n", label.c_str(), total);
    for (size_t i = 0; i < rows.size() && i < top; ++i) {
      std::printf("profile %s %s %.2f %d %s\n", label.c_str(), side, rows[i].first, (*m)[rows[i].second].second,
                  rows[i].second.substr(0, shapes ? 160 : 90).c_str());
    }
  }
}

}  // namespace tessera::bench
