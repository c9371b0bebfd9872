// tessera: the command-line client. `tessera run SPEC` trains locally; `tessera data prepare` makes
// token files. (Coordinator commands arrive with the control plane.) Never links LibTorch.
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/data_prepare.h"
#include "client/exit_codes.h"
#include "client/local_launcher.h"

namespace tessera::client {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"tessera: distributed training of transformer models"};
  app.require_subcommand(1);

  LaunchOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Train a job spec locally: one process per rank on this machine");
  run_cmd->add_option("spec", run.spec_path, "Job spec (YAML)")->required();
  run_cmd->add_option("--set", run.overrides, "Override a spec field: --set train.steps=20 (repeatable)");
  run_cmd->add_option("--threads-per-rank", run.threads_per_rank, "Intra-op threads per rank (default: cores / ranks)");
  run_cmd->add_option("--dump-at-step", run.dump_at_step,
                      "Debug: write full weights and gradients after step N to OUTPUT_DIR/debug/");
  run_cmd->add_flag("--quiet", run.quiet, "No progress output");

  CLI::App* data_cmd = app.add_subcommand("data", "Prepare training data");
  data_cmd->require_subcommand(1);
  std::string input, output;
  CLI::App* prepare = data_cmd->add_subcommand("prepare", "Text file -> byte-level token file (uint16, vocab 256)");
  prepare->add_option("input", input, "Any text (or binary) file")->required();
  prepare->add_option("output", output, "Token file to write")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e);
      return kExitOk;
    }
    std::cerr << "error: " << e.what() << "\n" << "(see tessera --help)\n";
    return kExitBadInput;
  }
  if (run_cmd->parsed()) return RunLocal(run);
  if (prepare->parsed()) {
    auto n = PrepareByteTokens(input, output);
    if (!n.ok()) {
      std::cerr << "error: " << n.status().message() << "\n";
      return kExitBadInput;
    }
    std::cout << "wrote " << *n << " tokens to " << output << " (uint16, byte-level, vocab 256)\n";
    return kExitOk;
  }
  return kExitBadInput;
}

}  // namespace
}  // namespace tessera::client

int main(int argc, char** argv) { return tessera::client::Main(argc, argv); }
