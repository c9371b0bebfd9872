#include "client/plan_command.h"

#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/auto_layout.h"
#include "client/exit_codes.h"
#include "client/table.h"
#include "spec/job_spec.h"
#include "nlohmann/json.hpp"
#include "plan/planner.h"

namespace tessera::client {

int LocalPlanCommand(const LocalPlanOptions& o) {
  auto spec = spec::LoadJobSpec(o.spec_path, o.overrides);
  if (!spec.ok()) {
    for (absl::string_view line : absl::StrSplit(spec.status().message(), '\n')) std::cerr << "error: " << line << "\n";
    return kExitBadInput;
  }
  if (o.devices < 1) {
    std::cerr << "error: --devices: " << o.devices << " must be at least 1\n";
    return kExitBadInput;
  }
  plan::PlanInput in = PlanInputFor(*spec, o.devices, o.gflops, o.bandwidth_gbs, o.memory_gb);
  std::vector<plan::Prediction> plan = plan::Plan(in);
  if (plan.empty()) {
    std::cerr << "error: no layout of " << o.devices << " devices can run this model and batch "
              << "(heads, hidden, vocab, seq_len, micro_batch and global_batch must divide)\n";
    return kExitBadInput;
  }
  const size_t rows = o.top > 0 ? std::min<size_t>(o.top, plan.size()) : plan.size();
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t k = 0; k < rows; ++k) {
      const auto& p = plan[k];
      const auto& l = p.layout;
      out.push_back({{"layout", l.ToString()}, {"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}, {"sp", l.sp},
                     {"tp_mode", layout::Name(l.tp_mode)}, {"tp_depth", l.tp_depth},
                     {"sp_mode", layout::Name(l.sp_mode)}, {"pp_schedule", layout::Name(l.pp_schedule)}, {"pp_chunks", l.pp_chunks}, {"step_s", p.step_s},
                     {"compute_s", p.compute_s}, {"comm_s", p.comm_s}, {"comm_bytes", p.comm_bytes},
                     {"bubble", p.bubble}, {"state_bytes", p.state_bytes}, {"activation_bytes", p.activation_bytes},
                     {"memory_bytes", p.memory_bytes()}, {"fits", p.fits}, {"verdict", p.verdict}});
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << absl::StrFormat("%d layouts of %d devices; assuming %.0f GFLOP/s, %.1f GB/s and %.1f GB per device "
                               "(--gflops, --bandwidth-gbs, --memory-gb)\n",
                               plan.size(), o.devices, in.device.flops / 1e9, in.device.bandwidth / 1e9,
                               in.device.memory_bytes / 1e9);
  Table t({"#", "LAYOUT", "STEP_S", "COMPUTE_S", "COMM_MB", "BUBBLE", "MEM_GB", "VERDICT"});
  for (size_t k = 0; k < rows; ++k) {
    const auto& p = plan[k];
    t.AddRow({absl::StrCat(k + 1), p.layout.ToString(), absl::StrFormat("%.4f", p.step_s),
              absl::StrFormat("%.4f", p.compute_s), absl::StrFormat("%.1f", p.comm_bytes / 1e6),
              absl::StrFormat("%.0f%%", 100 * p.bubble), absl::StrFormat("%.3f", p.memory_bytes() / 1e9), p.verdict});
  }
  std::cout << t.ToString();
  const auto& best = plan[0].layout;
  if (plan[0].fits) {
    std::cout << absl::StrFormat("\nto use it: --set parallel.dp=%d --set parallel.pp=%d --set parallel.tp=%d "
                                 "--set parallel.sp=%d --set parallel.tp_mode=%s%s%s%s%s\n",
                                 best.dp, best.pp, best.tp, best.sp, layout::Name(best.tp_mode),
                                 best.ep > 1 ? absl::StrCat(" --set parallel.ep=", best.ep) : "",
                                 best.tp_mode == layout::TpMode::k2p5D ? absl::StrCat(" --set parallel.tp_depth=", best.tp_depth) : "",
                                 best.sp > 1 ? absl::StrCat(" --set parallel.sp_mode=", layout::Name(best.sp_mode)) : "",
                                 best.pp > 1 ? absl::StrCat(" --set parallel.pp_schedule=", layout::Name(best.pp_schedule),
                                                            " --set parallel.pp_chunks=", best.pp_chunks)
                                             : "");
  } else {
    std::cout << "\nno layout fits the device memory\n";
  }
  return kExitOk;
}

}  // namespace tessera::client
