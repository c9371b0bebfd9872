// The dashboard's rendering without a server: escaping, charts (one marker per finite point),
// the step log read back as one point per step, pages naming what they show.
#include <filesystem>
#include <fstream>

#include "coordinator/ui/html.h"
#include "coordinator/ui/step_history.h"
#include "coordinator/ui/svg_chart.h"
#include "coordinator/ui/ui_page.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator::ui {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string TempFile(const std::string& name, const std::string& content) {
  const std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(HtmlTest, EscapesMarkupAndBadBytes) {
  EXPECT_EQ(Escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
  EXPECT_EQ(Escape("caf\xC3\xA9"), "caf\xC3\xA9");                   // UTF-8 kept.
  EXPECT_EQ(Escape("a\xFF" "b\x01"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");  // Invalid byte, control: U+FFFD.
  EXPECT_EQ(Escape("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // A surrogate is not UTF-8.
  EXPECT_EQ(Escape("line\n\tnext"), "line\n\tnext");
}

TEST(HtmlTest, Formats) {
  EXPECT_EQ(Number(3.14159265), "3.142");
  EXPECT_EQ(Number(std::nan("")), "\xE2\x80\x93");
  EXPECT_EQ(Compact(30000), "30k");
  EXPECT_EQ(Compact(1.5e6), "1.5M");
  EXPECT_EQ(Compact(0.05), "0.05");
  EXPECT_EQ(Duration(65000), "1 m 05 s");
  EXPECT_EQ(Duration(3 * 3600 * 1000 + 120000), "3 h 02 m");
}

TEST(SvgChartTest, OneMarkerPerFinitePoint) {
  ChartSeries s{"loss", "#123456", {}};
  for (int i = 1; i <= 50; ++i) s.points.push_back({double(i), 5.0 / i});
  s.points.push_back({51, std::nan("")});
  ChartOptions o;
  o.id = "loss";
  o.title = "loss <and> more";
  const std::string svg = RenderLineChart(o, {s});
  EXPECT_EQ(Count(svg, "<circle"), 50);
  EXPECT_THAT(svg, HasSubstr("data-points=\"50\""));
  EXPECT_THAT(svg, HasSubstr("data-skipped=\"1\""));
  EXPECT_THAT(svg, HasSubstr("loss &lt;and&gt; more"));
  EXPECT_THAT(svg, Not(HasSubstr("<and>")));
  EXPECT_EQ(Count(svg, "<polyline"), 1);
}

TEST(SvgChartTest, ManyPointsThinTheLineAndDropMarkers) {
  ChartSeries s{"tokens/s", "#000", {}};
  for (int i = 1; i <= 10000; ++i) s.points.push_back({double(i), double(i % 7)});
  ChartOptions o;
  o.id = "t";
  const std::string svg = RenderLineChart(o, {s});
  EXPECT_EQ(Count(svg, "<circle"), 0);
  EXPECT_THAT(svg, HasSubstr("data-markers=\"0\""));
  const std::string line = svg.substr(svg.find("points=\""));
  EXPECT_LE(Count(line.substr(0, line.find("\"/>")), ","), o.max_line_points + 1);
}

TEST(SvgChartTest, EmptyAndFlatCharts) {
  ChartOptions o;
  o.id = "e";
  EXPECT_THAT(RenderLineChart(o, {{"x", "#000", {}}}), HasSubstr("no steps reported yet"));
  const std::string flat = RenderLineChart(o, {{"x", "#000", {{1, 2.0}, {2, 2.0}}}});
  EXPECT_EQ(Count(flat, "<circle"), 2);
  EXPECT_THAT(flat, Not(HasSubstr("nan")));
  EXPECT_THAT(flat, Not(HasSubstr("inf")));
}

TEST(NiceTicksTest, RoundSteps) {
  EXPECT_EQ(NiceTicks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  const std::vector<double> t = NiceTicks(1.3, 1.9, 3);
  ASSERT_EQ(t.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(t[i], 1.4 + 0.2 * i, 1e-12);
  EXPECT_TRUE(NiceTicks(std::nan(""), 1, 3).empty());
}

TEST(StepHistoryTest, OnePointPerStepAndResumesSupersede) {
  // Attempt 1 logs steps 1..5 (an evaluation at 4), attempt 2 resumes from 3 and logs 4..6.
  std::string log;
  for (int s = 1; s <= 5; ++s) {
    log += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(10 - s) +
           (s == 4 ? ",\"val_loss\":7.5" : "") + "}\n";
  }
  log += "not json\n";
  log += "{\"step\":3,\"warning\":\"checkpoint step_00000004 is damaged\"}\n";  // Not a step, nor bad.
  for (int s = 4; s <= 6; ++s) log += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(20 - s) + ",\"resumed_from\":3}\n";
  log += "{\"step\":7,\"loss\":1";  // Being written: not read.
  auto h = ReadStepHistory(TempFile("steps.jsonl", log));
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->steps.size(), 6u);
  EXPECT_EQ(h->steps.at(3).loss, 7);
  EXPECT_EQ(h->steps.at(4).loss, 16) << "attempt 2's line";
  EXPECT_TRUE(h->val_loss.empty()) << "attempt 1's evaluation at 4 was superseded";
  EXPECT_EQ(h->bad_lines, 1);
}

TEST(StepHistoryTest, ReadsOnlyTheNewestPartOfALongLog) {
  std::string log;
  for (int s = 1; s <= 1000; ++s) log += "{\"step\":" + std::to_string(s) + ",\"loss\":1}\n";
  auto h = ReadStepHistory(TempFile("long.jsonl", log), 2000);
  ASSERT_TRUE(h.ok());
  EXPECT_GT(h->bytes_skipped, 0);
  EXPECT_EQ(h->bad_lines, 0) << "the cut first line is dropped, not parsed";
  EXPECT_EQ(h->steps.rbegin()->first, 1000);
  EXPECT_LT(h->steps.size(), 200u);
}

TEST(StepHistoryTest, MissingIsEmptySymlinkIsRefused) {
  auto missing = ReadStepHistory("/nonexistent/steps.jsonl");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->steps.empty());
  const std::string target = TempFile("target.jsonl", "{\"step\":1,\"loss\":1}\n");
  const std::string link = target + ".link";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  auto linked = ReadStepHistory(link);
  EXPECT_FALSE(linked.ok());
  EXPECT_THAT(std::string(linked.status().message()), HasSubstr(link));
}

v1::Job SampleJob() {
  v1::Job j;
  j.set_id("job-000007");
  j.mutable_spec()->set_name("gpt-demo");
  j.mutable_spec()->mutable_model()->set_layers(2);
  j.mutable_spec()->mutable_model()->set_hidden(64);
  j.mutable_spec()->mutable_model()->set_heads(4);
  j.mutable_spec()->mutable_model()->set_vocab(256);
  j.mutable_spec()->mutable_model()->set_seq_len(32);
  j.mutable_spec()->mutable_parallel()->set_dp(2);  // As stored: defaults filled in.
  j.mutable_spec()->mutable_parallel()->set_tp(1);
  j.mutable_spec()->mutable_parallel()->set_pp(1);
  j.mutable_spec()->mutable_parallel()->set_sp(1);
  j.set_state(v1::JOB_STATE_RUNNING);
  j.set_owner("alice");
  j.set_reason("<img src=x>");
  j.mutable_progress()->set_step(10);
  j.mutable_progress()->set_tokens_per_s(1000);
  auto* p = j.add_placement();
  p->set_rank(0);
  p->set_worker_id("node-1");
  return j;
}

TEST(UiPageTest, OverviewListsWorkersAndJobs) {
  v1::Worker w;
  w.set_name("node-1");
  w.set_state(v1::Worker::STATE_ALIVE);
  w.set_device_count(2);
  w.set_peak_flops_per_device(1e12);
  w.set_pool("gpu-<a>");
  const std::string html = RenderOverview({true, "alice", false}, {w}, {SampleJob()}, {5, 0});
  EXPECT_THAT(html, HasSubstr("data-worker=\"node-1\""));
  EXPECT_THAT(html, HasSubstr("<th>pool</th>"));
  EXPECT_THAT(html, HasSubstr(">gpu-&lt;a&gt;<"));
  EXPECT_THAT(html, HasSubstr("data-job=\"job-000007\" data-state=\"RUNNING\""));
  EXPECT_THAT(html, HasSubstr("&lt;img src=x&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<img")));
  EXPECT_THAT(html, HasSubstr("http-equiv=\"refresh\" content=\"5\""));
  EXPECT_THAT(html, HasSubstr("signed in as alice"));
  EXPECT_THAT(html, Not(HasSubstr("<script"))) << "no script on any page";
  EXPECT_THAT(html, Not(HasSubstr("src=\"http"))) << "nothing fetched from elsewhere";
}

TEST(UiPageTest, MfuIsModelFlopsOverPeakTimesRanks) {
  const v1::Job j = SampleJob();
  const double mfu = JobMfu(j, 1000, {{"node-1", 1e12}});
  EXPECT_GT(mfu, 0);
  EXPECT_DOUBLE_EQ(JobMfu(j, 2000, {{"node-1", 1e12}}), 2 * mfu) << "linear in tokens/s";
  EXPECT_DOUBLE_EQ(JobMfu(j, 1000, {{"node-1", 2e12}}), mfu / 2) << "inverse in the peak";
  EXPECT_EQ(JobMfu(j, 1000, {}), 0) << "unknown peak: no MFU";
}

TEST(UiPageTest, JobPageChartsEveryStep) {
  JobPageData d;
  d.job = SampleJob();
  for (int s = 1; s <= 12; ++s) {
    steplog::StepRecord r;
    r.step = s, r.loss = 5 - 0.1 * s, r.tokens_per_s = 1000, r.step_seconds = 0.1;
    d.history.steps[s] = r;
  }
  d.history.val_loss[10] = 4.2;
  d.peaks["node-1"] = 1e12;
  d.log_tails = {{0, "step 12 <done>"}, {1, ""}};
  d.job.set_placement_explanation("ranks numbered tp-sp-pp-dp; tp groups {0,1}<a>");
  const std::string html = RenderJobPage({false, "", true}, d, {0, 0});
  EXPECT_THAT(html, HasSubstr("id=\"job-placement\">placement: ranks numbered tp-sp-pp-dp; tp groups {0,1}&lt;a&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("http-equiv=\"refresh\"")));
  EXPECT_THAT(html, HasSubstr("no TLS"));
  for (const char* chart : {"loss", "tokens_per_s", "mfu", "step_seconds"}) {
    EXPECT_THAT(html, HasSubstr(std::string("data-chart=\"") + chart + "\"")) << chart;
  }
  EXPECT_EQ(Count(html, "<circle"), 12 * 4 + 1);  // loss, tokens/s, MFU, step time; one val_loss.
  EXPECT_THAT(html, HasSubstr("step 12 &lt;done&gt;"));
  EXPECT_THAT(html, HasSubstr("data-rank=\"1\""));
}

TEST(UiPageTest, MixtureOfExpertsJobsChartTheirLossesAndExpertLoad) {
  JobPageData d;
  d.job = SampleJob();
  for (int s = 1; s <= 5; ++s) {
    steplog::StepRecord r;
    r.step = s, r.loss = 5 - 0.1 * s, r.tokens_per_s = 1000, r.step_seconds = 0.1;
    r.lm_loss = r.loss - 0.04, r.aux_loss = 2.0, r.expert_imbalance = 1.5;
    d.history.steps[s] = r;
  }
  const std::string html = RenderJobPage({false, "", true}, d, {0, 0});
  for (const char* chart : {"aux_loss", "expert_imbalance"}) {
    EXPECT_THAT(html, HasSubstr(std::string("data-chart=\"") + chart + "\"")) << chart;
  }
  EXPECT_THAT(html, HasSubstr("lm_loss"));
  EXPECT_EQ(Count(html, "<circle"), 5 * 6);  // loss, lm_loss, aux_loss, imbalance, tokens/s, step time.
  // A dense job has neither chart.
  for (auto& [step, r] : d.history.steps) r.lm_loss.reset(), r.aux_loss.reset(), r.expert_imbalance.reset();
  EXPECT_THAT(RenderJobPage({false, "", true}, d, {0, 0}), Not(HasSubstr("data-chart=\"aux_loss\"")));
}

TEST(UiPageTest, GrpoJobsChartTheirRewardAndCompletionLength) {
  JobPageData d;
  d.job = SampleJob();
  for (int s = 1; s <= 4; ++s) {
    steplog::StepRecord r;
    r.step = s, r.loss = 0.01, r.tokens_per_s = 1000, r.step_seconds = 0.1;
    r.grpo_metrics = {{"reward", 0.1 * s}, {"completion_length", 10.0}, {"completion_length_max", 16.0}, {"kl", 0.0}};
    d.history.steps[s] = r;
  }
  const std::string html = RenderJobPage({false, "", true}, d, {0, 0});
  for (const char* chart : {"reward", "completion_length"}) {
    EXPECT_THAT(html, HasSubstr(std::string("data-chart=\"") + chart + "\"")) << chart;
  }
  EXPECT_THAT(html, HasSubstr("completion_length_max"));
  EXPECT_EQ(Count(html, "<circle"), 4 * 6);  // loss, reward, both lengths, tokens/s, step time.
  for (auto& [step, r] : d.history.steps) r.grpo_metrics.clear();  // Another objective: no such chart.
  EXPECT_THAT(RenderJobPage({false, "", true}, d, {0, 0}), Not(HasSubstr("data-chart=\"reward\"")));
}

}  // namespace
}  // namespace tessera::coordinator::ui
