// tessera-score: the engine behind `tessera score` (docs/post-training.md "Scoring"): a reward model — a
// checkpoint of train.objective reward or a transformers *ForSequenceClassification directory — scores
// each pair of a preference dataset, or of preference JSONL tokenized as `tessera data prepare
// --preference` does, at the last token of prompt + chosen and prompt + rejected, as training reads
// them. One JSON line per pair on stdout; a summary (pairs, accuracy, mean margin) on stderr.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/exit_codes.h"
#include "client/preference_prepare.h"
#include "formats/data/preference_dataset.h"
#include "parallel/models/load_model.h"
#include "parallel/objectives/reward_objective.h"

namespace tessera::client {
namespace {

namespace fs = std::filesystem;

int Main(int argc, char** argv) {
  CLI::App app{"tessera score: a reward model's scores of preference pairs"};
  app.name("tessera score");
  std::string model_path, data, tokenizer;
  formats::data::PreferenceTruncation cut;
  int batch = 8, threads = 0;
  app.add_option("model", model_path,
                 "A reward model: a checkpoint of train.objective reward (or its checkpoint directory) or a "
                 "transformers *ForSequenceClassification directory")
      ->required();
  app.add_option("--data", data,
                 "Preference pairs: a .jsonl file (as `tessera data prepare --preference` reads) or a prepared "
                 "preference dataset's prefix")
      ->required();
  app.add_option("--tokenizer", tokenizer,
                 "For a .jsonl file: the tokenizer directory (default: MODEL when it holds a tokenizer.json)");
  app.add_option("--max-prompt-tokens", cut.max_prompt, "Keep a prompt's last N tokens (data.max_prompt_tokens)");
  app.add_option("--max-completion-tokens", cut.max_completion,
                 "Keep a completion's first N tokens (data.max_completion_tokens)");
  app.add_option("--batch", batch, "Pairs per forward pass (default 8)");
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
  // A .jsonl file is prepared into a temporary dataset first (its errors name the line), in $TMPDIR
  // (else /tmp), removed when the program ends.
  std::string prefix = data;
  fs::path scratch;
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
    PreferencePrepareOptions prepare;
    prepare.inputs = {data};
    prepare.output_prefix = (scratch / "pairs").string();
    prepare.tokenizer = tokenizer;
    prepare.progress = false;
    if (auto report = PreparePreference(prepare); !report.ok()) {
      std::cerr << "error: " << report.status().message() << "\n";
      return kExitBadInput;
    }
    prefix = prepare.output_prefix;
  }
  auto pairs = formats::data::PreferenceDataset::Open(prefix, c.vocab);
  if (!pairs.ok()) {
    std::cerr << "error: --data: " << pairs.status().message() << "\n";
    return kExitBadInput;
  }
  const int64_t n = (*pairs)->pairs();
  std::vector<double> scores(2 * static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  auto scorer = std::make_shared<parallel::SequenceScores>(&scores);
  model.set_objective(scorer);
  model.set_masked_targets(true);
  at::NoGradGuard no_grad;
  for (int64_t first = 0; first < n; first += batch) {
    const int64_t count = std::min<int64_t>(batch, n - first);
    std::vector<formats::data::PreferencePair> read;
    int64_t longest = 1;
    for (int64_t p = first; p < first + count; ++p) {
      auto pair = (*pairs)->Pair(p, cut);
      if (!pair.ok()) {
        std::cerr << "error: --data: " << pair.status().message() << "\n";
        return kExitBadInput;
      }
      const size_t length = pair->prompt.size() + std::max(pair->chosen.size(), pair->rejected.size());
      if (static_cast<int64_t>(length) > c.seq_len) {
        std::cerr << "error: --data: pair " << p << " has " << length << " tokens, more than the model's " << c.seq_len
                  << " positions (cut it with --max-prompt-tokens and --max-completion-tokens)\n";
        return kExitBadInput;
      }
      longest = std::max<int64_t>(longest, static_cast<int64_t>(length));
      read.push_back(*std::move(pair));
    }
    // Rows of longest + 1 ids (right-padded with −1: token 0, untrained); chosen then rejected.
    std::vector<int64_t> rows(static_cast<size_t>(2 * count * (longest + 1)), -1);
    std::vector<double> where;
    for (int64_t i = 0; i < count; ++i) {
      for (int side = 0; side < 2; ++side) {
        const formats::data::PreferencePair& pair = read[static_cast<size_t>(i)];
        parallel::WriteRewardRow(pair.prompt, side == 0 ? pair.chosen : pair.rejected,
                                 rows.data() + (2 * i + side) * (longest + 1));
        where.push_back(static_cast<double>(2 * (first + i) + side));
      }
    }
    const at::Tensor window = at::from_blob(rows.data(), {2 * count, longest + 1}, at::kLong);
    model.set_sample_data(at::tensor(where, at::TensorOptions().dtype(at::kDouble)));
    try {
      (void)model.Loss(window.narrow(1, 0, longest), window.narrow(1, 1, longest));
    } catch (const std::exception& e) {
      std::cerr << "error: scoring pairs " << first << ".." << first + count - 1 << ": " << e.what() << "\n";
      return kExitJobFailed;
    }
  }
  int64_t correct = 0;
  double margin = 0;
  std::cout << std::setprecision(9);
  for (int64_t p = 0; p < n; ++p) {
    const double chosen = scores[2 * p], rejected = scores[2 * p + 1];
    std::cout << "{\"pair\": " << p << ", \"chosen\": " << chosen << ", \"rejected\": " << rejected << "}\n";
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
