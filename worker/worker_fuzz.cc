// libFuzzer target (tools/fuzz.sh worker): what the worker daemon reads from others, on arbitrary
// bytes — a start order from the coordinator (an encoded Assignment through CheckStartOrder, with
// path roots, and what the worker computes from an order it accepts) and rank 0's step log
// (ReadCompleteLines and ParseStepLine, as RankSupervisor reads steps.jsonl). Property: no crash, no
// exception, no sanitizer report, no hang; an accepted order names a device of the worker.
//
// Input: byte 0 picks the reader (even: step log, odd: start order); for a start order byte 1 is
// the worker's device count (1..8) and the rest the encoded Assignment. The seed corpus
// (fuzz/corpus/worker) is written by the target itself: TESSERA_FUZZ_WRITE_SEEDS=DIR worker_fuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "spec/job_spec.h"
#include "spec/model_config_of.h"
#include "fuzz/fuzz_files.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/json_util.h"
#include "worker/start_order.h"
#include "common/steplog/step_log.h"

namespace {

// Checked as names, and resolved on this machine where they exist (they need not).
const tessera::spec::PathRoots& Roots() {
  static const tessera::spec::PathRoots roots{{"/data"}, "/out"};
  return roots;
}

void WriteSeeds(const std::string& dir) {
  using namespace tessera;  // NOLINT: one function.
  const std::string steps =
      std::string(1, '\0') +
      "{\"step\": 1, \"loss\": 5.6, \"lr\": 0.001, \"grad_norm\": 1.5, \"tokens\": 4096, \"tokens_per_s\": 900.5,"
      " \"step_seconds\": 0.4, \"bytes_all_reduced\": 1024}\n"
      "{\"step\": 2, \"val_loss\": 5.1}\n{\"step\": 3, \"resumed_from\": 2, \"discarded_steps\": 1, \"loss\": 4.9}\n{\"step\": 4";
  fuzz::WriteFile(dir + "/steps", reinterpret_cast<const uint8_t*>(steps.data()), steps.size());
  auto spec = spec::ParseJobSpec("name: seed\ndata: {path: /data/x.bin}\nmodel: {layers: 2, hidden: 64, heads: 4}\n"
                                 "train: {micro_batch: 1, global_batch: 4}\noutput_dir: /out/alice/seed\n",
                                 {"parallel.dp=2"});
  if (!spec.ok()) std::abort();
  v1::Assignment a;
  a.set_action(v1::Assignment::ACTION_START);
  a.set_job_id("job-000001");
  a.set_owner("alice");
  a.set_rank(1);
  a.set_local_rank(1);
  a.set_world_size(2);
  a.set_store_host("127.0.0.1");
  a.set_store_port(29500);
  a.set_seq(1);
  *a.mutable_spec() = *spec;
  const std::string order = std::string("\x01\x01") + a.SerializeAsString();
  fuzz::WriteFile(dir + "/order", reinterpret_cast<const uint8_t*>(order.data()), order.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // Not a line per string field that is not UTF-8.
  if (const char* dir = getenv("TESSERA_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;  // NOLINT: one function.
  if (size < 1) return 0;
  if (data[0] % 2 == 0) {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
    const int64_t consumed = steplog::ReadCompleteLines(in, [](std::string_view line) { steplog::ParseStepLine(line); });
    if (consumed < 0 || consumed > static_cast<int64_t>(size - 1)) std::abort();
    return 0;
  }
  if (size < 2) return 0;
  const int devices = 1 + data[1] % 8;
  v1::Assignment order;
  if (!order.ParseFromArray(data + 2, static_cast<int>(size - 2))) return 0;
  if (!worker::CheckStartOrder(order, devices, Roots()).ok()) return 0;
  if (order.local_rank() < 0 || order.local_rank() >= devices) std::abort();
  // What RankSupervisor::Start computes from an accepted order.
  (void)spec::ModelConfigOf(order.spec().model()).TrainingFlopsPerToken();
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(order.spec(), &json);
  return 0;
}
