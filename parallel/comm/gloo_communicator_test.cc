// Gloo collectives across forked rank processes; expected values from rank arithmetic.
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/comm/process_groups.h"
#include "parallel/testing/multi_process.h"

namespace tessera::parallel {
namespace {

using testing::RunRanks;

#define RETURN_IF_ERROR(expr)            \
  do {                                   \
    absl::Status _s = (expr);            \
    if (!_s.ok()) return _s;             \
  } while (0)

absl::Status Expect(bool cond, const std::string& what) {
  return cond ? absl::OkStatus() : absl::InternalError(absl::StrCat("expectation failed: ", what));
}

absl::StatusOr<ProcessGroups> Groups(int rank, int port, const layout::ParallelLayout& shape) {
  auto mesh = layout::RankGenerator::Create(shape);
  if (!mesh.ok()) return mesh.status();
  BootstrapOptions o;
  o.rank = rank;
  o.store_port = port;
  o.timeout = std::chrono::seconds(60);
  return CreateProcessGroups(o, *mesh);
}

TEST(GlooCommunicatorTest, AllReduceOpsAndDtypes) {
  auto body = [](int rank, int port) -> absl::Status {
    auto g = Groups(rank, port, {.dp = 4});
    if (!g.ok()) return g.status();
    Communicator& c = *g->world;
    at::Tensor t = at::full({5}, rank + 1.0);
    RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kSum));
    RETURN_IF_ERROR(Expect(t.eq(10).all().item<bool>(), "sum 1+2+3+4 = 10"));
    t = at::full({5}, rank + 1.0);
    RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kAvg));
    RETURN_IF_ERROR(Expect(t.eq(2.5).all().item<bool>(), "avg = 2.5"));
    t = at::full({5}, rank + 1.0);
    RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kMax));
    RETURN_IF_ERROR(Expect(t.eq(4).all().item<bool>(), "max = 4"));
    for (auto dtype : {at::kBFloat16, at::kHalf}) {
      t = at::full({5}, rank + 1.0).to(dtype);
      RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kSum));
      RETURN_IF_ERROR(Expect(t.to(at::kFloat).eq(10).all().item<bool>(), absl::StrCat(c10::toString(dtype), " sum = 10")));
      t = at::full({5}, rank + 1.0).to(dtype);
      RETURN_IF_ERROR(c.AllReduce(t, ReduceOp::kAvg));
      RETURN_IF_ERROR(Expect(t.to(at::kFloat).eq(2.5).all().item<bool>(), absl::StrCat(c10::toString(dtype), " avg = 2.5")));
    }
    at::Tensor a = at::full({3}, rank * 1.0), b = at::full({2}, 1.0);
    auto wa = c.AllReduceAsync(a, ReduceOp::kSum);
    auto wb = c.AllReduceAsync(b, ReduceOp::kSum);
    RETURN_IF_ERROR(wa->Wait());
    RETURN_IF_ERROR(wb->Wait());
    RETURN_IF_ERROR(Expect(a.eq(6).all().item<bool>() && b.eq(4).all().item<bool>(), "async sums"));
    return c.Barrier();
  };
  EXPECT_TRUE(RunRanks(4, body).ok());
}

TEST(GlooCommunicatorTest, GatherScatterBroadcastAllToAll) {
  auto body = [](int rank, int port) -> absl::Status {
    auto g = Groups(rank, port, {.dp = 4});
    if (!g.ok()) return g.status();
    Communicator& c = *g->world;
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      at::Tensor out = at::empty({8}, dtype);
      RETURN_IF_ERROR(c.AllGather(at::full({2}, rank * 1.0, dtype), out));
      at::Tensor want = at::arange(4).repeat_interleave(2).to(dtype);
      RETURN_IF_ERROR(Expect(out.equal(want), "all_gather = [0,0,1,1,2,2,3,3]"));
      // in[i] = i + 10·rank (exact in bf16); reduced: 4i + 60; this rank's chunk is i = 2·rank, 2·rank+1.
      at::Tensor in = (at::arange(8) + 10 * rank).to(dtype);
      at::Tensor part = at::empty({2}, dtype);
      RETURN_IF_ERROR(c.ReduceScatter(in, part, ReduceOp::kSum));
      at::Tensor expect = (at::arange(2 * rank, 2 * rank + 2) * 4 + 60).to(dtype);
      RETURN_IF_ERROR(Expect(part.equal(expect), absl::StrCat("reduce_scatter ", c10::toString(dtype))));
    }
    at::Tensor red = at::full({3}, rank + 1.0);
    RETURN_IF_ERROR(c.Reduce(red, 1, ReduceOp::kSum));
    if (rank == 1) RETURN_IF_ERROR(Expect(red.eq(10).all().item<bool>(), "reduce to 1"));
    at::Tensor b = at::full({3}, rank * 1.0);
    RETURN_IF_ERROR(c.Broadcast(b, 2));
    RETURN_IF_ERROR(Expect(b.eq(2).all().item<bool>(), "broadcast from 2"));
    // Chunk j of rank r holds 10r + j; after all_to_all chunk i holds 10i + rank.
    at::Tensor in = at::arange(4).to(at::kFloat) + 10 * rank;
    at::Tensor out = at::empty({4});
    RETURN_IF_ERROR(c.AllToAll(in, out));
    RETURN_IF_ERROR(Expect(out.equal(at::arange(4).to(at::kFloat) * 10 + rank), "all_to_all"));
    // Ring: send to the next rank, receive from the previous.
    at::Tensor got = at::empty({2});
    if (rank % 2 == 0) {
      RETURN_IF_ERROR(c.Send(at::full({2}, rank * 1.0), (rank + 1) % 4, 0));
      RETURN_IF_ERROR(c.Recv(got, (rank + 3) % 4, 0));
    } else {
      RETURN_IF_ERROR(c.Recv(got, (rank + 3) % 4, 0));
      RETURN_IF_ERROR(c.Send(at::full({2}, rank * 1.0), (rank + 1) % 4, 0));
    }
    RETURN_IF_ERROR(Expect(got.eq((rank + 3) % 4).all().item<bool>(), "ring send/recv"));
    // Asynchronous: every rank sends three messages (tags 0..2) to both neighbours before receiving
    // any, and receives them in the reverse tag order — a deadlock with blocking sends.
    std::vector<std::unique_ptr<CommWork>> sends;
    for (int tag = 0; tag < 3; ++tag) {
      sends.push_back(c.SendAsync(at::full({2}, 100.0 * rank + tag), (rank + 1) % 4, tag));
      sends.push_back(c.SendAsync(at::full({2}, -100.0 * rank - tag), (rank + 3) % 4, tag));
    }
    for (int tag = 2; tag >= 0; --tag) {
      at::Tensor from_prev = at::empty({2}), from_next = at::empty({2});
      auto a = c.RecvAsync(from_prev, (rank + 3) % 4, tag);
      auto b = c.RecvAsync(from_next, (rank + 1) % 4, tag);
      RETURN_IF_ERROR(a->Wait());
      RETURN_IF_ERROR(b->Wait());
      RETURN_IF_ERROR(Expect(from_prev.eq(100.0 * ((rank + 3) % 4) + tag).all().item<bool>(), "async from prev"));
      RETURN_IF_ERROR(Expect(from_next.eq(-100.0 * ((rank + 1) % 4) - tag).all().item<bool>(), "async from next"));
    }
    for (auto& w : sends) RETURN_IF_ERROR(w->Wait());
    return c.Barrier();
  };
  EXPECT_TRUE(RunRanks(4, body).ok());
}

// Uneven all-to-all (expert dispatch): rank r sends (r + j) mod 3 rows — 0, 1 or 2 — to rank j, each
// row [2] holding (r, j); rank j receives them in source order. A count list of the wrong length is an
// error.
TEST(GlooCommunicatorTest, AllToAllRowsMovesUnevenRows) {
  auto body = [](int rank, int port) -> absl::Status {
    auto g = Groups(rank, port, {.dp = 4});
    if (!g.ok()) return g.status();
    Communicator& c = *g->world;
    auto rows = [](int from, int to) -> int64_t { return (from + to) % 3; };  // 0, 1 or 2 rows.
    std::vector<int64_t> send(4), recv(4);
    std::vector<at::Tensor> pieces;
    for (int j = 0; j < 4; ++j) {
      send[j] = rows(rank, j);
      recv[j] = rows(j, rank);
      pieces.push_back(at::tensor({static_cast<float>(rank), static_cast<float>(j)}).repeat({send[j], 1}));
    }
    at::Tensor in = at::cat(pieces);
    int64_t total = 0;
    for (int64_t n : recv) total += n;
    at::Tensor out = at::empty({total, 2});
    RETURN_IF_ERROR(c.AllToAllRows(in, send, out, recv));
    int64_t at_row = 0;
    for (int j = 0; j < 4; ++j) {
      for (int64_t k = 0; k < recv[j]; ++k, ++at_row) {
        RETURN_IF_ERROR(Expect(out[at_row][0].item<float>() == j && out[at_row][1].item<float>() == rank,
                               absl::StrCat("row ", at_row, " comes from rank ", j)));
      }
    }
    at::Tensor bad_out = at::empty({total, 2});
    RETURN_IF_ERROR(Expect(!c.AllToAllRows(in, {1, 2}, bad_out, recv).ok(), "two counts for four ranks"));
    return c.Barrier();
  };
  EXPECT_TRUE(RunRanks(4, body).ok());
}

// Rows of [3, 2] (bf16 too) whose value names (source, destination, row): member i sends counts(i, j)
// to member j; every member checks what it received against the same rule, in source order.
absl::Status ExchangeAndCheck(Communicator& c, const std::function<int64_t(int, int)>& counts, at::ScalarType dtype,
                              const std::string& pattern) {
  const int n = c.size(), rank = c.rank();
  auto row = [](int from, int to, int64_t k) { return at::full({1, 3, 2}, 32.0 * from + 8.0 * to + k); };  // < 128: exact in bf16.
  std::vector<int64_t> send(n), recv(n);
  std::vector<at::Tensor> pieces{at::empty({0, 3, 2})};
  int64_t total = 0;
  for (int j = 0; j < n; ++j) {
    send[j] = counts(rank, j);
    recv[j] = counts(j, rank);
    total += recv[j];
    for (int64_t k = 0; k < send[j]; ++k) pieces.push_back(row(rank, j, k));
  }
  at::Tensor in = at::cat(pieces).to(dtype);
  at::Tensor out = at::full({total, 3, 2}, -1.0, at::TensorOptions().dtype(dtype));
  if (absl::Status s = c.AllToAllRows(in, send, out, recv); !s.ok()) {
    return absl::InternalError(absl::StrCat(pattern, ": ", s.ToString()));
  }
  int64_t at_row = 0;
  for (int j = 0; j < n; ++j) {
    for (int64_t k = 0; k < recv[j]; ++k, ++at_row) {
      RETURN_IF_ERROR(Expect(out[at_row].to(at::kFloat).equal(row(j, rank, k)[0]),
                             absl::StrCat(pattern, " ", c10::toString(dtype), ": row ", at_row, " is row ", k,
                                          " from rank ", j)));
    }
  }
  return absl::OkStatus();
}

// Expert dispatch after a router collapsed (issue 54): members that send or receive no rows at all,
// empty inputs and outputs, and an exchange where nobody sends anything. Zero-row tensors keep their
// row shape and must still be accepted; a row-shape mismatch stays an error.
TEST(GlooCommunicatorTest, AllToAllRowsWithZeroCounts) {
  auto body = [](int rank, int port) -> absl::Status {
    auto g = Groups(rank, port, {.dp = 4});
    if (!g.ok()) return g.status();
    Communicator& c = *g->world;
    const std::vector<std::pair<std::string, std::function<int64_t(int, int)>>> patterns = {
        // Every token to member 0's experts: members 1..3 receive nothing.
        {"all to member 0", [](int, int to) -> int64_t { return to == 0 ? 3 : 0; }},
        // Nobody sends to member 2; member 1 sends nothing at all (an empty input).
        {"member 2 idle, member 1 silent",
         [](int from, int to) -> int64_t { return to == 2 || from == 1 ? 0 : from + to + 1; }},
        // Each member keeps its rows: the remote transfers are all empty.
        {"only to itself", [](int from, int to) -> int64_t { return from == to ? 2 : 0; }},
        // Nothing anywhere: every input and output has zero rows.
        {"nothing", [](int, int) -> int64_t { return 0; }},
    };
    for (const auto& [pattern, counts] : patterns) {
      for (auto dtype : {at::kFloat, at::kBFloat16}) RETURN_IF_ERROR(ExchangeAndCheck(c, counts, dtype, pattern));
    }
    // The check compares row shapes, not elements per row of a tensor that may have no rows.
    at::Tensor no_rows = at::empty({0, 3, 2}), other_shape = at::empty({0, 2, 3});
    RETURN_IF_ERROR(CheckRowSplits("test", 1, no_rows, {0}, other_shape, {0}).ok()
                        ? Expect(false, "[0, 3, 2] rows against [0, 2, 3] rows is an error")
                        : absl::OkStatus());
    RETURN_IF_ERROR(CheckRowSplits("test", 1, at::empty({2, 6}), {2}, no_rows, {0}).ok()
                        ? Expect(false, "[6] rows against [3, 2] rows is an error")
                        : absl::OkStatus());
    return c.Barrier();
  };
  EXPECT_TRUE(RunRanks(4, body).ok());
}

TEST(GlooCommunicatorTest, MeshSubgroupsReduceOverTheirMembersOnly) {
  auto body = [](int rank, int port) -> absl::Status {
    auto g = Groups(rank, port, {.dp = 2, .tp = 2});  // tp groups {0,1},{2,3}; dp {0,2},{1,3}.
    if (!g.ok()) return g.status();
    at::Tensor t = at::full({1}, rank * 1.0);
    RETURN_IF_ERROR(g->tp->AllReduce(t, ReduceOp::kSum));
    RETURN_IF_ERROR(Expect(t.item<float>() == (rank < 2 ? 1 : 5), "tp sum"));
    t = at::full({1}, rank * 1.0);
    RETURN_IF_ERROR(g->dp->AllReduce(t, ReduceOp::kSum));
    RETURN_IF_ERROR(Expect(t.item<float>() == (rank % 2 == 0 ? 2 : 4), "dp sum"));
    RETURN_IF_ERROR(Expect(g->pp->size() == 1 && g->sp->size() == 1, "pp and sp are groups of one"));
    return g->world->Barrier();
  };
  EXPECT_TRUE(RunRanks(4, body).ok());
}

TEST(GlooCommunicatorTest, BadArgumentsAreErrorsNotCrashes) {
  auto body = [](int rank, int port) -> absl::Status {
    auto g = Groups(rank, port, {.dp = 2});
    if (!g.ok()) return g.status();
    at::Tensor out = at::empty({3});
    absl::Status s = g->world->AllGather(at::ones({2}), out);
    RETURN_IF_ERROR(Expect(absl::IsInvalidArgument(s), "all_gather size mismatch"));
    RETURN_IF_ERROR(Expect(absl::IsInvalidArgument(g->world->Broadcast(out, 5)), "bad root"));
    return g->world->Barrier();
  };
  EXPECT_TRUE(RunRanks(2, body).ok());
}

TEST(GlooCommunicatorTest, UnreachableStoreTimesOut) {
  auto body = [](int rank, int port) -> absl::Status {
    auto mesh = layout::RankGenerator::Create({.dp = 2});
    BootstrapOptions o;
    o.rank = 1;  // Nobody hosts the store.
    o.store_port = port;
    o.timeout = std::chrono::seconds(2);
    auto g = CreateProcessGroups(o, *mesh);
    return Expect(!g.ok(), "bootstrap without a store fails");
  };
  EXPECT_TRUE(RunRanks(1, body).ok());
}

}  // namespace
}  // namespace tessera::parallel
