// Benchmark: how long a checkpoint holds training, synchronous vs asynchronous (checkpoint.async), for
// a ~100M-parameter GPT in one process on the CPU (fp32 weights and AdamW moments: ~1.1 GB per
// checkpoint, written and fsynced to --dir). Interleaved rounds, each with fresh trainers: one step,
// then the timed SaveCheckpoint (sync: until committed; async: until the snapshot is taken and the
// write handed to its thread), then for async one more step while the write runs and the wait until
// it is committed. Prints medians and every round.
//
//   bazel run -c opt //bench:checkpoint_blocking -- --rounds=3
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"
#include "layout/rank_generator.h"
#include "parallel/comm/process_groups.h"
#include "parallel/train/trainer.h"
#include "worker/rank/spec_to_options.h"

ABSL_FLAG(int, layers, 12, "Layers.");
ABSL_FLAG(int, hidden, 768, "Hidden size.");
ABSL_FLAG(int, vocab, 8192, "Vocabulary.");
ABSL_FLAG(int, rounds, 3, "Interleaved rounds (sync then async each).");
ABSL_FLAG(std::string, dir, "", "Where checkpoints go (default: a fresh directory under /tmp).");

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::cerr << "error: " << what << ": " << s << "\n";
    std::exit(1);
  }
}

std::unique_ptr<tessera::parallel::Trainer> MakeTrainer(const std::string& dir, const std::string& data, bool async) {
  auto spec = tessera::spec::ParseJobSpec(
      absl::StrCat("name: ckpt\nmodel: {layers: ", absl::GetFlag(FLAGS_layers), ", hidden: ", absl::GetFlag(FLAGS_hidden),
                   ", heads: 12, vocab: ", absl::GetFlag(FLAGS_vocab), ", seq_len: 128}\ndata: {path: ", data,
                   "}\ntrain: {steps: 100, micro_batch: 1, global_batch: 1}\ncheckpoint: {async: ",
                   async ? "true" : "false", ", keep: 1}\noutput_dir: ", dir, "\n"),
      {});
  if (!spec.ok()) {
    std::cerr << "error: " << spec.status() << "\n";
    std::exit(2);
  }
  tessera::parallel::TrainerOptions options = tessera::rank::ToTrainerOptions(*spec);
  auto mesh = tessera::layout::RankGenerator::Create(options.layout);
  Check(mesh.status(), "mesh");
  auto groups = tessera::parallel::CreateProcessGroups(tessera::parallel::BootstrapOptions{}, *mesh);
  Check(groups.status(), "groups");
  auto trainer = tessera::parallel::Trainer::Create(options, *groups);
  Check(trainer.status(), "trainer");
  return std::move(*trainer);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = absl::StrCat("/tmp/tessera-checkpoint-blocking-", getpid());
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/tokens.bin";
  {
    std::vector<uint16_t> tokens(1 << 20);
    std::mt19937 rng(1);
    for (auto& t : tokens) t = static_cast<uint16_t>(rng() % absl::GetFlag(FLAGS_vocab));
    std::ofstream(data, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  }
  std::vector<double> sync_blocked, async_blocked, async_committed, step_before, step_during;
  int64_t params = 0;
  for (int r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    for (bool async : {false, true}) {
      const std::string out = absl::StrCat(dir, "/", async ? "async" : "sync", r);
      auto trainer = MakeTrainer(out, data, async);
      params = 0;
      for (const auto& p : trainer->model().params()) params += p.value.numel();
      auto t = Clock::now();
      Check(trainer->Step().status(), "step");
      const double step = Since(t);
      t = Clock::now();
      Check(trainer->SaveCheckpoint(), "checkpoint");
      const double blocked = Since(t);
      if (async) {
        const auto s = Clock::now();
        Check(trainer->Step().status(), "step during the write");
        step_during.push_back(Since(s));
        Check(trainer->WaitForCheckpoint(), "background write");
        async_committed.push_back(Since(t));
        async_blocked.push_back(blocked);
        step_before.push_back(step);
      } else {
        sync_blocked.push_back(blocked);
      }
      trainer.reset();
      std::filesystem::remove_all(out);
      std::printf("round %d %-5s blocked %.3f s\n", r, async ? "async" : "sync", blocked);
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("\n%.1fM parameters, %d rounds (medians):\n", params / 1e6, absl::GetFlag(FLAGS_rounds));
  std::printf("  synchronous checkpoint: step held %.3f s\n", Median(sync_blocked));
  std::printf("  asynchronous:           step held %.3f s (%.1f%% of synchronous); committed %.3f s after the "
              "checkpoint step\n",
              Median(async_blocked), 100 * Median(async_blocked) / Median(sync_blocked), Median(async_committed));
  std::printf("  step time: %.3f s before, %.3f s while the write runs\n", Median(step_before), Median(step_during));
  return 0;
}
