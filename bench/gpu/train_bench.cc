#include "bench/gpu/train_bench.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/gpu/bench_util.h"
#include "layout/rank_generator.h"
#include "parallel/comm/process_groups.h"
#include "parallel/layers/sparse_mlp.h"
#include "parallel/models/decoder.h"
#include "parallel/train/trainer.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double PeakGpuBytes() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return static_cast<double>(stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak);
}

int Fail(const absl::Status& s) { return std::printf("error %s\n", std::string(s.message()).c_str()), 1; }

}  // namespace

int TrainBench(int argc, char** argv) {
  const std::string size = Arg(argc, argv, "size", "125m");
  const bool cuda = Arg(argc, argv, "device", "cuda") == "cuda";
  parallel::TrainerOptions o;
  o.model = SizeConfig(size);
  o.micro_batch = o.global_batch = std::stoi(Arg(argc, argv, "batch", "8"));
  o.fused_kernels = Arg(argc, argv, "fused", "1") == "1";
  o.precision = layout::Precision::kBf16;
  o.device.kind = cuda ? parallel::DeviceKind::kCuda : parallel::DeviceKind::kCpu;
  const int lora = std::stoi(Arg(argc, argv, "lora", "0"));
  if (lora > 0) {
    o.model.lora.rank = lora;
    o.model.lora.alpha = 2.0 * lora;
    o.model.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  }
  const std::string checkpoint = Arg(argc, argv, "checkpoint", "none");
  o.checkpoint_async = checkpoint == "async";
  constexpr int kSteps = 10, kWarm = 3;
  o.steps = kSteps + 2;
  o.lr.lr = 1e-4;
  o.lr.warmup_steps = 1;
  const std::string dir = Arg(argc, argv, "dir", "/tmp/tessera_gpu_train");
  std::filesystem::create_directories(dir);
  o.data.path = dir + "/tokens.bin";
  o.output_dir = dir + "/out";
  o.checkpoint_dir = o.output_dir + "/checkpoints";
  std::filesystem::remove_all(o.output_dir);
  WriteRandomTokens(o.data.path, static_cast<size_t>(o.micro_batch) * (o.model.seq_len + 1) * (kSteps + 3),
                    o.model.vocab, 7);
  auto mesh = layout::RankGenerator::Create(o.layout);
  if (!mesh.ok()) return Fail(mesh.status());
  parallel::BootstrapOptions boot;
  if (cuda) boot.backend = parallel::CommBackend::kNccl;
  auto groups = parallel::CreateProcessGroups(boot, *mesh);
  if (!groups.ok()) return Fail(groups.status());
  auto trainer = parallel::Trainer::Create(o, *groups);
  if (!trainer.ok()) return Fail(trainer.status());
  parallel::Decoder& model = (*trainer)->model();
  const bool fused_layers = Arg(argc, argv, "fused_layers", o.fused_kernels ? "1" : "0") == "1";
  model.set_fused_kernels(fused_layers);
  const std::string fp8 = Arg(argc, argv, "fp8", "none");
  if (fp8 != "none") {
    parallel::Fp8Options f;
    f.recipe = fp8 == "rowwise" ? parallel::Fp8Recipe::kRowwise : parallel::Fp8Recipe::kTensorwise;
    model.set_fp8(f);
  }
  const std::string experts = Arg(argc, argv, "experts", "auto");
  if (experts != "auto" && experts != "loop" && experts != "grouped") {
    return std::printf("error --experts %s: auto, loop or grouped\n", experts.c_str()), 2;
  }
  if (experts != "auto") {
    model.set_expert_gemm(experts == "grouped" ? parallel::ExpertGemm::kGrouped : parallel::ExpertGemm::kLoop);
  }
  const at::Device d = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  std::vector<double> seconds;
  double loss = 0;
  for (int i = 0; i < kSteps; ++i) {
    Sync(d);
    const auto t0 = Clock::now();
    auto s = (*trainer)->Step();
    Sync(d);
    if (!s.ok()) return Fail(s.status());
    if (i >= kWarm) seconds.push_back(Since(t0));
    loss = s->loss;
  }
  std::sort(seconds.begin(), seconds.end());
  const double t = seconds[seconds.size() / 2];
  const double n_params = static_cast<double>(model.num_parameters());
  const double tokens_per_step = static_cast<double>(o.micro_batch) * o.model.seq_len;
  const double flops = tokens_per_step * FlopsPerToken(o.model, n_params);
  const double peak = MatmulPeak(d);
  std::printf("train size %s fp8 %s experts %s lora %d params %.0f active %.0f batch %d seq %d fused %d fused_layers %d "
              "step_ms %.2f tokens_per_s %.0f model_TFLOPs %.1f peak_bf16_TFLOPs %.1f mfu %.3f last_loss %.4f "
              "peak_mem_GB %.1f\n",
              size.c_str(), fp8.c_str(), experts.c_str(), lora, n_params, ActiveParams(o.model, n_params),
              o.micro_batch, o.model.seq_len, o.fused_kernels ? 1 : 0, fused_layers ? 1 : 0, t * 1e3,
              tokens_per_step / t, flops / t / 1e12, peak / 1e12, flops / t / peak, loss,
              cuda ? PeakGpuBytes() / 1e9 : 0.0);
  // One more step under the profiler: where the whole step's time goes (forward, backward, clipping, AdamW).
  if (Arg(argc, argv, "profile", "0") == "1") {
    Profile("train_" + size + "_" + fp8, [&] { (void)(*trainer)->Step(); }, d, /*shapes=*/true, 50);
  }
  if (checkpoint == "none") return 0;
  // Async: twice (the first pins its host memory, later ones reuse it).
  for (int round = 0; round < (o.checkpoint_async ? 2 : 1); ++round) {
    Sync(d);
    const auto t0 = Clock::now();
    if (absl::Status s = (*trainer)->SaveCheckpoint(); !s.ok()) return Fail(s);
    const double blocked = Since(t0);
    double step_during = 0, committed = blocked;
    if (o.checkpoint_async) {
      const auto s0 = Clock::now();
      auto s = (*trainer)->Step();
      Sync(d);
      if (!s.ok()) return Fail(s.status());
      step_during = Since(s0);
      if (absl::Status w = (*trainer)->WaitForCheckpoint(); !w.ok()) return Fail(w);
      committed = Since(t0);
    }
    uint64_t bytes = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(o.output_dir)) {
      if (e.is_regular_file()) bytes += e.file_size();
    }
    // bytes: everything under the checkpoint directory (after round 1 of async, both checkpoints).
    std::printf("checkpoint size %s mode %s round %d bytes %llu blocked_s %.3f step_ms_during %.1f step_ms %.1f "
                "committed_s %.3f\n",
                size.c_str(), checkpoint.c_str(), round, static_cast<unsigned long long>(bytes), blocked,
                step_during * 1e3, t * 1e3, committed);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(o.output_dir);
  return 0;
}

}  // namespace tessera::bench
