// Test helpers for end-to-end tests: run the real `tessera` binary from the test's runfiles and
// read what a run leaves behind (steps.jsonl, safetensors dumps).
#ifndef TESSERA_TESTS_TESTING_CLI_H_
#define TESSERA_TESTS_TESTING_CLI_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together.
};

// Runs `tessera args...` to completion.
CliResult RunTessera(const std::vector<std::string>& args);

// Runs argv (argv[0] a path or a name on PATH) to completion; stdout and stderr together.
CliResult RunCommand(const std::vector<std::string>& argv);

// Polls `pred` every 50 ms until it holds (true) or `seconds` passed (its last answer).
bool WaitFor(const std::function<bool()>& pred, int seconds);

// Absolute path of a runfile, e.g. "client/tessera".
std::string Runfile(const std::string& path);

// A fresh directory under the test's temporary directory.
std::string FreshDir(const std::string& name);

// Writes a deterministic token file (uint16, ids < 256) of `tokens` tokens with learnable structure.
std::string WriteTokenFile(const std::string& dir, int tokens);

// One field ("loss", "grad_norm", ...) of every step line of steps.jsonl (warning lines skipped),
// by step (1-based).
std::map<int, double> ReadStepField(const std::string& steps_jsonl, const std::string& field);
// The val_loss of the steps that evaluated (only those lines), by step.
std::map<int, double> ReadValLosses(const std::string& steps_jsonl);
inline std::map<int, double> ReadLosses(const std::string& steps_jsonl) {
  return ReadStepField(steps_jsonl, "loss");
}

// The fault suites run twice (tests/BUILD.bazel: the *_async targets): their specs' checkpoint
// sections end with this — ", async: true" when TESSERA_TEST_CHECKPOINT_ASYNC=1, else nothing.
std::string CheckpointAsyncYaml();

// F32 tensors of a safetensors file, flattened.
std::map<std::string, std::vector<float>> ReadF32(const std::string& path);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_CLI_H_
