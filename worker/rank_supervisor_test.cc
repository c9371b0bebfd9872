// RankSupervisor with real processes (a shell script stands in for tessera-rank) and a FakeClock for
// the stop grace: start, progress from rank 0's step log, exit codes and error lines, SIGTERM first and
// SIGKILL only once the grace period has passed on the clock.
#include "worker/rank_supervisor.h"

#include <sys/stat.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <algorithm>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "spec/job_spec.h"
#include "absl/time/clock.h"
#include "common/time/fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::worker {
namespace {

using ::testing::HasSubstr;

class RankSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/rank_supervisor_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  // A stand-in for tessera-rank running `body` (sh), and a supervisor that starts it.
  std::unique_ptr<RankSupervisor> Supervisor(const std::string& body, const std::string& output_root = "",
                                             const std::function<void(RankSupervisorOptions&)>& more = {}) {
    const std::string script = dir_ + "/rank.sh";
    std::ofstream(script) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    RankSupervisorOptions o;
    o.rank_binary = script;
    o.work_dir = dir_ + "/rank_work";
    o.stop_grace = std::chrono::seconds(10);
    o.clock = &clock_;
    o.output_root = output_root;
    o.start_files_wait = std::chrono::seconds(10);  // A loaded machine still opens a log within it.
    if (more) more(o);
    return std::make_unique<RankSupervisor>(o);
  }
  v1::Assignment Order(int rank, const std::string& job_id = "job-000001", const std::string& out = "out") {
    v1::Assignment a;
    a.set_action(v1::Assignment::ACTION_START);
    a.set_job_id(job_id);
    a.set_attempt(1);
    a.set_rank(rank);
    a.set_world_size(1);
    auto spec = spec::ParseJobSpec("name: t\ndata: {path: /x.bin}\nmodel: {heads: 4}\n"
                                   "train: {micro_batch: 1, global_batch: 2}\n",
                                   {"output_dir=" + dir_ + "/" + out, "parallel.dp=1"});
    EXPECT_TRUE(spec.ok()) << spec.status();
    *a.mutable_spec() = *spec;
    return a;
  }
  // Polls (real time: a real process) until an EXITED event or 20 s; every event seen.
  static std::vector<RankEvent> PollUntilExit(RankSupervisor& s) {
    std::vector<RankEvent> all;
    for (int i = 0; i < 400; ++i) {
      for (RankEvent& e : s.Poll()) all.push_back(e);
      if (!all.empty() && all.back().event == v1::ReportRankStatusRequest::EVENT_EXITED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return all;
  }

  std::string dir_;
  FakeClock clock_;
};

TEST_F(RankSupervisorTest, ReportsStartProgressAndTheExitWithTheLastErrorLine) {
  const std::string steps = dir_ + "/out/steps.jsonl";
  auto s = Supervisor("echo '{\"step\": 1, \"loss\": 5.5, \"lr\": 0.001, \"tokens\": 256}' >> " + steps +
                      "\necho '{\"step\": 2, \"loss\": 4.5, \"lr\": 0.001, \"tokens\": 256}' >> " + steps +
                      "\necho 'error: step 3: the data file is gone' >&2\nexit 3");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  ASSERT_EQ(s->Running().size(), 1u);
  std::vector<RankEvent> events = PollUntilExit(*s);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().event, v1::ReportRankStatusRequest::EVENT_STARTED);
  const RankEvent& exited = events.back();
  EXPECT_EQ(exited.event, v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(exited.exit_code, 3);
  EXPECT_THAT(exited.error, HasSubstr("the data file is gone"));
  // Progress: step 1 (the baseline) and the newest step, read after the exit at the latest.
  std::vector<int64_t> progress_steps;
  for (const RankEvent& e : events) {
    if (e.event == v1::ReportRankStatusRequest::EVENT_PROGRESS) progress_steps.push_back(e.progress.step());
  }
  EXPECT_EQ(progress_steps, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(s->Running().empty());
  // The rank's output went to the job's log.
  std::ifstream log(dir_ + "/out/logs/rank_0.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("=== tessera-worker: job job-000001 attempt 1 rank 0 ==="));
}

// The trainer's warnings (a damaged checkpoint set aside ...) go to the coordinator with the progress
// report; they are not steps.
TEST_F(RankSupervisorTest, WarningLinesGoWithTheProgressReportAndAreNotSteps) {
  const std::string steps = dir_ + "/out/steps.jsonl";
  auto s = Supervisor("echo '{\"step\": 0, \"warning\": \"step_00000004 is damaged\"}' >> " + steps +
                      "\necho '{\"step\": 1, \"loss\": 5.5}' >> " + steps +
                      "\necho '{\"step\": 1, \"warning\": \"TensorBoard events stop\"}' >> " + steps + "\nexit 0");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  std::vector<RankEvent> events = PollUntilExit(*s);
  std::vector<int64_t> steps_reported;
  std::vector<std::string> warnings;
  for (const RankEvent& e : events) {
    if (e.event != v1::ReportRankStatusRequest::EVENT_PROGRESS) continue;
    steps_reported.push_back(e.progress.step());
    for (const std::string& w : e.progress.warnings()) warnings.push_back(w);
  }
  ASSERT_FALSE(steps_reported.empty());
  for (int64_t step : steps_reported) EXPECT_EQ(step, 1) << "a warning line is not a step";
  EXPECT_EQ(warnings, (std::vector<std::string>{"step_00000004 is damaged", "TensorBoard events stop"}));
}

TEST_F(RankSupervisorTest, StopSendsTermAndKillsOnlyAfterTheGracePeriodOnTheClock) {
  // A rank that ignores SIGTERM (as one stuck in a collective may).
  const std::string ready = dir_ + "/trapped";
  auto s = Supervisor("trap '' TERM\ntouch " + ready + "\nwhile true; do sleep 0.05; done");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  for (int i = 0; i < 400 && !std::filesystem::exists(ready); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::filesystem::exists(ready)) << "the stand-in rank never started";
  s->Poll();
  s->StopJob("job-000001", 0);
  // Real time passes, the clock does not: still alive.
  for (int i = 0; i < 10; ++i) {
    for (const RankEvent& e : s->Poll()) EXPECT_NE(e.event, v1::ReportRankStatusRequest::EVENT_EXITED);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(s->Running().size(), 1u);
  clock_.Advance(absl::Seconds(9));
  s->Poll();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(s->Running().size(), 1u) << "9 s of a 10 s grace";
  clock_.Advance(absl::Seconds(1));
  std::vector<RankEvent> events = PollUntilExit(*s);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(events.back().exit_code, -9) << "SIGKILL";
}

TEST_F(RankSupervisorTest, ARepeatedOrderStartsNothingNew) {
  auto s = Supervisor("sleep 30");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  ASSERT_TRUE(s->Start(Order(0)).ok());
  EXPECT_EQ(s->Pids().size(), 1u);
  std::vector<RankEvent> events = s->Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, v1::ReportRankStatusRequest::EVENT_STARTED);
}


TEST_F(RankSupervisorTest, AStopOrderOfOneAttemptLeavesAnotherAttemptsRankRunning) {
  auto s = Supervisor("sleep 30");
  v1::Assignment old = Order(0), current = Order(0);
  current.set_attempt(2);
  ASSERT_TRUE(s->Start(old).ok());
  ASSERT_TRUE(s->Start(current).ok());
  s->Poll();
  s->StopJob("job-000001", 1, "stopped: superseded");
  std::vector<RankEvent> events = PollUntilExit(*s);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(events.back().attempt, 1);
  EXPECT_EQ(events.back().exit_code, -15);
  EXPECT_EQ(events.back().error, "stopped: superseded") << "the stop's reason when the log names none";
  ASSERT_EQ(s->Running().size(), 1u);
  EXPECT_EQ(s->Running()[0].attempt(), 2);
}

TEST_F(RankSupervisorTest, AJobJsonLeftByAnEarlierJobOfTheSameIdIsReplaced) {
  // The coordinator's database was recreated: job ids start again, the work directory still has them.
  const std::string stale = dir_ + "/rank_work/jobs/job-000001/attempt_1/job.json";
  std::filesystem::create_directories(std::filesystem::path(stale).parent_path());
  std::ofstream(stale) << "{\"output_dir\": \"/elsewhere/old-job\"}";
  auto s = Supervisor("sleep 30");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  std::ifstream in(stale);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr(dir_ + "/out"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("old-job")));
}

TEST_F(RankSupervisorTest, TheFencingTokenGoesToTheRank) {
  const std::string args = dir_ + "/args";
  auto s = Supervisor("echo \"$@\" > " + args);
  v1::Assignment a = Order(0);
  a.set_job_uid("job-000001@1764000000000");
  ASSERT_TRUE(s->Start(a).ok());
  PollUntilExit(*s);
  std::ifstream in(args);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("--fence_job=job-000001@1764000000000 --fence_attempt=1"));
}

TEST_F(RankSupervisorTest, ProgressIsReadFromTheStepLogRank0RewroteAtItsStart) {
  // Ten steps of an earlier attempt; this one resumes from step 5: rank 0 replaces the log with its
  // first five lines, then logs steps 6 and 7.
  const std::string steps = dir_ + "/out/steps.jsonl";
  std::filesystem::create_directories(dir_ + "/out");
  std::string line[11];
  for (int i = 1; i <= 10; ++i) {
    line[i] = "{\"step\": " + std::to_string(i) + ", \"loss\": 5.0, \"lr\": 0.001, \"tokens\": 256}";
    std::ofstream(steps, std::ios::app) << line[i] << "\n";
  }
  std::string body;
  for (int i = 1; i <= 5; ++i) body += "echo '" + line[i] + "' >> " + steps + ".tmp\n";
  body += "mv " + steps + ".tmp " + steps + "\n";
  body += "echo '{\"step\": 6, \"loss\": 4.0, \"lr\": 0.001, \"tokens\": 256}' >> " + steps + "\n";
  body += "echo '{\"step\": 7, \"loss\": 3.0, \"lr\": 0.001, \"tokens\": 256}' >> " + steps + "\n";
  auto s = Supervisor(body);
  ASSERT_TRUE(s->Start(Order(0)).ok());
  std::vector<RankEvent> events = PollUntilExit(*s);
  int64_t newest = 0;
  for (const RankEvent& e : events) {
    if (e.event == v1::ReportRankStatusRequest::EVENT_PROGRESS) newest = std::max(newest, e.progress.step());
  }
  EXPECT_EQ(newest, 7) << "the new file is read from its start, not from the old file's length";
}

// What a user can leave in OUTPUT_DIR before submitting: each fails the start at once, naming the file,
// instead of holding the worker's loop thread (a FIFO) or writing elsewhere (a symbolic link).
TEST_F(RankSupervisorTest, AStepLogOrRankLogThatIsNotARegularFileFailsTheStartAtOnce) {
  const std::string out = dir_ + "/out";
  std::filesystem::create_directories(out + "/logs");
  std::filesystem::create_directories(dir_ + "/elsewhere");
  struct Case {
    std::string what;
    std::function<void()> plant;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a FIFO as steps.jsonl", [&] { ASSERT_EQ(mkfifo((out + "/steps.jsonl").c_str(), 0644), 0); },
       "steps.jsonl: is a FIFO, not a regular file"},
      {"a link to /dev/zero as steps.jsonl",
       [&] { std::filesystem::create_symlink("/dev/zero", out + "/steps.jsonl"); },
       "steps.jsonl: is a symbolic link"},
      {"a FIFO as the rank's log", [&] { ASSERT_EQ(mkfifo((out + "/logs/rank_0.log").c_str(), 0644), 0); },
       "logs/rank_0.log: is a FIFO"},
      {"logs/ linked into another job's directory",
       [&] {
         std::filesystem::remove_all(out + "/logs");
         std::filesystem::create_directory_symlink(dir_ + "/elsewhere", out + "/logs");
       },
       "logs: is a symbolic link"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::filesystem::remove_all(out);
    std::filesystem::create_directories(out + "/logs");
    c.plant();
    auto s = Supervisor("exit 0");
    const absl::Time start = absl::Now();
    absl::Status st = s->Start(Order(0));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the loop thread is never held";
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_THAT(st.message(), HasSubstr(c.message));
    EXPECT_TRUE(s->Running().empty());
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/elsewhere")) << "nothing written through the link";
}

// With an output root, OUTPUT_DIR is walked from it without following links: OUTPUT_DIR itself (or a
// directory between it and the root) swapped for a link after the worker checked the spec is refused,
// and nothing is written through it.
TEST_F(RankSupervisorTest, AnOutputDirSwappedForALinkBelowTheOutputRootIsRefused) {
  // The output root is dir_'s parent: dir_ stands for a user's directory, OUTPUT_DIR is dir_/out.
  const std::string root = std::filesystem::path(dir_).parent_path().string();
  std::filesystem::create_directories(dir_ + "/elsewhere");
  std::filesystem::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/out");
  auto s = Supervisor("exit 0", root);
  absl::Status st = s->Start(Order(0));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr(dir_ + "/out: is a symbolic link"));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/elsewhere")) << "nothing written through the link";
  // A real directory there: the rank starts, its log is where it belongs.
  std::filesystem::remove(dir_ + "/out");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  PollUntilExit(*s);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_ + "/out/logs/rank_0.log"));
  // The user's directory itself (the first below the root) as an administrator's link to another
  // volume, owned by root or the worker's user: followed, and nothing below it is.
  auto per_user = Supervisor("exit 0", dir_);  // Now dir_ is the root and "out" the user's directory.
  std::filesystem::remove_all(dir_ + "/out");
  std::filesystem::create_directories(dir_ + "/volume2");
  std::filesystem::create_directory_symlink(dir_ + "/volume2", dir_ + "/out");
  ASSERT_TRUE(per_user->Start(Order(0)).ok());
  PollUntilExit(*per_user);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_ + "/volume2/logs/rank_0.log"));
  if (geteuid() == 0) {  // The same link owned by another user (a user's own link): refused.
    ASSERT_EQ(lchown((dir_ + "/out").c_str(), 12345, 12345), 0);
    EXPECT_THAT(per_user->Start(Order(0)).message(), HasSubstr(dir_ + "/out: is a symbolic link"));
  }
  // An OUTPUT_DIR outside the root (the worker's own check refuses such a spec first).
  auto other = Supervisor("exit 0", /*output_root=*/dir_ + "/elsewhere");
  EXPECT_THAT(other->Start(Order(0)).message(), HasSubstr("the job's output_dir: " + dir_ + "/out: not below"));
}

TEST_F(RankSupervisorTest, AStepLogReplacedByAFifoWhileRunningStopsTheJobNamingIt) {
  const std::string out = dir_ + "/out";
  auto s = Supervisor("echo '{\"step\": 1, \"loss\": 5.5}' >> " + out + "/steps.jsonl\nrm " + out +
                      "/steps.jsonl\nmkfifo " + out + "/steps.jsonl\nexec sleep 60");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  const absl::Time start = absl::Now();
  std::vector<RankEvent> events = PollUntilExit(*s);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "stopped by SIGTERM, not after the 60 s sleep";
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_THAT(events.back().error, HasSubstr("steps.jsonl: is a FIFO, not a regular file"));
}

TEST_F(RankSupervisorTest, AHugeStepLogIsReadInBoundedPiecesPerPoll) {
  // 20 MiB of one line, then a real step: each read takes at most 4 MiB, the giant line is skipped, and
  // the step after it is reported (the rank sleeps 3 s: a read every 200 ms at most, 6 to catch up).
  const std::string out = dir_ + "/out";
  std::filesystem::create_directories(out);
  auto s = Supervisor("head -c 20971520 /dev/zero | tr '\\0' x >> " + out + "/steps.jsonl\necho >> " + out +
                      "/steps.jsonl\necho '{\"step\": 3, \"loss\": 2.5}' >> " + out + "/steps.jsonl\nsleep 3");
  ASSERT_TRUE(s->Start(Order(0)).ok());
  std::vector<RankEvent> events = PollUntilExit(*s);
  int64_t newest = 0;
  for (const RankEvent& e : events) {
    if (e.event == v1::ReportRankStatusRequest::EVENT_PROGRESS) newest = std::max(newest, e.progress.step());
  }
  EXPECT_EQ(newest, 3);
}

// Storage that stops answering (a hung NFS or FUSE mount under OUTPUT_DIR; here a hook on the reading
// threads that blocks for the jobs under "hung"): the caller of Start and Poll never waits on it, the other
// job starts and its progress keeps coming; a rank whose log opens late starts late; after
// user_files_timeout on the clock a running job whose files hang is stopped naming its directory, and a
// rank whose log never opened is reported as not started.
TEST_F(RankSupervisorTest, StorageThatStopsAnsweringHoldsOnlyItsOwnJob) {
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool hang = true;
  };
  auto gate = std::make_shared<Gate>();
  const auto set_hang = [gate](bool hang) {
    std::lock_guard<std::mutex> lock(gate->mu);
    gate->hang = hang;
    gate->cv.notify_all();
  };
  // Each rank writes steps 1 and 2 to its own job's step log (the OUTPUT_DIR in its job.json), then waits.
  const std::string body =
      "for a in \"$@\"; do case \"$a\" in --spec=*) spec=\"${a#--spec=}\";; esac; done\n"
      "out=$(sed -n 's/.*\"output_dir\":\"\\([^\"]*\\)\".*/\\1/p' \"$spec\")\n"
      "echo '{\"step\": 1, \"loss\": 5.5}' >> \"$out/steps.jsonl\"\nsleep 0.3\n"
      "echo '{\"step\": 2, \"loss\": 4.5}' >> \"$out/steps.jsonl\"\nexec sleep 60";
  auto s = Supervisor(body, "", [gate](RankSupervisorOptions& o) {
    o.start_files_wait = std::chrono::milliseconds(300);
    o.user_files_timeout = std::chrono::seconds(60);
    o.user_files_hook = [gate](const std::string& output_dir) {
      if (output_dir.find("/hung") == std::string::npos) return;
      std::unique_lock<std::mutex> lock(gate->mu);
      gate->cv.wait(lock, [&] { return !gate->hang; });
    };
  });
  absl::Duration slowest_poll;
  std::vector<RankEvent> events;
  // Polls every 50 ms (real time) until `done` or `rounds` polls, keeping every event and the slowest Poll.
  const auto poll_until = [&](const std::function<bool()>& done, int rounds = 200) {
    for (int i = 0; i < rounds && !done(); ++i) {
      const absl::Time before = absl::Now();
      for (RankEvent& e : s->Poll()) events.push_back(std::move(e));
      slowest_poll = std::max(slowest_poll, absl::Now() - before);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  const auto seen = [&](const std::string& job, v1::ReportRankStatusRequest::Event event, int64_t step = 0) {
    for (const RankEvent& e : events) {
      if (e.job_id == job && e.event == event && e.progress.step() >= step) return &e;
    }
    return static_cast<const RankEvent*>(nullptr);
  };
  // 1. job-hung's log does not open: Start returns after start_files_wait, its rank is not spawned; the
  //    other job starts and reports progress.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(s->Start(Order(0, "job-hung", "hung")).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "Start waits start_files_wait, not for the storage";
  EXPECT_EQ(s->Running().size(), 1u);
  EXPECT_TRUE(s->Pids().empty()) << "not spawned";
  ASSERT_TRUE(s->Start(Order(0, "job-ok", "out")).ok());
  poll_until([&] { return seen("job-ok", v1::ReportRankStatusRequest::EVENT_PROGRESS, 2) != nullptr; });
  EXPECT_NE(seen("job-ok", v1::ReportRankStatusRequest::EVENT_PROGRESS, 2), nullptr) << "the other job's progress";
  EXPECT_EQ(seen("job-hung", v1::ReportRankStatusRequest::EVENT_STARTED), nullptr);
  // 2. The storage answers again: job-hung's rank starts late and reports progress.
  set_hang(false);
  poll_until([&] { return seen("job-hung", v1::ReportRankStatusRequest::EVENT_PROGRESS, 1) != nullptr; });
  ASSERT_NE(seen("job-hung", v1::ReportRankStatusRequest::EVENT_STARTED), nullptr);
  EXPECT_EQ(s->Pids().size(), 2u);
  // 3. It stops answering again while job-hung runs, and a third job's log there never opens.
  set_hang(true);
  ASSERT_TRUE(s->Start(Order(0, "job-hung2", "hung2")).ok());
  poll_until([] { return false; }, 20);  // 1 s of polls: a read of job-hung's files starts and hangs.
  for (const RankEvent& e : events) EXPECT_NE(e.event, v1::ReportRankStatusRequest::EVENT_EXITED) << e.job_id << ": " << e.error;
  EXPECT_LT(slowest_poll, absl::Seconds(1)) << "Poll never waits on the hung storage";
  ASSERT_EQ(s->Running().size(), 3u);
  // A minute on the clock without an answer: job-hung is stopped naming its directory, job-hung2 given up.
  clock_.Advance(absl::Seconds(60));
  const auto both_exited = [&] {
    return seen("job-hung", v1::ReportRankStatusRequest::EVENT_EXITED) != nullptr &&
           seen("job-hung2", v1::ReportRankStatusRequest::EVENT_EXITED) != nullptr;
  };
  poll_until(both_exited);
  ASSERT_TRUE(both_exited());
  const RankEvent* stopped = seen("job-hung", v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(stopped->exit_code, -15) << "SIGTERM";
  EXPECT_THAT(stopped->error,
              HasSubstr("the worker stopped the job: its files under " + dir_ + "/hung did not answer in 1m"));
  const RankEvent* never = seen("job-hung2", v1::ReportRankStatusRequest::EVENT_EXITED);
  EXPECT_EQ(never->exit_code, 127);
  EXPECT_EQ(never->error, std::string(kCouldNotStart) + dir_ + "/hung2/logs/rank_0.log: did not open in 1m" +
                              " (is that storage answering?)");
  ASSERT_EQ(s->Running().size(), 1u);
  EXPECT_EQ(s->Running()[0].job_id(), "job-ok");
  set_hang(false);  // The abandoned reads end now (the gate outlives them through the shared_ptr).
}
}  // namespace
}  // namespace tessera::worker
