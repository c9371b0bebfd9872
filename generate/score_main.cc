// tessera-score: the engine behind `tessera score` (docs/post-training.md "Scoring"): a reward model — a
// checkpoint of train.objective reward or a transformers *ForSequenceClassification directory — scores
// each pair of a preference dataset, or of preference JSONL tokenized as `tessera data prepare
// --preference` does, at the last token of prompt + chosen and prompt + rejected, as training reads
// them; or single completions (JSONL records with "prompt" and "completion", tokenized as a pair's
// chosen is). One JSON line per pair or completion on stdout; a summary (pairs, accuracy, mean margin;
// or completions and their mean score) on stderr.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "client/exit_codes.h"
#include "client/preference_prepare.h"
#include "formats/data/preference_dataset.h"
#include "parallel/models/load_model.h"
#include "parallel/models/reward_scoring.h"
#include "parallel/objectives/reward_objective.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;

// A score as JSON: the number, or null when it is not finite (a diverged checkpoint's).
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream out;
  out << std::setprecision(9) << v;
  return out.str();
}

// The temporary directory's files, removed by a signal that ends the program (SIGINT, SIGTERM, SIGHUP)
// before it dies of it: the handler only calls unlink, rmdir and raise (async-signal-safe) on names
// fixed before it is installed.
constexpr int kScratchNames = 11;
char g_scratch_files[kScratchNames][4096];
char g_scratch_dir[4096];

extern "C" void RemoveScratchAndDie(int sig) {
  for (int i = 0; i < kScratchNames; ++i) {
    if (g_scratch_files[i][0] != '\0') unlink(g_scratch_files[i]);
  }
  rmdir(g_scratch_dir);
  signal(sig, SIG_DFL);
  raise(sig);
}

// Fills the names above for `dir` (stdin's copy and the prepared dataset's files, finished or not)
// and installs the handler.
void RemoveScratchOnSignals(const fs::path& dir) {
  const char* names[kScratchNames] = {"stdin.jsonl",   "pairs.bin",        "pairs.bin.tmp",   "pairs.idx",
                                      "pairs.idx.tmp", "pairs.pref.json",  "pairs.pref.json.tmp",
                                      "pairs.pref.margin", "pairs.pref.margin.tmp", "", ""};
  const std::string d = dir.string();
  if (d.size() + 32 >= sizeof(g_scratch_dir)) return;  // Not covered: left for the normal exit's cleanup.
  for (int i = 0; i < kScratchNames; ++i) {
    const std::string path = names[i][0] == '\0' ? std::string() : (dir / names[i]).string();
    std::snprintf(g_scratch_files[i], sizeof(g_scratch_files[i]), "%s", path.c_str());
  }
  std::snprintf(g_scratch_dir, sizeof(g_scratch_dir), "%s", d.c_str());
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, RemoveScratchAndDie);
}

// Single completions (PrepareCompletions): one line {"record": i, "score": s} each, in order.
// `named`: a message with the input's displayed name (standard input's copy as "<stdin>").
int ScoreCompletions(parallel::Decoder& model, const std::string& source, const std::string& data,
                     const std::string& tokenizer, const formats::data::PreferenceTruncation& cut, int batch,
                     const std::function<std::string(const std::string&)>& named, std::vector<double>* scores) {
  auto records = PrepareCompletions({data}, tokenizer);
  if (!records.ok()) {
    std::cerr << "error: --data: " << named(std::string(records.status().message())) << "\n";
    return kExitBadInput;
  }
  const parallel::ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(records->size());
  for (int64_t i = 0; i < n; ++i) {
    CompletionTokens& r = (*records)[static_cast<size_t>(i)];
    cut.CutPrompt(&r.prompt);
    cut.CutCompletion(&r.completion);
    const int64_t length = static_cast<int64_t>(r.prompt.size() + r.completion.size());
    if (length > c.seq_len) {
      std::cerr << "error: --data: " << named(r.where) << "record " << i << " has " << length
                << " tokens, more than the model's " << c.seq_len
                << " positions (cut it with --max-prompt-tokens and --max-completion-tokens)\n";
      return kExitBadInput;
    }
    for (const std::vector<int32_t>* ids : {&r.prompt, &r.completion}) {
      for (int32_t id : *ids) {
        if (id < 0 || id >= c.vocab) {
          std::cerr << "error: --data: " << named(r.where) << "record " << i << " has token id " << id << ", outside the model's vocabulary of "
                    << c.vocab << " (another tokenizer?)\n";
          return kExitBadInput;
        }
      }
    }
  }
  scores->assign(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  for (int64_t first = 0; first < n; first += batch) {
    std::vector<parallel::ScoredSequence> seqs;
    for (int64_t i = first; i < std::min<int64_t>(n, first + batch); ++i) {
      const CompletionTokens& r = (*records)[static_cast<size_t>(i)];
      seqs.push_back({&r.prompt, &r.completion, i});
    }
    if (absl::Status s = parallel::ScoreSequences(model, seqs); !s.ok()) {
      std::cerr << "error: scoring records " << first << ".." << first + static_cast<int64_t>(seqs.size()) - 1 << ": "
                << s.message() << "\n";
      return kExitJobFailed;
    }
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::cout << "{\"record\": " << i << ", \"score\": " << JsonNumber((*scores)[static_cast<size_t>(i)]) << "}\n";
    if (!std::cout) return kExitJobFailed;  // Its reader went away (SIGPIPE is ignored): the cleanup runs.
    sum += (*scores)[static_cast<size_t>(i)];
  }
  std::cerr << "scored " << n << " completions with " << source << ": mean score " << sum / n << "\n";
  return kExitOk;
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // A closed stdout fails the write instead: the temporary directory is removed.
  CLI::App app{"tessera score: a reward model's scores of preference pairs or of single completions"};
  app.name("tessera score");
  std::string model_path, data, tokenizer;
  formats::data::PreferenceTruncation cut;
  int batch = 8, threads = 0;
  app.add_option("model", model_path,
                 "A reward model: a checkpoint of train.objective reward (or its checkpoint directory) or a "
                 "transformers *ForSequenceClassification directory")
      ->required();
  app.add_option("--data", data,
                 "Preference pairs: a .jsonl file (as `tessera data prepare --preference` reads; - for stdin) or a "
                 "prepared preference dataset's prefix; or single completions: a .jsonl file of records with "
                 "\"prompt\" and \"completion\"")
      ->required();
  app.add_option("--tokenizer", tokenizer,
                 "For a .jsonl file: the tokenizer directory (default: MODEL when it holds a tokenizer.json)");
  app.add_option("--max-prompt-tokens", cut.max_prompt, "Keep a prompt's last N tokens (data.max_prompt_tokens)");
  app.add_option("--max-completion-tokens", cut.max_completion,
                 "Keep a completion's first N tokens (data.max_completion_tokens)");
  app.add_option("--batch", batch, "Pairs (or single completions) per forward pass (default 8)");
  app.add_option("--threads", threads, "Intra-op threads (default: LibTorch's)");
  CLI11_PARSE(app, argc, argv);
  if (batch < 1 || batch > 4096) {
    std::cerr << "error: --batch: " << batch << " is not between 1 and 4096\n";
    return kExitBadInput;
  }
  if (cut.max_prompt < 0 || cut.max_completion < 0) {
    std::cerr << "error: --max-prompt-tokens and --max-completion-tokens: must be at least 0\n";
    return kExitBadInput;
  }
  std::error_code ec;
  // A prepared dataset given by one of its files (PREFIX.pref.json) is that dataset.
  if (absl::EndsWith(data, ".pref.json") && fs::exists(data, ec)) data.resize(data.size() - strlen(".pref.json"));
  if (threads > 0) at::set_num_threads(threads);
  // The model first: a wrong one is refused before any data is read.
  auto loaded = parallel::LoadModelForInference(model_path, c10::Device(c10::kCPU), "");
  if (!loaded.ok()) {
    std::cerr << "error: " << loaded.status().message() << "\n";
    return kExitBadInput;
  }
  parallel::Decoder& model = *loaded->model;
  const parallel::ModelConfig& c = model.config();
  if (!c.score_head) {
    std::cerr << "error: " << model_path << " is not a reward model (its head is an LM head): give a checkpoint of "
              << "train.objective reward or a transformers *ForSequenceClassification directory\n";
    return kExitBadInput;
  }
  std::vector<double> scores;
  auto scorer = std::make_shared<parallel::SequenceScores>(&scores);
  model.set_objective(scorer);
  model.set_masked_targets(true);
  at::NoGradGuard no_grad;
  // A .jsonl file is read in $TMPDIR (else /tmp): standard input copied there first, pairs prepared
  // into a temporary dataset (their errors name the line); removed when the program ends.
  std::string prefix = data;
  fs::path scratch;
  std::string stdin_copy;
  auto named = [&](const std::string& m) {
    return stdin_copy.empty() ? m : absl::StrReplaceAll(m, {{stdin_copy, "<stdin>"}});
  };
  auto remove_scratch = absl::MakeCleanup([&] {
    if (!scratch.empty()) fs::remove_all(scratch, ec);
  });
  if (!fs::exists(data + ".pref.json", ec)) {
    if (!fs::is_regular_file(data, ec) && data != "-") {
      std::cerr << "error: --data: " << data << " is neither a file nor a preference dataset (no " << data
                << ".pref.json)\n";
      return kExitBadInput;
    }
    if (tokenizer.empty() && fs::exists(fs::path(model_path) / "tokenizer.json", ec)) tokenizer = model_path;
    if (tokenizer.empty()) {
      std::cerr << "error: --tokenizer: needed to tokenize " << data << " (MODEL holds no tokenizer.json)\n";
      return kExitBadInput;
    }
    const char* tmpdir = getenv("TMPDIR");
    const std::string base = tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/tmp";
    std::string templ = (fs::path(base) / "tessera-score-XXXXXX").string();
    const char* made = mkdtemp(templ.data());
    if (made == nullptr) {
      std::cerr << "error: cannot create a temporary directory in " << base << ": " << strerror(errno) << "\n";
      return kExitJobFailed;
    }
    scratch = made;
    RemoveScratchOnSignals(scratch);
    if (data == "-") {
      // Errors name "<stdin>", not the copy's path (removed when the program ends).
      stdin_copy = data = (scratch / "stdin.jsonl").string();
      std::ofstream copy(data, std::ios::binary);
      if (std::cin.peek() != std::char_traits<char>::eof()) copy << std::cin.rdbuf();  // Empty: nothing to copy.
      if (std::cin.bad() || !copy.flush()) {
        std::cerr << "error: cannot copy standard input to " << data << "\n";
        return kExitJobFailed;
      }
    }
    auto singles = HoldsCompletions(data);
    if (!singles.ok()) {
      std::cerr << "error: --data: " << named(std::string(singles.status().message())) << "\n";
      return kExitBadInput;
    }
    if (*singles) return ScoreCompletions(model, loaded->source, data, tokenizer, cut, batch, named, &scores);
    PreferencePrepareOptions prepare;
    prepare.inputs = {data};
    prepare.output_prefix = (scratch / "pairs").string();
    prepare.tokenizer = tokenizer;
    prepare.progress = false;
    if (auto report = PreparePreference(prepare); !report.ok()) {
      std::cerr << "error: " << named(std::string(report.status().message())) << "\n";
      return kExitBadInput;
    }
    prefix = prepare.output_prefix;
  }
  // Errors of the prepared temporary dataset name the input (its pair p is the input's record p).
  const std::string input = named(data);
  auto named_pairs = [&](absl::string_view m) {
    return scratch.empty() ? std::string(m) : absl::StrReplaceAll(m, {{prefix + ".bin", input}, {prefix, input}});
  };
  auto pairs = formats::data::PreferenceDataset::Open(prefix, c.vocab);
  if (!pairs.ok()) {
    std::cerr << "error: --data: " << named_pairs(pairs.status().message()) << "\n";
    return kExitBadInput;
  }
  const int64_t n = (*pairs)->pairs();
  scores.assign(2 * static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t count = std::min<int64_t>(batch, n - first);
    std::vector<formats::data::PreferencePair> read;
    for (int64_t p = first; p < first + count; ++p) {
      auto pair = (*pairs)->Pair(p, cut);
      if (!pair.ok()) {
        std::cerr << "error: --data: " << named_pairs(pair.status().message()) << "\n";
        return kExitBadInput;
      }
      const size_t length = pair->prompt.size() + std::max(pair->chosen.size(), pair->rejected.size());
      if (static_cast<int64_t>(length) > c.seq_len) {
        std::cerr << "error: --data: pair " << p << " has " << length << " tokens, more than the model's " << c.seq_len
                  << " positions (cut it with --max-prompt-tokens and --max-completion-tokens)\n";
        return kExitBadInput;
      }
      read.push_back(*std::move(pair));
    }
    // Chosen then rejected.
    std::vector<parallel::ScoredSequence> seqs;
    for (int64_t i = 0; i < count; ++i) {
      const formats::data::PreferencePair& pair = read[static_cast<size_t>(i)];
      seqs.push_back({&pair.prompt, &pair.chosen, 2 * (first + i)});
      seqs.push_back({&pair.prompt, &pair.rejected, 2 * (first + i) + 1});
    }
    if (absl::Status s = parallel::ScoreSequences(model, seqs); !s.ok()) {
      std::cerr << "error: scoring pairs " << first << ".." << first + count - 1 << ": " << s.message() << "\n";
      return kExitJobFailed;
    }
  }
  int64_t correct = 0;
  double margin = 0;
  for (int64_t p = 0; p < n; ++p) {
    const double chosen = scores[2 * p], rejected = scores[2 * p + 1];
    std::cout << "{\"pair\": " << p << ", \"chosen\": " << JsonNumber(chosen) << ", \"rejected\": "
              << JsonNumber(rejected) << "}\n";
    if (!std::cout) return kExitJobFailed;  // Its reader went away (SIGPIPE is ignored): the cleanup runs.
    correct += chosen > rejected ? 1 : 0;
    margin += chosen - rejected;
  }
  std::cerr << "scored " << n << " pairs with " << loaded->source << ": accuracy "
            << (n > 0 ? static_cast<double>(correct) / n : 0.0) << ", mean margin " << (n > 0 ? margin / n : 0.0)
            << "\n";
  return kExitOk;
}

}  // namespace
}  // namespace tessera::client

int main(int argc, char** argv) { return tessera::client::Main(argc, argv); }
