// The coordinator's dashboard in a real browser: a real tessera-coordinator (mutual TLS, so the
// dashboard is HTTPS asking for a user certificate), a worker, a job submitted with the CLI, and
// Debian's headless Chromium presenting the user's certificate (tests/testing/browser.h). The test
// reads the DOM Chromium built: the workers and jobs tables, one chart marker per step of the job's
// step log (while it runs and after), the rank's log tail; other users and certificate-less
// browsers are refused. A screenshot of the job page is kept in the test's outputs
// (docs/dashboard.png is one).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/net/free_port.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/browser.h"
#include "tests/testing/cli.h"
#include "tests/testing/cluster_certs.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::WaitFor;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// The part of `dom` from `start` up to the first `end` after it ("" when `start` is absent).
std::string Section(const std::string& dom, const std::string& start, const std::string& end) {
  const size_t a = dom.find(start);
  if (a == std::string::npos) return "";
  const size_t b = dom.find(end, a);
  return dom.substr(a, b == std::string::npos ? std::string::npos : b - a);
}

// Markers of series `series` in the chart `chart`.
int Markers(const std::string& dom, const std::string& chart, const std::string& series) {
  const std::string svg = Section(dom, "data-chart=\"" + chart + "\"", "</svg>");
  return Count(Section(svg, "<g class=\"markers\" data-series=\"" + series + "\"", "</g>"), "<circle");
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = testing::BrowserUnavailable(); !why.empty()) GTEST_SKIP() << "no browser: " << why;
    dir_ = testing::FreshDir("dashboard");
    user_ = testing::ClusterCerts::UserOf(dir_);
    certs_ = std::make_unique<testing::ClusterCerts>(dir_ + "/certs");
    certs_->CliFlags(user_);  // Issues the users' certificates.
    certs_->CliFlags("bob");
    process::SpawnOptions so;
    so.argv = {testing::Runfile("coordinator/tessera-coordinator"), "--listen=127.0.0.1:0", "--db=" + dir_ + "/c.db",
               "--metrics_listen=127.0.0.1:0", "--ui_listen=127.0.0.1:0", "--ui_refresh_s=2"};
    for (const std::string& f : certs_->CoordinatorFlags()) so.argv.push_back(f);
    for (const std::string& f : testing::ClusterCerts::RootFlags(dir_)) so.argv.push_back(f);
    so.log_path = dir_ + "/coordinator.log";
    auto pid = process::Spawn(so);
    ASSERT_TRUE(pid.ok());
    pids_.push_back(*pid);
    std::string log;
    ASSERT_TRUE(WaitFor([&] {
      log = Read(so.log_path);
      return log.find("dashboard on") != std::string::npos;
    }, 20)) << log;
    const size_t at = log.find("listening on ") + 13;
    addr_ = log.substr(at, log.find(' ', at) - at);
    const size_t u = log.find("dashboard on ") + 13;
    ui_ = log.substr(u, log.find('\n', u) - u);
    ASSERT_EQ(ui_.rfind("https://127.0.0.1:", 0), 0u) << ui_;
    origin_ = ui_.substr(0, ui_.size() - 3);  // Without "/ui".
    int base = net::PickFreePort();
    while (base > 65000) base = net::PickFreePort();
    so.argv = {testing::Runfile("worker/tessera-worker"), "--coordinator=" + addr_, "--devices=cpu:1", "--name=node-1",
               "--work_dir=" + dir_ + "/worker", "--threads_per_rank=1", "--metrics_listen=127.0.0.1:0",
               absl::StrCat("--store_ports=", base, "-", base + 10)};
    for (const std::string& f : certs_->WorkerFlags("node-1")) so.argv.push_back(f);
    for (const std::string& f : testing::ClusterCerts::RootFlags(dir_)) so.argv.push_back(f);
    so.log_path = dir_ + "/worker.log";
    so.env = {{"TESSERA_RANK_BINARY", testing::Runfile("worker/rank/tessera-rank")}};
    pid = process::Spawn(so);
    ASSERT_TRUE(pid.ok());
    pids_.push_back(*pid);
    ASSERT_TRUE(WaitFor([&] { return Cli({"workers"}).output.find("ALIVE") != std::string::npos; }, 20));
  }

  void TearDown() override { process::StopAll(pids_, std::chrono::seconds(10)); }

  testing::CliResult Cli(std::vector<std::string> args, const std::string& user = "") {
    std::vector<std::string> tls = certs_->CliFlags(user.empty() ? user_ : user);
    args.insert(args.begin(), tls.begin(), tls.end());
    args.insert(args.begin(), "--coordinator=" + addr_);
    return testing::RunTessera(args);
  }

  nlohmann::json Job(const std::string& id) {
    auto r = Cli({"--output=json", "job", id});
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  // A browser presenting `user`'s certificate ("" : none).
  testing::Browser BrowserAs(const std::string& user) {
    const std::string c = certs_->dir();
    return testing::Browser(dir_ + "/browser-" + (user.empty() ? "none" : user), origin_, c + "/ca.pem",
                            user.empty() ? "" : c + "/user-" + user + ".pem", user.empty() ? "" : c + "/user-" + user + ".key");
  }

  std::string dir_, user_, addr_, ui_, origin_;
  std::unique_ptr<testing::ClusterCerts> certs_;
  std::vector<pid_t> pids_;
};

TEST_F(DashboardTest, ShowsARunningJobToItsOwnerOnly) {
  const std::string data = testing::WriteTokenFile(dir_, 60000), out = dir_ + "/out";
  const std::string spec = dir_ + "/spec.yaml";
  constexpr int kSteps = 600, kEvalEvery = 100;
  std::ofstream(spec) << "name: dash-1\n"
                      << "model: {layers: 2, hidden: 96, heads: 4, vocab: 256, seq_len: 64}\n"
                      << "data: {path: " << data << ", valid_fraction: 0.05}\n"
                      << "train: {steps: " << kSteps << ", micro_batch: 4, global_batch: 4, lr: 2e-3, eval_every: "
                      << kEvalEvery << ", eval_batches: 2}\n"
                      << "checkpoint: {every_steps: 100, keep: 1}\n"
                      << "output_dir: " << out << "\n";
  auto submitted = Cli({"--output=json", "submit", spec});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output;
  const std::string id = nlohmann::json::parse(submitted.output, nullptr, false).value("id", "");
  ASSERT_FALSE(id.empty()) << submitted.output;
  const std::string steps_path = out + "/steps.jsonl";
  ASSERT_TRUE(WaitFor([&] { return testing::ReadLosses(steps_path).size() >= 20; }, 120)) << Job(id).dump();

  testing::Browser alice = BrowserAs(user_);
  std::string error;
  // While it runs: the overview lists the worker and the job, RUNNING.
  const std::string overview = alice.DumpDom(ui_, &error);
  ASSERT_FALSE(overview.empty()) << error;
  EXPECT_THAT(overview, HasSubstr("signed in as " + user_));
  EXPECT_THAT(Section(overview, "<table id=\"workers\"", "</table>"), HasSubstr("data-worker=\"node-1\""));
  EXPECT_THAT(Section(overview, "<table id=\"workers\"", "</table>"), HasSubstr(">ALIVE<"));
  const std::string row = Section(overview, "data-job=\"" + id + "\"", "</tr>");
  EXPECT_THAT(row, HasSubstr("data-state=\"RUNNING\"")) << overview;
  EXPECT_THAT(row, HasSubstr(">dash-1<"));
  EXPECT_THAT(row, HasSubstr("%</td>")) << "MFU shown: the worker registered its peak";

  // The job page: one loss marker per step logged, between what the log held before and after.
  const size_t before = testing::ReadLosses(steps_path).size();
  const std::string page = alice.DumpDom(ui_ + "/jobs/" + id, &error);
  const size_t after = testing::ReadLosses(steps_path).size();
  ASSERT_FALSE(page.empty()) << error;
  EXPECT_THAT(Section(page, "id=\"job-state\"", "</span>"), HasSubstr("RUNNING"));
  const int running_markers = Markers(page, "loss", "loss");
  EXPECT_GE(running_markers, static_cast<int>(before));
  EXPECT_LE(running_markers, static_cast<int>(after));
  EXPECT_LT(running_markers, kSteps) << "the page was read while the job ran";
  for (const char* chart : {"tokens_per_s", "mfu", "step_seconds"}) {
    EXPECT_GE(Count(Section(page, std::string("data-chart=\"") + chart + "\"", "</svg>"), "<circle"), running_markers)
        << chart;
  }
  // Rank 0's log tail: a piece of the log the CLI prints (read after the page, so it holds the tail; the
  // attempt's log only grows) with at least one step line. The header line is checked in the full log: on a slow machine the
  // page may be read so late that the header has left the tail.
  std::string tail = Section(page, "<pre class=\"log\" data-rank=\"0\"", "</pre>");
  tail = tail.substr(std::min(tail.size(), tail.find('>') + 1));
  tail = absl::StrReplaceAll(tail, {{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}});  // One pass: no double unescape.
  const testing::CliResult full_log = Cli({"logs", id, "--rank", "0"});
  ASSERT_EQ(full_log.exit_code, 0) << full_log.output;
  EXPECT_THAT(full_log.output, HasSubstr("job " + id + " attempt 1 rank 0"));
  EXPECT_THAT(tail, HasSubstr("tessera: rank 0: step ")) << "rank 0's log tail";
  EXPECT_THAT(full_log.output, HasSubstr(tail)) << "rank 0's log tail is a piece of its log";
  EXPECT_THAT(Section(page, "<table id=\"attempts\"", "</table>"), HasSubstr("data-attempt=\"1\""));

  // A screenshot for people (kept as a test output).
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string png = std::string(outputs != nullptr ? outputs : dir_.c_str()) + "/dashboard.png";
  ASSERT_TRUE(alice.Screenshot(ui_ + "/jobs/" + id, png, 1200, 1500, &error)) << error;
  EXPECT_GT(fs::file_size(png), 20000u);
  EXPECT_EQ(Read(png).substr(1, 3), "PNG");

  // Another user sees neither the job in the list nor its page; no certificate gets a clear refusal.
  testing::Browser bob = BrowserAs("bob");
  const std::string bob_overview = bob.DumpDom(ui_, &error);
  EXPECT_THAT(bob_overview, HasSubstr("signed in as bob")) << error;
  EXPECT_THAT(bob_overview, Not(HasSubstr(id)));
  EXPECT_THAT(bob.DumpDom(ui_ + "/jobs/" + id), HasSubstr("does not exist or is not yours"));
  testing::Browser anonymous = BrowserAs("");
  EXPECT_THAT(anonymous.DumpDom(ui_), HasSubstr("presented no certificate"));
  EXPECT_THAT(anonymous.DumpDom(ui_), Not(HasSubstr("node-1")));

  // After the end: exactly one marker per step, and one per evaluation.
  ASSERT_TRUE(WaitFor([&] { return Job(id).value("state", "") == "JOB_STATE_SUCCEEDED"; }, 300)) << Job(id).dump();
  const std::string done = alice.DumpDom(ui_ + "/jobs/" + id, &error);
  EXPECT_THAT(Section(done, "id=\"job-state\"", "</span>"), HasSubstr("SUCCEEDED"));
  EXPECT_EQ(Markers(done, "loss", "loss"), static_cast<int>(testing::ReadLosses(steps_path).size()));
  EXPECT_EQ(Markers(done, "loss", "loss"), kSteps);
  EXPECT_EQ(Markers(done, "loss", "val_loss"), static_cast<int>(testing::ReadValLosses(steps_path).size()));
  EXPECT_EQ(Markers(done, "loss", "val_loss"), kSteps / kEvalEvery);
  EXPECT_THAT(done, Not(HasSubstr("http-equiv=\"refresh\" content=\"0")));
  EXPECT_THAT(done, HasSubstr("http-equiv=\"refresh\" content=\"2\""));
}

}  // namespace
}  // namespace tessera
