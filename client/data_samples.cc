#include "client/data_samples.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/exit_codes.h"
#include "spec/data_options_of.h"
#include "spec/job_spec.h"
#include "formats/data/training_data.h"

namespace tessera::client {

int DataSamplesCommand(const std::string& spec_path, const std::vector<std::string>& overrides, int64_t from,
                       int64_t count) {
  auto spec = spec::LoadJobSpec(spec_path, overrides);
  if (!spec.ok()) {
    std::cerr << "error: " << spec.status().message() << "\n";
    return kExitBadInput;
  }
  if (from < 0 || count < 0) {
    std::cerr << "error: --from and --count must not be negative\n";
    return kExitBadInput;
  }
  auto data = formats::data::TrainingData::Open(spec::DataOptionsOf(*spec), spec::BlendOf(*spec));
  if (!data.ok()) {
    std::cerr << "error: " << data.status().message() << "\n";
    return kExitBadInput;
  }
  std::vector<int64_t> tokens;
  for (int64_t g = from; g < from + count; ++g) {
    auto origin = (*data)->Locate(g);
    tokens.clear();
    absl::Status read = origin.ok() ? (*data)->Read(g, &tokens) : origin.status();
    if (!read.ok()) {
      std::cerr << "error: sample " << g << ": " << read.message() << "\n";
      return kExitBadInput;
    }
    std::string line = absl::StrCat("{\"sample\": ", g, ", \"source\": ", origin->source, ", \"source_sample\": ",
                                    origin->source_sample, ", \"window\": ", origin->window, ", \"tokens\": [");
    // An SFT sample's untrained targets come encoded −id−1 (formats/data/token_dataset.h): shown as
    // their ids, with a flag per target ("trained"; the first token is no target).
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&line, i ? ", " : "", tokens[i] < 0 ? -tokens[i] - 1 : tokens[i]);
    if ((*data)->sft()) {
      absl::StrAppend(&line, "], \"trained\": [");
      for (size_t i = 1; i < tokens.size(); ++i) absl::StrAppend(&line, i > 1 ? ", " : "", tokens[i] >= 0 ? 1 : 0);
      auto trained = (*data)->TrainedTargets(g);
      if (!trained.ok()) {
        std::cerr << "error: sample " << g << ": " << trained.status().message() << "\n";
        return kExitBadInput;
      }
      absl::StrAppend(&line, "], \"trained_targets\": ", *trained);
      std::cout << line << "}\n";
      continue;
    }
    std::cout << line << "]}\n";
  }
  return kExitOk;
}

}  // namespace tessera::client
