// GPU checks and benchmarks of the engine, for the device machine (tools/gpu/check.sh runs it).
//
//   gpu_bench check   [--dir D]         5 steps of one spec on cpu and on cuda (fused on and off):
//                                       losses must agree within rtol 1e-3 (fp32). Exit 1 otherwise.
//                                       Then the memory features on cuda (one rank): ZeRO-3 and offload
//                                       in fp32 (rtol 1e-3), bf16 / fp16 with and without offload
//                                       (rtol 2e-2 of the fp32 cpu losses, bf16's precision).
//   gpu_bench capacity --layers L --hidden H [--heads A] [--seq S] [--batch B] [--offload 0|1] [--device cpu]
//                                       3 steps of a GPT in bf16 with activation checkpointing on one
//                                       GPU, optimizer state on the GPU or offloaded: "fits" with
//                                       tokens/s and peak GPU / host bytes, or "does_not_fit" and why.
//   gpu_bench kernels                   each fused kernel against its LibTorch composite: median time,
//                                       bytes moved, and the fraction of the device-copy bandwidth.
//   gpu_bench gpt --size 125m|1.3b|tiny [--batch B] [--device cuda|cpu]
//                                       forward+backward of the GPT in bf16 (optimizer excluded):
//                                       tokens/s and MFU against the bf16 matmul peak measured here.
//   gpu_bench train ...                 full training steps through the Trainer: bench/gpu/train_bench.h.
//   gpu_bench moe ...                   one sparse block, experts looped vs grouped: bench/gpu/moe_bench.h.
//   gpu_bench fp8                       bench/gpu/fp8_bench.h.
//   gpu_bench generate                  greedy generation (KV cache) of a GPT-2 and a Llama (GQA)
//                                       with the same weights on cpu and cuda: the same tokens,
//                                       prompt logits within 1e-4 (fp32). Exit 1 otherwise.
// Output: one line per measurement, "key value ..." (parsed by tools/gpu/check.sh into its table).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "bench/gpu/bench_util.h"
#include "bench/gpu/fp8_bench.h"
#include "bench/gpu/generate_check.h"
#include "bench/gpu/moe_bench.h"
#include "bench/gpu/train_bench.h"
#include "kernels/cpu_adam.h"
#include "kernels/fused_kernels.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/models/decoder.h"
#include "parallel/train/trainer.h"

namespace tessera::bench {
namespace {

using parallel::DeviceKind;




// ---- check ----

int Check(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/tokens.bin";
  {
    std::vector<uint16_t> tokens(40000);
    uint64_t x = 12345;
    for (size_t i = 0; i < tokens.size(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tokens[i] = static_cast<uint16_t>((i % 7 == 0) ? (x >> 40) % 256 : (tokens[i ? i - 1 : 0] * 31 + 7) % 256);
    }
    std::ofstream(data, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  }
  auto run = [&](DeviceKind kind, bool fused, std::vector<double>* losses,
                 const std::function<void(parallel::TrainerOptions&)>& modify = nullptr) -> absl::Status {
    parallel::TrainerOptions o;
    o.model = {2, 64, 4, 256, 32};
    o.data.path = data;
    o.device.kind = kind;
    o.steps = 5;
    o.micro_batch = 4;
    o.global_batch = 8;
    o.lr.lr = 1e-3;
    o.lr.warmup_steps = 1;
    o.fused_kernels = fused;
    o.output_dir = dir + "/out";
    if (modify) modify(o);
    auto mesh = layout::RankGenerator::Create(o.layout);
    if (!mesh.ok()) return mesh.status();
    parallel::BootstrapOptions boot;
    if (kind == DeviceKind::kCuda) boot.backend = parallel::CommBackend::kNccl;
    auto groups = parallel::CreateProcessGroups(boot, *mesh);
    if (!groups.ok()) return groups.status();
    auto trainer = parallel::Trainer::Create(o, *groups);
    if (!trainer.ok()) return trainer.status();
    for (int i = 0; i < 5; ++i) {
      auto s = (*trainer)->Step();
      if (!s.ok()) return s.status();
      losses->push_back(s->loss);
    }
    return absl::OkStatus();
  };
  std::vector<double> cpu, fused, unfused;
  for (auto [kind, f, out] : {std::tuple{DeviceKind::kCpu, false, &cpu}, std::tuple{DeviceKind::kCuda, true, &fused},
                              std::tuple{DeviceKind::kCuda, false, &unfused}}) {
    absl::Status s = run(kind, f, out);
    if (!s.ok()) {
      std::printf("check_error %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::printf("check_loss step %zu cpu %.7f cuda_fused %.7f cuda_unfused %.7f\n", i + 1, cpu[i], fused[i], unfused[i]);
    worst = std::max({worst, std::fabs(fused[i] - cpu[i]) / std::fabs(cpu[i]),
                      std::fabs(unfused[i] - cpu[i]) / std::fabs(cpu[i])});
  }
  const bool ok = worst <= 1e-3;
  std::printf("check_result %s max_rel_loss_diff %.3g (bar 1e-3)\n", ok ? "PASS" : "FAIL", worst);

  // The memory features on the GPU (parallel/zero with CUDA parameters; one rank, so nothing is
  // sharded, but stage 3 frees and re-gathers every block and offload keeps pinned host state).
  struct Variant {
    const char* name;
    int stage;
    bool offload;
    layout::Precision precision;
    double rtol;
  };
  bool memory_ok = true;
  for (const Variant& v : {Variant{"fp32_zero3", 3, false, layout::Precision::kFp32, 1e-3},
                           Variant{"fp32_offload", 0, true, layout::Precision::kFp32, 1e-3},
                           Variant{"bf16", 0, false, layout::Precision::kBf16, 2e-2},
                           Variant{"bf16_zero2_offload", 2, true, layout::Precision::kBf16, 2e-2},
                           Variant{"fp16_offload", 0, true, layout::Precision::kFp16, 2e-2}}) {
    std::vector<double> got;
    absl::Status st = run(DeviceKind::kCuda, true, &got, [&](parallel::TrainerOptions& o) {
      o.layout.zero_stage = static_cast<layout::ZeroStage>(v.stage);
      o.offload_optimizer = v.offload;
      o.precision = v.precision;
    });
    if (!st.ok()) {
      std::printf("check_memory %s error %s\n", v.name, std::string(st.message()).c_str());
      memory_ok = false;
      continue;
    }
    double w = 0;
    for (size_t i = 0; i < cpu.size(); ++i) w = std::max(w, std::fabs(got[i] - cpu[i]) / std::fabs(cpu[i]));
    const bool pass = w <= v.rtol;
    memory_ok = memory_ok && pass;
    std::printf("check_memory %s %s max_rel_loss_diff %.3g (bar %.0e) last_loss %.5f\n", v.name, pass ? "PASS" : "FAIL",
                w, v.rtol, got.back());
  }
  std::printf("check_memory_result %s\n", memory_ok ? "PASS" : "FAIL");
  return ok && memory_ok ? 0 : 1;
}

// ---- capacity ----

int64_t HostPeakBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

int Capacity(int argc, char** argv) {
  parallel::TrainerOptions o;
  o.model.layers = std::stoi(Arg(argc, argv, "layers", "24"));
  o.model.hidden = std::stoi(Arg(argc, argv, "hidden", "2048"));
  o.model.heads = std::stoi(Arg(argc, argv, "heads", std::to_string(o.model.hidden / 128)));
  o.model.vocab = 50304;
  o.model.seq_len = std::stoi(Arg(argc, argv, "seq", "1024"));
  o.micro_batch = o.global_batch = std::stoi(Arg(argc, argv, "batch", "4"));
  o.offload_optimizer = Arg(argc, argv, "offload", "0") == "1";
  o.precision = layout::Precision::kBf16;
  o.activation_checkpointing = true;
  const bool cuda = Arg(argc, argv, "device", "cuda") == "cuda";  // cpu: tries the flow on a small model.
  o.device.kind = cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  o.steps = 3;
  o.lr.lr = 1e-4;
  const std::string dir = Arg(argc, argv, "dir", "/tmp/tessera_gpu_capacity");
  std::filesystem::create_directories(dir);
  o.data.path = dir + "/tokens.bin";
  o.output_dir = dir + "/out";
  WriteRandomTokens(o.data.path, static_cast<size_t>(o.micro_batch) * (o.model.seq_len + 1) * 4, 50304, 99);
  const double n_params = 12.0 * o.model.layers * o.model.hidden * o.model.hidden +
                          13.0 * o.model.layers * o.model.hidden + (o.model.vocab + o.model.seq_len + 2.0) * o.model.hidden;
  std::printf("capacity layers %d hidden %d params %.0f offload %d batch %d seq %d ", o.model.layers, o.model.hidden,
              n_params, o.offload_optimizer ? 1 : 0, o.micro_batch, o.model.seq_len);
  std::fflush(stdout);
  auto fail = [&](const std::string& why) {
    std::printf("result does_not_fit why %s\n", why.substr(0, 200).c_str());
    return 3;
  };
  std::vector<double> seconds;
  try {
    auto mesh = layout::RankGenerator::Create(o.layout);
    if (!mesh.ok()) return fail(std::string(mesh.status().message()));
    parallel::BootstrapOptions boot;
    if (cuda) boot.backend = parallel::CommBackend::kNccl;
    auto groups = parallel::CreateProcessGroups(boot, *mesh);
    if (!groups.ok()) return fail(std::string(groups.status().message()));
    auto trainer = parallel::Trainer::Create(o, *groups);
    if (!trainer.ok()) return fail(std::string(trainer.status().message()));
    const bool profile = Arg(argc, argv, "profile", "0") == "1";
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<parallel::StepStats> s;
      auto step = [&] { s = (*trainer)->Step(); };
      if (profile && i == 2) {
        Profile("capacity", step, cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU));
      } else {
        step();
      }
      if (cuda) Sync(at::Device(at::kCUDA, 0));
      if (!s.ok()) return fail(std::string(s.status().message()));
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  const double step_s = std::min(seconds[1], seconds[2]);  // The first step also warms the allocators.
  int64_t gpu_peak = 0;
  if (cuda) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    gpu_peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  std::printf("result fits step_s %.2f tokens_per_s %.0f gpu_peak_GB %.1f host_peak_GB %.1f\n", step_s,
              o.micro_batch * o.model.seq_len / step_s, gpu_peak / 1e9, HostPeakBytes() / 1e9);
  return 0;
}

// ---- cpu_adam ----

// The host update of an offloaded step in isolation: CpuAdamW over n fp32 parameters with bf16
// gradients and the bf16 copy written (what ZeRO offload runs per unit), in pinned or pageable
// memory, at 1 thread and at ATen's thread count, at each SIMD level this CPU has.
int CpuAdamBench(int argc, char** argv) {
  const int64_t n = std::stoll(Arg(argc, argv, "n", "268435456"));
  const int threads = at::get_num_threads();
  std::printf("cpu_adam n %lld aten_threads %d hardware_threads %u simd %s\n", static_cast<long long>(n), threads,
              std::thread::hardware_concurrency(), kernels::SimdName(kernels::DetectSimd()));
  for (bool pinned : {true, false}) {
    if (pinned && !at::hasCUDA()) continue;  // Pinning needs the CUDA driver.
    const at::TensorOptions host = at::TensorOptions().pinned_memory(pinned);
    at::Tensor p = at::randn({n}, host), m = at::zeros({n}, host), v = at::zeros({n}, host);
    at::Tensor g = at::randn({n}, host.dtype(at::kBFloat16)), out = at::empty({n}, host.dtype(at::kBFloat16));
    for (kernels::Simd simd : {kernels::Simd::kAvx2, kernels::Simd::kAvx512}) {
      if (static_cast<int>(simd) > static_cast<int>(kernels::DetectSimd())) continue;
      for (int t : {1, threads}) {
        at::set_num_threads(t);
        int64_t step = 0;
        const double s = TimeIt(at::Device(at::kCPU), [&] {
          kernels::AdamWStep st{1e-4, 0.9, 0.95, 1e-8, 0.1, ++step};
          kernels::CpuAdamW(p.data_ptr<float>(), {g.data_ptr(), kernels::GradType::kBf16, 1.0f},
                            m.data_ptr<float>(), v.data_ptr<float>(), n, st, simd, /*parallel=*/true,
                            static_cast<uint16_t*>(out.data_ptr()), kernels::Copy16::kBf16);
        }, 1, 3);
        std::printf("cpu_adam pinned %d simd %s threads %d Mparams_per_s %.0f GBps %.1f\n", pinned ? 1 : 0,
                    kernels::SimdName(simd), t, n / s / 1e6, 26.0 * n / s / 1e9);
      }
      at::set_num_threads(threads);
    }
  }
  return 0;
}

// ---- kernels ----

double CopyBandwidth(const at::Device& d) {
  at::Tensor a = at::randn({256 << 20}, at::TensorOptions().device(d));  // 1 GiB fp32.
  at::Tensor b = at::empty_like(a);
  const double t = TimeIt(d, [&] { b.copy_(a); });
  return 2.0 * a.numel() * 4 / t;  // Read + write.
}

void Report(const char* name, const char* dtype, double t_fused, double t_composite, double bytes, double bw) {
  std::printf("kernel %s %s fused_us %.1f composite_us %.1f speedup %.2f fused_GBps %.0f of_copy_bw %.2f\n", name,
              dtype, t_fused * 1e6, t_composite * 1e6, t_composite / t_fused, bytes / t_fused / 1e9,
              bytes / t_fused / bw);
}

int Kernels() {
  const at::Device d(at::kCUDA, 0);
  const kernels::FusedKernels* cuda = kernels::CudaKernels();
  const kernels::FusedKernels& comp = kernels::CompositeKernels();
  if (cuda == nullptr || !at::hasCUDA()) {
    std::printf("kernels_error no CUDA device or kernels\n");
    return 1;
  }
  const double bw = CopyBandwidth(d);
  std::printf("copy_bandwidth_GBps %.0f\n", bw / 1e9);
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const char* dn = dt == at::kFloat ? "fp32" : "bf16";
    const int64_t e = dt == at::kFloat ? 4 : 2;
    auto o = at::TensorOptions().dtype(dt).device(d);
    {  // GPT-2 small activations: 8×1024 tokens × 768.
      const int64_t n = 8 * 1024, h = 768;
      at::Tensor x = at::randn({n, h}, o), w = at::randn({h}, o), b = at::randn({h}, o), dy = at::randn({n, h}, o);
      Report("layer_norm_fwd", dn, TimeIt(d, [&] { cuda->LayerNormForward(x, w, b, 1e-5); }),
             TimeIt(d, [&] { at::layer_norm(x, {h}, w, b, 1e-5); }), 2.0 * n * h * e + 8.0 * n, bw);
      auto r = cuda->LayerNormForward(x, w, b, 1e-5);
      // Composite backward baseline: ATen's own layer-norm backward kernel.
      Report("layer_norm_bwd", dn, TimeIt(d, [&] { cuda->LayerNormBackward(dy, x, r.mean, r.rstd, w); }),
             TimeIt(d, [&] {
               at::native_layer_norm_backward(dy, x, {h}, r.mean.view({n, 1}), r.rstd.view({n, 1}), w, b,
                                              {true, true, true});
             }),
             3.0 * n * h * e + 8.0 * n, bw);
      (void)comp;
    }
    {
      const int64_t n = 8 * 1024, f = 3072;
      at::Tensor x = at::randn({n, f}, o), b = at::randn({f}, o), dy = at::randn({n, f}, o);
      Report("bias_gelu_fwd", dn, TimeIt(d, [&] { cuda->BiasGeluForward(x, b); }),
             TimeIt(d, [&] { at::gelu(x + b); }), 2.0 * n * f * e, bw);
      Report("bias_gelu_bwd", dn, TimeIt(d, [&] { cuda->BiasGeluBackward(dy, x, b); }),
             TimeIt(d, [&] { comp.BiasGeluBackward(dy, x, b); }), 3.0 * n * f * e, bw);
    }
    {  // GPT-2 small logits: 8×1024 tokens × 50304. Baseline: ATen's cross-entropy on the same dtype
       // (log_softmax + nll, as PyTorch eager trains), forward and backward.
      const int64_t n = 8 * 1024, v = 50304;
      at::Tensor x = at::randn({n, v}, o), target = at::randint(v, {n}, o.dtype(at::kLong));
      at::Tensor dloss = at::full({n}, 1.0 / n, o.dtype(at::kFloat));
      Report("cross_entropy_fwd", dn, TimeIt(d, [&] { cuda->CrossEntropyForward(x); }),
             TimeIt(d, [&] { at::cross_entropy_loss(x, target, {}, at::Reduction::None); }), 1.0 * n * v * e, bw);
      auto st = cuda->CrossEntropyForward(x);
      at::Tensor lse = st.max + st.sum_exp.log();
      at::Tensor xr = x.detach().requires_grad_(true);
      at::Tensor losses = at::cross_entropy_loss(xr, target, {}, at::Reduction::None);
      at::Tensor dl = dloss.to(losses.scalar_type());
      Report("cross_entropy_bwd", dn, TimeIt(d, [&] { cuda->CrossEntropyBackward(x, lse, target, dloss); }),
             TimeIt(d, [&] { torch::autograd::grad({losses}, {xr}, {dl}, /*retain_graph=*/true); }),
             2.0 * n * v * e, bw);
    }
    {
      const int64_t bh = 8 * 12, t = 1024;
      at::Tensor s = at::randn({bh, t, t}, o), dy = at::randn({bh, t, t}, o);
      at::Tensor mask = at::ones({t, t}, o.dtype(at::kBool)).triu(1);
      Report("causal_softmax_fwd", dn, TimeIt(d, [&] { cuda->CausalSoftmaxForward(s, 0.125); }),
             TimeIt(d, [&] { at::softmax((s * 0.125).masked_fill(mask, -INFINITY), -1); }), 2.0 * bh * t * t * e, bw);
      at::Tensor y = cuda->CausalSoftmaxForward(s, 0.125);
      Report("causal_softmax_bwd", dn, TimeIt(d, [&] { cuda->CausalSoftmaxBackward(dy, y, 0.125); }),
             TimeIt(d, [&] { at::_softmax_backward_data(dy, y, -1, dt) * 0.125; }), 3.0 * bh * t * t * e, bw);
    }
  }
  {  // AdamW over a GPT-2-small-like parameter list (~124M fp32 parameters).
    auto o = at::TensorOptions().device(d);
    std::vector<at::Tensor> p, g, m, v;
    std::vector<int64_t> sizes = {50304 * 768, 1024 * 768};
    for (int l = 0; l < 12; ++l) {
      for (int64_t s : {768 * 2304, 2304, 768 * 768, 768, 768 * 3072, 3072, 3072 * 768, 768, 768, 768, 768, 768}) {
        sizes.push_back(s);
      }
    }
    int64_t total = 0;
    for (int64_t s : sizes) {
      p.push_back(at::randn({s}, o)), g.push_back(at::randn({s}, o)), m.push_back(at::zeros({s}, o)),
          v.push_back(at::zeros({s}, o));
      total += s;
    }
    kernels::AdamWStep step{1e-4, 0.9, 0.95, 1e-8, 0.1, 1};
    const double t_fused = TimeIt(d, [&] { cuda->AdamW(p, g, m, v, step); });
    const double t_foreach = TimeIt(d, [&] {
      at::_fused_adamw_(p, g, m, v, {}, std::vector<at::Tensor>(p.size(), at::ones({}, o)), 1e-4, 0.9, 0.95, 0.1,
                        1e-8, false, false);
    });
    std::printf("adamw_params %lld\n", static_cast<long long>(total));
    Report("multi_tensor_adamw_vs_torch_fused_adamw", "fp32", t_fused, t_foreach, 7.0 * 4 * total, bw);
  }
  return 0;
}

// ---- gpt ----


int GptBench(int argc, char** argv) {
  const std::string size = Arg(argc, argv, "size", "125m");
  const bool cuda = Arg(argc, argv, "device", "cuda") == "cuda";
  const int batch = std::stoi(Arg(argc, argv, "batch", "8"));
  const bool fused = Arg(argc, argv, "fused", "1") == "1";
  const parallel::ModelConfig c = SizeConfig(size);
  const at::Device d = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  auto tp = std::make_shared<parallel::SelfCommunicator>(0, "tp[0]");
  parallel::Decoder model(c, tp, 1234, d);
  model.set_fused_kernels(fused);
  {
    at::NoGradGuard no_grad;
    for (parallel::Param& p : model.params()) p.value = p.value.to(at::kBFloat16).detach().requires_grad_(true);
  }
  at::Tensor tokens = at::randint(c.vocab, {batch, c.seq_len + 1}, at::TensorOptions().dtype(at::kLong).device(d));
  auto step = [&] {
    at::Tensor loss = model.Loss(tokens.narrow(1, 0, c.seq_len), tokens.narrow(1, 1, c.seq_len));
    loss.backward();
    for (parallel::Param& p : model.params()) p.value.mutable_grad() = at::Tensor();
  };
  const double t = TimeIt(d, step, 3, 10);
  if (Arg(argc, argv, "profile", "0") == "1") Profile("gpt_" + size, step, d, /*shapes=*/true, 60);
  const double tokens_per_step = static_cast<double>(batch) * c.seq_len;
  const double n_params = static_cast<double>(model.num_parameters());
  const double flops = tokens_per_step * FlopsPerToken(c, n_params);
  const double peak = MatmulPeak(d);
  std::printf("gpt size %s params %.0f batch %d seq %d fused %d step_ms %.2f tokens_per_s %.0f model_TFLOPs %.1f "
              "peak_bf16_TFLOPs %.1f mfu %.3f\n",
              size.c_str(), n_params, batch, c.seq_len, fused ? 1 : 0, t * 1e3, tokens_per_step / t,
              flops / t / 1e12, peak / 1e12, flops / t / peak);
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "check") return tessera::bench::Check(tessera::bench::Arg(argc, argv, "dir", "/tmp/tessera_gpu_check"));
    if (mode == "kernels") return tessera::bench::Kernels();
    if (mode == "cpu_adam") return tessera::bench::CpuAdamBench(argc, argv);
    if (mode == "gpt") return tessera::bench::GptBench(argc, argv);
    if (mode == "capacity") return tessera::bench::Capacity(argc, argv);
    if (mode == "train") return tessera::bench::TrainBench(argc, argv);
    if (mode == "generate") return tessera::bench::GenerateCheck();
    if (mode == "fp8") return tessera::bench::Fp8Bench(argc, argv);
    if (mode == "moe") return tessera::bench::MoeBench(argc, argv);
  } catch (const std::exception& e) {
    std::printf("error %s\n", std::string(e.what()).substr(0, 300).c_str());
    return 1;
  }
  std::fprintf(stderr, "usage: gpu_bench check|kernels|gpt|train|moe|fp8|capacity|generate (see the top of bench/gpu/gpu_bench.cc)\n");
  return 2;
}
