// Worker pools (tessera-worker --pool, a spec's placement.pool): a job runs only on the workers of
// its pool; one whose pool has no live worker, or too few devices, waits with a reason naming it;
// pools and labels are shown as registered, and bad ones are refused by name.
#include <map>
#include <string>

#include "coordinator/coordinator_test_fixture.h"
#include "gmock/gmock.h"

namespace tessera::coordinator {
namespace {

using ::testing::HasSubstr;

class CoordinatorPoolsTest : public CoordinatorTest {
 protected:
  std::string AddPoolWorker(const std::string& name, int devices, const std::string& pool) {
    v1::RegisterWorkerRequest r = Registration(name, devices);
    r.set_pool(pool);
    (*r.mutable_labels())["rack"] = "r" + name;
    auto resp = c_->RegisterWorker(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    sessions_[name] = resp.ok() ? resp->session() : 0;
    return resp.ok() ? resp->worker_id() : "";
  }
  v1::JobSpec InPool(int dp, const std::string& pool, int tp = 1) {
    v1::JobSpec s = Spec(dp, tp);
    s.mutable_placement()->set_pool(pool);
    return s;
  }
};

TEST_F(CoordinatorPoolsTest, JobsLandOnlyInTheirPoolAndAJobForAnEmptyPoolWaitsNamingIt) {
  const std::string a1 = AddPoolWorker("a1", 2, "alpha"), a2 = AddPoolWorker("a2", 2, "alpha");
  const std::string b1 = AddPoolWorker("b1", 4, "beta");
  const std::string d = AddWorker("d", 4);  // No --pool: the default pool.

  // Alpha's job (4 ranks) fills alpha although beta and default each have 4 free devices.
  auto alpha = c_->Submit(InPool(4, "alpha"), 0);
  ASSERT_TRUE(alpha.ok()) << alpha.status();
  EXPECT_EQ(State(alpha->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Drain(a1).size(), 2u);
  EXPECT_EQ(Drain(a2).size(), 2u);
  EXPECT_TRUE(Drain(b1).empty());
  EXPECT_TRUE(Drain(d).empty());

  // A second alpha job waits for alpha's devices, not for beta's or the default pool's free ones.
  auto more = c_->Submit(InPool(1, "alpha"), 0);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(State(more->id()), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(more->id())->reason(), HasSubstr("waiting for devices: needs 1 devices; 0 free"));
  EXPECT_TRUE(Drain(b1).empty());
  EXPECT_TRUE(Drain(d).empty());

  // Beta's job goes to beta; a job without a pool goes to the default pool's worker.
  auto beta = c_->Submit(InPool(4, "beta"), 0);
  ASSERT_TRUE(beta.ok());
  EXPECT_EQ(State(beta->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Drain(b1).size(), 4u);
  auto plain = c_->Submit(Spec(2, 1), 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(State(plain->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Drain(d).size(), 2u);
  EXPECT_EQ(plain->spec().placement().pool(), "default");

  // A pool nobody serves: the job waits, naming the pool; larger than its pool: the pool's size.
  auto gamma = c_->Submit(InPool(1, "gamma"), 0);
  ASSERT_TRUE(gamma.ok());
  EXPECT_EQ(State(gamma->id()), v1::JOB_STATE_PENDING);
  EXPECT_THAT(c_->GetJob(gamma->id())->reason(), HasSubstr("no live worker is in pool 'gamma'"));
  auto huge = c_->Submit(InPool(4, "beta", 2), 0);
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_THAT(c_->GetJob(huge->id())->reason(),
              HasSubstr("needs 8 cpu devices of pool 'beta', more than the whole pool's 4"));

  // Its first worker comes: the gamma job runs there.
  const std::string g = AddPoolWorker("g", 1, "gamma");
  EXPECT_EQ(State(gamma->id()), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Drain(g).size(), 1u);

  // Workers show their pools and labels.
  std::map<std::string, std::string> pools;
  for (const v1::Worker& w : c_->ListWorkers()) {
    pools[w.name()] = w.pool();
    if (w.name() != "d") {
      EXPECT_EQ(w.labels().at("rack"), "r" + w.name());
    }
  }
  EXPECT_EQ(pools, (std::map<std::string, std::string>{
                       {"a1", "alpha"}, {"a2", "alpha"}, {"b1", "beta"}, {"d", "default"}, {"g", "gamma"}}));
}

TEST_F(CoordinatorPoolsTest, BadPoolsAndLabelsAreRefusedByName) {
  v1::RegisterWorkerRequest r = Registration("w", 1);
  r.set_pool("no spaces");
  auto refused = c_->RegisterWorker(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("pool: 'no spaces' may use only letters"));
  r.set_pool("ok");
  (*r.mutable_labels())["bad key"] = "v";
  refused = c_->RegisterWorker(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("labels: key 'bad key' may use only letters"));
  v1::JobSpec s = Spec(1, 1);
  s.mutable_placement()->set_pool("a/b");
  auto job = c_->Submit(s, 0);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), HasSubstr("placement.pool: 'a/b' may use only letters"));
}

}  // namespace
}  // namespace tessera::coordinator
