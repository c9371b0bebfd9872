#include "coordinator/job_store.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::coordinator {
namespace {

std::string DbPath(const std::string& name) {
  std::string dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  std::filesystem::remove(dir + "/" + name);
  return dir + "/" + name;
}

TEST(JobStoreTest, JobsAndIdsSurviveReopening) {
  const std::string path = DbPath("jobs.db");
  {
    auto store = JobStore::Open({path});
    ASSERT_TRUE(store.ok()) << store.status();
    auto id1 = (*store)->NextJobId();
    auto id2 = (*store)->NextJobId();
    ASSERT_TRUE(id1.ok() && id2.ok());
    EXPECT_EQ(*id1, "job-000001");
    EXPECT_EQ(*id2, "job-000002");
    v1::Job job;
    job.set_id(*id1);
    job.set_state(v1::JOB_STATE_RUNNING);
    job.mutable_spec()->set_name("a");
    job.set_created_unix_ms(10);
    ASSERT_TRUE((*store)->Put(job).ok());
    job.set_state(v1::JOB_STATE_SUCCEEDED);  // Replaces.
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  auto store = JobStore::Open({path});
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadAll();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ(jobs->at(0).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(jobs->at(0).spec().name(), "a");
  EXPECT_EQ(*(*store)->NextJobId(), "job-000003");  // Never reused.
}

TEST(JobStoreTest, GarbageFileIsAClearError) {
  const std::string path = DbPath("garbage.db");
  std::ofstream(path) << std::string(4096, 'x');
  auto store = JobStore::Open({path});
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), ::testing::HasSubstr(path));
}

}  // namespace
}  // namespace tessera::coordinator
