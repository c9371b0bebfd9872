// libFuzzer target (tools/fuzz.sh rpc): the coordinator's RPC handlers — every method of the
// CoordinatorService and the WorkerService — driven in-process through a real gRPC server with
// arbitrary request bytes. An input is a sequence of calls on one fresh coordinator (its own SQLite
// file, path roots set), so that calls build on each other: a worker registers, a job is submitted
// and placed, its assignment streamed, its ranks reported, its logs read, the job cancelled.
// Property: no crash, no sanitizer report, no hang; every call ends (streams at their deadline).
// Authorization is not in play (no TLS in-process: every caller is an administrator);
// tests/security_test.cc attacks it over TLS. TESSERA_FUZZ_TRACE=1 prints each call's outcome.
//
// Input: up to kMaxCalls records [method byte][length, 2 bytes little-endian][request bytes]; the
// method is the byte modulo 12 in the order of Methods() below. The seed corpus (fuzz/corpus/rpc) is
// written by the target itself: TESSERA_FUZZ_WRITE_SEEDS=DIR rpc_fuzzer (see WriteSeeds).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "common/rpc/channel.h"
#include "spec/job_spec.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/job_store.h"
#include "coordinator/worker_service.h"
#include "fuzz/fuzz_files.h"
#include "google/protobuf/stubs/logging.h"

namespace tessera::coordinator {
namespace {

constexpr int kMaxCalls = 16;
enum MethodIndex {
  kSubmitJob, kGetJob, kListJobs, kCancelJob, kWatchJob, kListWorkers, kPlanJob, kGetJobLogs,
  kRegisterWorker, kHeartbeat, kStreamAssignments, kReportRankStatus,
};

struct Method {
  const char* name;
  bool streaming;
};
const std::vector<Method>& Methods() {
  static const std::vector<Method> methods = {
      {"/tessera.v1.CoordinatorService/SubmitJob", false},   {"/tessera.v1.CoordinatorService/GetJob", false},
      {"/tessera.v1.CoordinatorService/ListJobs", false},    {"/tessera.v1.CoordinatorService/CancelJob", false},
      {"/tessera.v1.CoordinatorService/WatchJob", true},     {"/tessera.v1.CoordinatorService/ListWorkers", false},
      {"/tessera.v1.CoordinatorService/PlanJob", false},     {"/tessera.v1.CoordinatorService/GetJobLogs", false},
      {"/tessera.v1.WorkerService/RegisterWorker", false},   {"/tessera.v1.WorkerService/Heartbeat", false},
      {"/tessera.v1.WorkerService/StreamAssignments", true}, {"/tessera.v1.WorkerService/ReportRankStatus", false},
  };
  return methods;
}

// The handlers registered with the server once, forwarding to the current input's services under
// a reader lock: an input's coordinator is destroyed under the writer lock, when no call is in it.
// A call that reaches the server between inputs is answered UNAVAILABLE.
absl::Mutex targets_mu;

template <typename Service, typename F>
grpc::Status Forward(Service* const& to, F call) {
  absl::ReaderMutexLock lock(&targets_mu);
  if (to == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "between inputs");
  return call(to);
}

class CoordinatorForward final : public v1::CoordinatorService::Service {
 public:
  CoordinatorServiceImpl* to = nullptr;
  grpc::Status SubmitJob(grpc::ServerContext* c, const v1::SubmitJobRequest* q, v1::SubmitJobResponse* r) override {
    return Forward(to, [&](auto* s) { return s->SubmitJob(c, q, r); });
  }
  grpc::Status GetJob(grpc::ServerContext* c, const v1::GetJobRequest* q, v1::GetJobResponse* r) override {
    return Forward(to, [&](auto* s) { return s->GetJob(c, q, r); });
  }
  grpc::Status ListJobs(grpc::ServerContext* c, const v1::ListJobsRequest* q, v1::ListJobsResponse* r) override {
    return Forward(to, [&](auto* s) { return s->ListJobs(c, q, r); });
  }
  grpc::Status CancelJob(grpc::ServerContext* c, const v1::CancelJobRequest* q, v1::CancelJobResponse* r) override {
    return Forward(to, [&](auto* s) { return s->CancelJob(c, q, r); });
  }
  grpc::Status WatchJob(grpc::ServerContext* c, const v1::WatchJobRequest* q,
                        grpc::ServerWriter<v1::WatchJobResponse>* w) override {
    return Forward(to, [&](auto* s) { return s->WatchJob(c, q, w); });
  }
  grpc::Status ListWorkers(grpc::ServerContext* c, const v1::ListWorkersRequest* q,
                           v1::ListWorkersResponse* r) override {
    return Forward(to, [&](auto* s) { return s->ListWorkers(c, q, r); });
  }
  grpc::Status PlanJob(grpc::ServerContext* c, const v1::PlanJobRequest* q, v1::PlanJobResponse* r) override {
    return Forward(to, [&](auto* s) { return s->PlanJob(c, q, r); });
  }
  grpc::Status GetJobLogs(grpc::ServerContext* c, const v1::GetJobLogsRequest* q, v1::GetJobLogsResponse* r) override {
    return Forward(to, [&](auto* s) { return s->GetJobLogs(c, q, r); });
  }
};

// Heartbeat and StreamAssignments are callback methods of WorkerServiceImpl (and so here).
class WorkerForward final
    : public v1::WorkerService::WithCallbackMethod_Heartbeat<
          v1::WorkerService::WithCallbackMethod_StreamAssignments<v1::WorkerService::Service>> {
 public:
  WorkerServiceImpl* to = nullptr;
  grpc::Status RegisterWorker(grpc::ServerContext* c, const v1::RegisterWorkerRequest* q,
                              v1::RegisterWorkerResponse* r) override {
    return Forward(to, [&](auto* s) { return s->RegisterWorker(c, q, r); });
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* c, const v1::HeartbeatRequest* q,
                                      v1::HeartbeatResponse*) override {
    grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
    reactor->Finish(Forward(to, [&](auto* s) { return s->HeartbeatStatus(c, *q); }));
    return reactor;
  }
  grpc::ServerWriteReactor<v1::Assignment>* StreamAssignments(grpc::CallbackServerContext* c,
                                                              const v1::StreamAssignmentsRequest* q) override {
    // The target's destructor waits for the streams it opened; it is replaced only between inputs.
    absl::ReaderMutexLock lock(&targets_mu);
    if (to == nullptr) {
      struct Refused : public grpc::ServerWriteReactor<v1::Assignment> {
        Refused() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "between inputs")); }
        void OnDone() override { delete this; }
      };
      return new Refused;
    }
    return to->StreamAssignments(c, q);
  }
  grpc::Status ReportRankStatus(grpc::ServerContext* c, const v1::ReportRankStatusRequest* q,
                                v1::ReportRankStatusResponse* r) override {
    return Forward(to, [&](auto* s) { return s->ReportRankStatus(c, q, r); });
  }
};

struct Harness {
  CoordinatorForward coordinator_service;
  WorkerForward worker_service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::string dir;            // Scratch: the database.
  std::string empty_store;    // The bytes of a new, empty store (copied for each input: faster than creating one).
  spec::PathRoots roots;
};

Harness& TheHarness() {
  static Harness* h = [] {
    auto* h = new Harness;
    h->dir = fuzz::ScratchDir("rpc-fuzz", /*tmpfs=*/true);  // The store syncs every write.
    {
      const std::string path = h->dir + "/empty.db";
      if (!JobStore::Open({path}).ok()) std::abort();  // Created, and closed again (the WAL emptied).
      std::ifstream in(path, std::ios::binary);
      h->empty_store.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (h->empty_store.empty()) std::abort();
    }
    h->roots.data = {"/data"};
    h->roots.output = "/out";
    grpc::ServerBuilder builder;
    builder.RegisterService(&h->coordinator_service);
    builder.RegisterService(&h->worker_service);
    builder.SetMaxReceiveMessageSize(rpc::kMaxRequestBytes);
    builder.SetMaxSendMessageSize(rpc::kMaxResponseBytes);
    h->server = builder.BuildAndStart();
    if (h->server == nullptr) std::abort();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(rpc::kMaxResponseBytes);
    h->channel = h->server->InProcessChannel(args);
    h->stub = std::make_unique<grpc::GenericStub>(h->channel);
    return h;
  }();
  return *h;
}

// Waits for the next event of `cq` (one operation is outstanding at a time); whether it succeeded.
bool Await(grpc::CompletionQueue& cq) {
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok)) std::abort();
  return ok;
}

// One call with `request` as its raw bytes: unary calls get two seconds (they never wait), streams one
// millisecond (they wait for news until their deadline; what is queued comes at once); at most four
// messages are read.
void Call(Harness& h, const Method& m, const std::string& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   (m.streaming ? std::chrono::milliseconds(1) : std::chrono::milliseconds(2000)));
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = h.stub->PrepareCall(&ctx, m.name, &cq);
  int messages = 0;
  const auto start = std::chrono::steady_clock::now();
  call->StartCall(reinterpret_cast<void*>(1));
  if (Await(cq)) {
    grpc::Slice slice(request);
    grpc::ByteBuffer bytes(&slice, 1);
    call->Write(bytes, reinterpret_cast<void*>(2));
    if (Await(cq)) {
      call->WritesDone(reinterpret_cast<void*>(3));
      Await(cq);
    }
    grpc::ByteBuffer response;
    for (; messages < 4; ++messages) {
      call->Read(&response, reinterpret_cast<void*>(4));
      if (!Await(cq)) break;
    }
  }
  if (messages == 4) ctx.TryCancel();  // A stream with more to say.
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  Await(cq);
  if (getenv("TESSERA_FUZZ_TRACE") != nullptr) {  // To follow an input: each call's outcome.
    fprintf(stderr, "%s: %d messages, status %d %s (%lld us)\n", m.name, messages, status.error_code(),
            status.error_message().c_str(),
            static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count()));
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

// An input being written: calls in order.
class Sequence {
 public:
  Sequence& Add(MethodIndex method, const google::protobuf::Message& request) {
    const std::string bytes = request.SerializeAsString();
    if (bytes.size() > 0xffff) std::abort();
    bytes_.push_back(static_cast<char>(method));
    bytes_.push_back(static_cast<char>(bytes.size() & 0xff));
    bytes_.push_back(static_cast<char>(bytes.size() >> 8));
    bytes_ += bytes;
    return *this;
  }
  void Write(const std::string& dir, const std::string& name) const {
    fuzz::WriteFile(dir + "/" + name, reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size());
  }

 private:
  std::string bytes_;
};

// The seed corpus: one call of each method, and the stories of a job — placed, started, reporting
// progress, watched, its logs read, finished; cancelled; failed and restarted.
void WriteSeeds(const std::string& dir) {
  auto spec = spec::ParseJobSpec("name: seed\ndata: {path: /data/x.bin}\nmodel: {layers: 2, hidden: 64, heads: 4}\n"
                                 "train: {micro_batch: 1, global_batch: 4, steps: 10}\noutput_dir: /out/seed\n",
                                 {"parallel.dp=2"});
  if (!spec.ok()) std::abort();
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *spec;
  v1::SubmitJobRequest submit_restarts = submit;
  submit_restarts.set_max_restarts(1);
  v1::GetJobRequest get;
  get.set_job_id("job-000001");
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-000001");
  v1::WatchJobRequest watch;
  watch.set_job_id("job-000001");
  v1::ListJobsRequest list;
  list.set_page_size(1);
  v1::PlanJobRequest plan;
  *plan.mutable_spec() = *spec;
  v1::GetJobLogsRequest logs;
  logs.set_job_id("job-000001");
  logs.set_offset(-100);
  v1::RegisterWorkerRequest reg;
  reg.set_name("w1");
  reg.set_device_kind(v1::DEVICE_KIND_CPU);
  reg.set_device_count(2);
  reg.set_host("127.0.0.1");
  reg.set_store_port_min(30000);
  reg.set_store_port_max(30010);
  reg.set_instance("i1");
  reg.set_attempt(1);
  v1::HeartbeatRequest beat;
  beat.set_worker_id("w1");
  beat.set_session(0);  // Not checked: sessions are numbered from the clock.
  beat.set_applied_seq(2);
  beat.set_reports_ranks(true);
  for (int r = 0; r < 2; ++r) {
    v1::RunningRank* rank = beat.add_ranks();
    rank->set_job_id("job-000001");
    rank->set_rank(r);
    rank->set_device(r);
  }
  v1::StreamAssignmentsRequest stream;
  stream.set_worker_id("w1");
  stream.set_session(0);
  auto report = [](int rank, v1::ReportRankStatusRequest::Event event, int exit_code) {
    v1::ReportRankStatusRequest r;
    r.set_worker_id("w1");
    r.set_job_id("job-000001");
    r.set_rank(rank);
    r.set_event(event);
    r.set_exit_code(exit_code);
    if (event == v1::ReportRankStatusRequest::EVENT_PROGRESS) {
      r.mutable_progress()->set_step(5);
      r.mutable_progress()->set_loss(2.5);
      r.mutable_progress()->set_last_checkpoint_step(4);
    }
    if (exit_code != 0) r.set_error("error: boom");
    return r;
  };
  using E = v1::ReportRankStatusRequest;
  Sequence().Add(kSubmitJob, submit).Write(dir, "submit");
  Sequence().Add(kGetJob, get).Write(dir, "get");
  Sequence().Add(kListJobs, list).Write(dir, "list");
  Sequence().Add(kCancelJob, cancel).Write(dir, "cancel");
  Sequence().Add(kWatchJob, watch).Write(dir, "watch");
  Sequence().Add(kListWorkers, v1::ListWorkersRequest()).Write(dir, "workers");
  Sequence().Add(kPlanJob, plan).Write(dir, "plan");
  Sequence().Add(kGetJobLogs, logs).Write(dir, "logs");
  Sequence().Add(kRegisterWorker, reg).Write(dir, "register");
  Sequence().Add(kHeartbeat, beat).Write(dir, "heartbeat");
  Sequence().Add(kStreamAssignments, stream).Write(dir, "stream");
  Sequence().Add(kReportRankStatus, report(0, E::EVENT_STARTED, 0)).Write(dir, "report");
  Sequence()
      .Add(kRegisterWorker, reg)
      .Add(kSubmitJob, submit)
      .Add(kStreamAssignments, stream)
      .Add(kHeartbeat, beat)
      .Add(kReportRankStatus, report(0, E::EVENT_STARTED, 0))
      .Add(kReportRankStatus, report(1, E::EVENT_STARTED, 0))
      .Add(kReportRankStatus, report(0, E::EVENT_PROGRESS, 0))
      .Add(kWatchJob, watch)
      .Add(kGetJobLogs, logs)
      .Add(kReportRankStatus, report(0, E::EVENT_EXITED, 0))
      .Add(kReportRankStatus, report(1, E::EVENT_EXITED, 0))
      .Add(kGetJob, get)
      .Add(kListJobs, list)
      .Write(dir, "story-succeeds");
  Sequence()
      .Add(kRegisterWorker, reg)
      .Add(kSubmitJob, submit)
      .Add(kPlanJob, plan)
      .Add(kCancelJob, cancel)
      .Add(kStreamAssignments, stream)
      .Add(kHeartbeat, beat)
      .Add(kListWorkers, v1::ListWorkersRequest())
      .Write(dir, "story-cancelled");
  Sequence()
      .Add(kRegisterWorker, reg)
      .Add(kSubmitJob, submit_restarts)
      .Add(kStreamAssignments, stream)
      .Add(kReportRankStatus, report(0, E::EVENT_STARTED, 0))
      .Add(kReportRankStatus, report(1, E::EVENT_EXITED, 1))
      .Add(kHeartbeat, beat)
      .Add(kRegisterWorker, reg)
      .Add(kStreamAssignments, stream)
      .Add(kGetJob, get)
      .Write(dir, "story-restarts");
}

}  // namespace
}  // namespace tessera::coordinator

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // Not a line per string field that is not UTF-8.
  if (const char* dir = getenv("TESSERA_FUZZ_WRITE_SEEDS")) {
    tessera::coordinator::WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::coordinator;  // NOLINT: one function.
  Harness& h = TheHarness();
  const std::string db = h.dir + "/jobs.db";
  for (const char* suffix : {"-wal", "-shm"}) unlink((db + suffix).c_str());
  tessera::fuzz::WriteFile(db, reinterpret_cast<const uint8_t*>(h.empty_store.data()), h.empty_store.size());
  auto store = JobStore::Open({db});
  if (!store.ok()) std::abort();
  CoordinatorOptions options;
  options.roots = h.roots;  // /data and /out: checked as names, resolved where they exist.
  Coordinator coordinator(options, std::move(*store));
  if (!coordinator.Recover().ok()) std::abort();
  CoordinatorServiceImpl coordinator_service(&coordinator, nullptr, nullptr, /*max_streams_per_client=*/4);
  WorkerServiceImpl worker_service(&coordinator, nullptr, nullptr);
  {
    absl::WriterMutexLock lock(&targets_mu);
    h.coordinator_service.to = &coordinator_service;
    h.worker_service.to = &worker_service;
  }

  size_t at = 0;
  for (int calls = 0; calls < kMaxCalls && at + 3 <= size; ++calls) {
    const Method& m = Methods()[data[at] % Methods().size()];
    const size_t length = std::min<size_t>(size - at - 3, data[at + 1] | (data[at + 2] << 8));
    const std::string request(reinterpret_cast<const char*>(data + at + 3), length);
    at += 3 + length;
    Call(h, m, request);
  }
  // A stream's handler may still be returning after its client saw the deadline: wait for it.
  absl::WriterMutexLock lock(&targets_mu);
  h.coordinator_service.to = nullptr;
  h.worker_service.to = nullptr;
  return 0;
}
