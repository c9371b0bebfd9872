#include "client/table.h"

#include "gtest/gtest.h"

namespace tessera::client {
namespace {

TEST(TableTest, PadsColumnsToTheWidestCell) {
  Table t({"ID", "STATE", "LOSS"});
  t.AddRow({"job-000001", "RUNNING", "5.41 → 2.31"});
  t.AddRow({"j2", "PENDING", "-"});
  EXPECT_EQ(t.ToString(),
            "ID          STATE    LOSS\n"
            "job-000001  RUNNING  5.41 → 2.31\n"
            "j2          PENDING  -\n");
}

}  // namespace
}  // namespace tessera::client
