#include "tests/testing/cli.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "formats/checkpoint/safetensors.h"
#include "nlohmann/json.hpp"

namespace tessera::testing {

namespace fs = std::filesystem;

bool WaitFor(const std::function<bool()>& pred, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::string Runfile(const std::string& path) {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* ws = getenv("TEST_WORKSPACE");
  if (srcdir != nullptr) return std::string(srcdir) + "/" + (ws ? ws : "tessera") + "/" + path;
  return fs::absolute(path).string();
}

std::string FreshDir(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  fs::path dir = fs::path(tmp ? tmp : "/tmp") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

CliResult RunTessera(const std::vector<std::string>& args) {
  setenv("TESSERA_RANK_BINARY", Runfile("worker/rank/tessera-rank").c_str(), 1);
  std::vector<std::string> argv = {Runfile("client/tessera")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

CliResult RunCommand(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const std::string& a : argv) {
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += (cmd.empty() ? "" : " ") + quoted + "'";
  }
  cmd += " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string CheckpointAsyncYaml() {
  const char* v = getenv("TESSERA_TEST_CHECKPOINT_ASYNC");
  return v != nullptr && std::string(v) == "1" ? ", async: true" : "";
}

std::string WriteTokenFile(const std::string& dir, int tokens) {
  // A noisy periodic sequence: predictable enough that the loss falls, varied enough to matter.
  std::vector<uint16_t> t(tokens);
  uint32_t state = 12345;
  for (int i = 0; i < tokens; ++i) {
    state = state * 1103515245u + 12345u;
    t[i] = static_cast<uint16_t>((i % 17) * 13 % 256 ^ ((state >> 16) % 4));
  }
  std::string path = dir + "/tokens.bin";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()), t.size() * 2);
  return path;
}

std::map<int, double> ReadStepField(const std::string& steps_jsonl, const std::string& field) {
  std::map<int, double> out;
  std::ifstream in(steps_jsonl);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && !j.contains("warning")) out[j.value("step", 0)] = j.value(field, 0.0);
  }
  return out;
}

std::map<int, double> ReadValLosses(const std::string& steps_jsonl) {
  std::map<int, double> out;
  std::ifstream in(steps_jsonl);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("val_loss")) out[j.value("step", 0)] = j.value("val_loss", 0.0);
  }
  return out;
}

std::map<std::string, std::vector<float>> ReadF32(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  auto tensors = formats::checkpoint::ReadSafetensors(path);
  if (!tensors.ok()) return out;
  for (const auto& [name, t] : *tensors) {
    if (t.dtype != "F32") continue;
    std::vector<float> v(t.numel());
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    out.emplace(name, std::move(v));
  }
  return out;
}

}  // namespace tessera::testing
