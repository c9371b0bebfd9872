// Checkpoints of one trainer in this process, with what is otherwise left to timing held still.
//
// A checkpoint that fails part-way leaves nothing behind (issue 38, defect 7): before, an early return
// after rank 0 had made the temporary directory (a failed barrier, gather or vote — a peer dying
// mid-checkpoint) skipped its removal, so every failed checkpoint left a step_N.tmp.<pid> directory,
// and on a nearly full disk each later attempt failed its first checkpoint. The failure is made
// deterministic with a one-rank world whose communicator fails a chosen collective once armed (a
// fake of that one dependency); the trainer, its files and the directory are real.
//
// An asynchronous checkpoint is the state at its step even when the steps after it change every
// weight and moment in place before a byte is written: its background write is held until then.
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/strings/str_cat.h"
#include "spec/job_spec.h"
#include "gtest/gtest.h"
#include "layout/rank_generator.h"
#include "parallel/comm/process_groups.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/train/trainer.h"
#include "tests/testing/cli.h"
#include "worker/rank/spec_to_options.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using parallel::Communicator;
using parallel::CommWork;
using parallel::ReduceOp;

// The world of one rank, whose `failing` collective fails while `armed` (as a peer's death would make it).
class ArmedCommunicator final : public Communicator {
 public:
  enum class Op { kBarrier, kAllReduce, kBroadcast };
  explicit ArmedCommunicator(Op failing) : failing_(failing) {}
  void Arm(bool armed) { armed_ = armed; }

  int rank() const override { return self_.rank(); }
  int size() const override { return self_.size(); }
  const std::vector<int>& members() const override { return self_.members(); }
  const std::string& name() const override { return self_.name(); }
  absl::Status AllReduce(at::Tensor& t, ReduceOp op) override {
    return Fails(Op::kAllReduce) ? Peer() : self_.AllReduce(t, op);
  }
  std::unique_ptr<CommWork> AllReduceAsync(at::Tensor& t, ReduceOp op) override { return self_.AllReduceAsync(t, op); }
  absl::Status AllGather(const at::Tensor& in, at::Tensor& out) override { return self_.AllGather(in, out); }
  absl::Status ReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) override {
    return self_.ReduceScatter(in, out, op);
  }
  absl::Status Broadcast(at::Tensor& t, int root) override {
    return Fails(Op::kBroadcast) ? Peer() : self_.Broadcast(t, root);
  }
  absl::Status AllToAll(const at::Tensor& in, at::Tensor& out) override { return self_.AllToAll(in, out); }
  absl::Status AllToAllRows(const at::Tensor& in, const std::vector<int64_t>& send_rows, at::Tensor& out,
                            const std::vector<int64_t>& recv_rows) override {
    return self_.AllToAllRows(in, send_rows, out, recv_rows);
  }
  absl::Status Send(const at::Tensor& t, int dst, int tag) override { return self_.Send(t, dst, tag); }
  absl::Status Recv(at::Tensor& t, int src, int tag) override { return self_.Recv(t, src, tag); }
  absl::Status Barrier() override { return Fails(Op::kBarrier) ? Peer() : self_.Barrier(); }

 private:
  bool Fails(Op op) const { return armed_ && op == failing_; }
  static absl::Status Peer() { return absl::UnavailableError("a peer of the world group is gone (armed failure)"); }
  parallel::SelfCommunicator self_{0, "world"};
  const Op failing_;
  bool armed_ = false;
};

// What the checkpoint directory holds besides committed step_N directories.
std::vector<std::string> Leftovers(const std::string& dir) {
  std::vector<std::string> found;
  if (!fs::exists(dir)) return found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (absl::StrContains(name, ".tmp") || absl::StrContains(name, ".old")) found.push_back(name);
  }
  return found;
}

std::unique_ptr<parallel::Trainer> MakeTrainer(const std::string& dir, std::shared_ptr<Communicator> world,
                                               const std::function<void(parallel::TrainerOptions&)>& adjust = {}) {
  fs::create_directories(dir);
  const std::string data = testing::WriteTokenFile(dir, 4000);
  auto spec = spec::ParseJobSpec(
      absl::StrCat("name: abort\nmodel: {layers: 1, hidden: 32, heads: 2, vocab: 256, seq_len: 16}\n"
                   "data: {path: ", data, "}\ntrain: {steps: 4, micro_batch: 2, global_batch: 2}\n"
                   "output_dir: ", dir, "/out\n"),
      {});
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  parallel::TrainerOptions options = rank::ToTrainerOptions(*spec);
  if (adjust) adjust(options);
  auto mesh = layout::RankGenerator::Create(options.layout);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  auto groups = parallel::CreateProcessGroups(parallel::BootstrapOptions{}, *mesh);
  EXPECT_TRUE(groups.ok()) << groups.status();
  if (!groups.ok()) return nullptr;
  groups->world = std::move(world);
  auto trainer = parallel::Trainer::Create(options, *groups);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? std::move(*trainer) : nullptr;
}

class CheckpointAbortTest : public ::testing::TestWithParam<ArmedCommunicator::Op> {};

TEST_P(CheckpointAbortTest, AFailedCollectiveLeavesNoTemporaryDirectoryAndTheNextCheckpointCommits) {
  const std::string dir = testing::FreshDir(absl::StrCat("abort", static_cast<int>(GetParam())));
  auto world = std::make_shared<ArmedCommunicator>(GetParam());
  auto trainer = MakeTrainer(dir, world);
  ASSERT_NE(trainer, nullptr);
  ASSERT_TRUE(trainer->Step().ok());
  const std::string checkpoints = dir + "/out/checkpoints";

  world->Arm(true);
  const absl::Status failed = trainer->SaveCheckpoint();
  world->Arm(false);
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StrContains(failed.message(), "armed failure")) << failed;
  EXPECT_TRUE(Leftovers(checkpoints).empty()) << "left behind: " << Leftovers(checkpoints).front();
  EXPECT_FALSE(fs::exists(checkpoints + "/step_00000001"));

  ASSERT_TRUE(trainer->SaveCheckpoint().ok());
  EXPECT_TRUE(fs::exists(checkpoints + "/step_00000001/index.json"));
  EXPECT_TRUE(Leftovers(checkpoints).empty()) << "left behind: " << Leftovers(checkpoints).front();
}

// The barrier after rank 0 made the directory, the vote's all-reduce, and the broadcast of the token
// that names the directory (the first broadcast: before anything is made; nothing may be left either).
INSTANTIATE_TEST_SUITE_P(Collectives, CheckpointAbortTest,
                         ::testing::Values(ArmedCommunicator::Op::kBarrier, ArmedCommunicator::Op::kAllReduce,
                                           ArmedCommunicator::Op::kBroadcast),
                         [](const ::testing::TestParamInfo<ArmedCommunicator::Op>& info) {
                           switch (info.param) {
                             case ArmedCommunicator::Op::kBarrier: return std::string("Barrier");
                             case ArmedCommunicator::Op::kAllReduce: return std::string("VoteAllReduce");
                             case ArmedCommunicator::Op::kBroadcast: return std::string("TokenBroadcast");
                           }
                           return std::string("Unknown");
                         });

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(AsyncCheckpointSnapshotTest, TheFilesAreTheStateAtTheCheckpointStepWhateverTheStepsAfterItChange) {
  const std::string dir = testing::FreshDir("async_snapshot");
  // The reference: two steps, a synchronous checkpoint.
  auto sync = MakeTrainer(dir + "/sync", std::make_shared<ArmedCommunicator>(ArmedCommunicator::Op::kBarrier));
  ASSERT_NE(sync, nullptr);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(sync->Step().ok());
  ASSERT_TRUE(sync->SaveCheckpoint().ok());

  // The same two steps, an asynchronous checkpoint whose write waits until two more steps have
  // updated the weights and the moments in place.
  absl::Notification stepped_on, writing;
  auto async = MakeTrainer(dir + "/async", std::make_shared<ArmedCommunicator>(ArmedCommunicator::Op::kBarrier),
                           [&](parallel::TrainerOptions& o) {
                             o.checkpoint_async = true;
                             o.before_background_write = [&] {
                               writing.Notify();
                               stepped_on.WaitForNotification();
                             };
                           });
  ASSERT_NE(async, nullptr);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(async->Step().ok());
  ASSERT_TRUE(async->SaveCheckpoint().ok());
  writing.WaitForNotification();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(async->Step().ok());
  stepped_on.Notify();
  ASSERT_TRUE(async->WaitForCheckpoint().ok());

  const std::string want = dir + "/sync/out/checkpoints/step_00000002", got = dir + "/async/out/checkpoints/step_00000002";
  ASSERT_TRUE(fs::exists(got + "/index.json"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(want)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(ReadAll(e.path()) == ReadAll(got + "/" + name)) << name << " differs from the synchronous checkpoint's";
    ++files;
  }
  EXPECT_EQ(files, 4);  // model, optimizer, trainer_state, index.
  EXPECT_TRUE(Leftovers(dir + "/async/out/checkpoints").empty());
}

}  // namespace
}  // namespace tessera
