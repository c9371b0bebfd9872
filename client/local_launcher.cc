#include "client/local_launcher.h"

#include "client/auto_layout.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/exit_codes.h"
#include "client/progress_line.h"
#include "common/net/free_port.h"
#include "common/process/cpu_peak.h"
#include "common/process/find_binary.h"
#include "common/process/rank_launch.h"
#include "common/process/subprocess.h"
#include "spec/data_options_of.h"
#include "spec/job_spec.h"
#include "spec/paths.h"
#include "common/steplog/step_log.h"
#include "formats/data/preference_dataset.h"
#include "formats/data/prompt_dataset.h"
#include "formats/data/token_dataset.h"
#include "google/protobuf/util/json_util.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_signal{0};

void OnSignal(int sig) { g_signal = sig; }


void PrintErrors(const absl::Status& s) {
  for (absl::string_view line : absl::StrSplit(s.message(), '\n')) std::cerr << "error: " << line << "\n";
}

// Reads steps.jsonl records appended since the last call (common/steplog). Rank 0 replaces the file
// when it starts (trimmed to the checkpoint it resumes from, renamed into place): a new file is read
// from its start and its step records up to its end (over as many reads as that takes) collapse to
// the newest. A warning is passed once per text.
class StepLogTail {
 public:
  explicit StepLogTail(std::string path) : path_(std::move(path)) {}
  std::vector<steplog::StepRecord> Poll() {
    std::vector<steplog::StepRecord> out;
    // Never a FIFO waited on, never a link or device read (a user's OUTPUT_DIR).
    const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0) return out;
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      std::vector<steplog::StepRecord> steps;
      const steplog::Appended read = steplog::ReadAppended(fd, &position_, kMaxBytesPerPoll, [&](std::string_view line) {
        std::optional<steplog::StepRecord> r = steplog::ParseStepLine(line);
        if (!r.has_value()) return;
        if (r->warning.has_value()) {
          if (seen_warnings_.insert(*r->warning).second) out.push_back(*std::move(r));
          return;
        }
        steps.push_back(*std::move(r));
      });
      if (read.replaced) catching_up_ = true, held_.reset();
      if (catching_up_) {  // Only the newest step of the new file so far, shown once it is read to its end.
        if (!steps.empty()) held_ = std::move(steps.back());
        steps.clear();
        if (read.at_end) {
          catching_up_ = false;
          if (held_) steps.push_back(*std::move(held_));
          held_.reset();
        }
      }
      for (steplog::StepRecord& r : steps) out.push_back(std::move(r));
    }
    close(fd);
    return out;
  }
  // Lines already there (an earlier run's) are not shown, nor are its warnings again.
  void SkipExisting() {
    for (int64_t before = -1; before != position_.offset;) {
      before = position_.offset;
      Poll();
    }
  }

 private:
  static constexpr int64_t kMaxBytesPerPoll = 4 << 20;
  std::string path_;
  steplog::TailPosition position_;
  bool catching_up_ = false;                 // Reading a replaced file up to its end.
  std::optional<steplog::StepRecord> held_;  // Its newest step so far.
  std::set<std::string> seen_warnings_;
};

}  // namespace

std::string FindRankBinary(bool cuda) {
  if (cuda) return process::FindTesseraBinary("tessera-rank-cuda", "worker/rank", "TESSERA_RANK_CUDA_BINARY");
  return process::FindTesseraBinary("tessera-rank", "worker/rank", "TESSERA_RANK_BINARY");
}

int RunLocal(const LaunchOptions& options) {
  auto spec = spec::LoadJobSpec(options.spec_path, options.overrides);
  if (!spec.ok()) {
    PrintErrors(spec.status());
    return kExitBadInput;
  }
  // What the ranks and their checkpoints record (a LoRA base, say) must not depend on where the
  // user stood.
  spec::MakePathsAbsolute(&*spec, fs::current_path().string());
  if (spec->parallel().auto_layout()) {
    // parallel: auto — the planner picks the layout for the devices given (tessera run --devices N).
    const int devices = options.devices > 0 ? options.devices : spec->parallel().devices();
    auto chosen = ApplyAutoLayout(&*spec, devices);
    if (!chosen.ok()) {
      std::cerr << "error: " << chosen.status().message() << "\n";
      return kExitBadInput;
    }
    if (auto errors = spec::ValidateJobSpec(*spec); !errors.empty()) {
      PrintErrors(spec::ToStatus(errors));
      return kExitBadInput;
    }
    if (!options.quiet) std::cout << "parallel: auto chose " << *chosen << "\n";
  }
  if (spec->train().objective() == v1::OBJECTIVE_DPO || spec->train().objective() == v1::OBJECTIVE_REWARD) {
    // A preference dataset (docs/post-training.md), read as the ranks will read it.
    if (auto pairs = formats::data::PreferenceDataset::Open(spec->data().path(), spec->model().vocab()); !pairs.ok()) {
      std::cerr << "error: data.path: " << pairs.status().message() << "\n";
      return kExitBadInput;
    }
  } else if (spec->train().objective() == v1::OBJECTIVE_GRPO) {
    // A prompt dataset (docs/data-format.md "Prompt datasets"), read as the ranks will read it.
    if (auto prompts = formats::data::PromptDataset::Open(spec->data().path(), spec->model().vocab()); !prompts.ok()) {
      std::cerr << "error: data.path: " << prompts.status().message() << "\n";
      return kExitBadInput;
    }
  } else if (auto ds = formats::data::TrainingData::OpenWithValidation(spec::DataOptionsOf(*spec), spec::BlendOf(*spec),
                                                          spec::ValidDataOptionsOf(*spec),
                                                          spec->data().valid_fraction());
      !ds.ok()) {
    const bool named = spec->data().blend_size() > 0 || ds.status().message().rfind("data.", 0) == 0;
    std::cerr << "error: " << (named ? "" : "data.path: ") << ds.status().message() << "\n";
    return kExitBadInput;
  }
  if (!spec->model().init_from().empty() && !fs::exists(spec->model().init_from())) {
    std::cerr << "error: model.init_from: " << spec->model().init_from() << " does not exist\n";
    return kExitBadInput;
  }
  const bool cuda = spec->device() == v1::DEVICE_CUDA;
  const std::string rank_binary = options.rank_binary.empty() ? FindRankBinary(cuda) : options.rank_binary;
  if (rank_binary.empty()) {
    std::cerr << "error: cannot find the " << (cuda ? "tessera-rank-cuda" : "tessera-rank") << " executable (set "
              << (cuda ? "TESSERA_RANK_CUDA_BINARY" : "TESSERA_RANK_BINARY") << ")\n";
    return kExitBadInput;
  }
  const std::string out_dir = spec->output_dir();
  std::error_code ec;
  fs::create_directories(out_dir + "/logs", ec);
  if (ec) {
    std::cerr << "error: output_dir: cannot create " << out_dir << ": " << ec.message() << "\n";
    return kExitBadInput;
  }
  // The resolved spec every rank reads: protobuf's JSON form, which the YAML loader reads back.
  std::string json;
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  print.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(*spec, &json, print);
  const std::string spec_file = out_dir + "/job.json";
  std::ofstream(spec_file) << json;

  const int world = spec::WorldSize(*spec);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads_per_rank > 0 ? options.threads_per_rank : std::max(1, cores / world);
  const int port = net::PickFreePort();

  StepLogTail tail(out_dir + "/steps.jsonl");
  tail.SkipExisting();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    process::RankLaunch launch;  // One machine: every rank on loopback, device r.
    launch.binary = rank_binary;
    launch.spec_path = spec_file;
    launch.rank = r, launch.world_size = world, launch.local_rank = r;
    launch.store_port = port;
    launch.threads = threads;
    // MFU against a CPU's nominal peak; a GPU's is not known here (the worker takes --peak_tflops_per_device).
    if (spec->device() != v1::DEVICE_CUDA) launch.peak_flops_per_device = process::CpuPeakFlops(threads);
    launch.dump_at_step = options.dump_at_step;
    process::SpawnOptions so;
    so.argv = launch.Argv();
    so.env = launch.Env();
    so.log_path = absl::StrCat(out_dir, "/logs/rank_", r, ".log");
    auto pid = process::Spawn(so);
    if (!pid.ok()) {
      process::StopAll(pids, std::chrono::seconds(5));
      PrintErrors(pid.status());
      return kExitJobFailed;
    }
    pids.push_back(*pid);
  }
  if (!options.quiet) {
    std::cerr << "tessera run: " << spec->name() << ": " << world << " rank" << (world > 1 ? "s" : "") << " (dp "
              << spec->parallel().dp() << ", tp " << spec->parallel().tp() << "), " << threads
              << " thread(s) each; logs in " << out_dir << "/logs\n";
  }

  const bool tty = isatty(STDOUT_FILENO);
  const auto start = std::chrono::steady_clock::now();
  int64_t first_step = -1;
  std::vector<bool> done(world, false);
  int remaining = world;
  int result = kExitOk;
  double last_val = -1;  // The newest evaluation's loss (shown from then on).
  bool drawn = false;  // A progress line is on the terminal (a warning goes below it).
  auto draw = [&](const steplog::StepRecord& r) {
    if (r.warning.has_value()) {  // A warning line (common/steplog).
      if (tty && drawn) std::cout << "\n" << std::flush;
      drawn = false;
      std::cerr << "warning: " << *r.warning << std::endl;
      return;
    }
    if (options.quiet) return;
    drawn = true;
    Progress p;
    p.step = r.step;
    p.total_steps = spec->train().steps();
    p.loss = r.loss;
    if (r.val_loss.has_value()) last_val = *r.val_loss;
    p.val_loss = last_val;
    p.lr = r.lr;
    p.tokens_per_s = r.tokens_per_s;
    if (first_step < 0) first_step = p.step - 1;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (p.step > first_step) p.eta_seconds = elapsed / (p.step - first_step) * (p.total_steps - p.step);
    if (tty) {
      std::cout << "\r\033[K" << FormatProgress(p) << std::flush;
    } else {
      std::cout << FormatProgress(p) << "\n" << std::flush;
    }
  };
  while (remaining > 0) {
    for (const auto& r : tail.Poll()) draw(r);
    if (g_signal != 0) {
      if (tty) std::cout << "\n";
      std::cerr << "tessera run: interrupted; stopping " << remaining << " rank(s)\n";
      std::vector<pid_t> alive;
      for (int r = 0; r < world; ++r) if (!done[r]) alive.push_back(pids[r]);
      process::StopAll(alive, std::chrono::seconds(10));
      return kExitInterrupted;
    }
    for (int r = 0; r < world; ++r) {
      int status = 0;
      if (done[r] || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --remaining;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      // A failed rank ends the job: stop the others and report its error.
      std::vector<pid_t> alive;
      for (int k = 0; k < world; ++k) if (!done[k]) alive.push_back(pids[k]), done[k] = true;
      process::StopAll(alive, std::chrono::seconds(5));
      remaining = 0;
      if (tty) std::cout << "\n";
      const std::string log = absl::StrCat(out_dir, "/logs/rank_", r, ".log");
      std::string why = process::LastLineWithPrefix(log, "error: ");
      if (why.empty()) why = absl::StrCat("error: rank ", r, " ended with ", process::DescribeExit(status));
      std::cerr << why << "\n" << "error: the job failed; see " << log << "\n";
      result = kExitJobFailed;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (result == kExitOk) {
    for (const auto& r : tail.Poll()) draw(r);
    if (tty && !options.quiet) std::cout << "\n";
    if (!options.quiet) std::cerr << "tessera run: done; steps in " << out_dir << "/steps.jsonl\n";
  }
  return result;
}

}  // namespace tessera::client
