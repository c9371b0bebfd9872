// tessera-generate: the engine behind `tessera generate` (the CLI runs this binary so that the CLI
// itself does not load LibTorch). Samples tokens from a tessera checkpoint or a transformers model
// directory with a KV cache, on CPU or (tessera-generate-cuda, the same source linked with LibTorch's
// CUDA part; the CLI picks it for --device cuda) on a GPU; text in and out through a tokenizer.json.
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/exit_codes.h"
#include "common/text/utf8.h"
#include "formats/data/tokenizer.h"
#include "generate/prompts_file.h"
#include "nlohmann/json.hpp"
#include "parallel/checkpoint/tensor_convert.h"
#include "parallel/models/generate.h"
#include "parallel/models/load_model.h"

namespace tessera::client {
namespace {

// "cpu", "cuda" or "cuda:N"; an error names the flag and says what this binary or machine lacks.
absl::StatusOr<c10::Device> ParseDevice(const std::string& text) {
  if (text == "cpu") return c10::Device(c10::kCPU);
  int index = 0;
  if (text != "cuda") {
    if (!absl::StartsWith(text, "cuda:") || !absl::SimpleAtoi(text.substr(5), &index) || index < 0 || index > 1023) {
      return absl::InvalidArgumentError(
          absl::StrCat("--device: \"", text, "\" is not cpu, cuda or cuda:N (N a device number)"));
    }
  }
#ifndef TESSERA_GENERATE_CUDA
  return absl::FailedPreconditionError(absl::StrCat(
      "--device ", text, ": tessera-generate has no CUDA (`tessera generate --device cuda` runs tessera-generate-cuda)"));
#endif
  if (!at::hasCUDA()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", text, ": this machine has no CUDA device (or no NVIDIA driver)"));
  }
  const int64_t count = at::getNumGPUs();
  if (index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", text, ": this machine has ", count, " CUDA device", count == 1 ? "" : "s"));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// --prompts-file: every prompt of the file as one batch (SampleBatch), line p with seed o.seed + p (what
// `--seed o.seed+p` alone would draw, up to the batch's rounding), one JSON line per completion.
int GenerateFile(const parallel::LoadedModel& loaded, const std::string& path, const formats::data::Tokenizer* tokenizer,
                 const parallel::GenerateOptions& o) {
  if (o.num_samples < 1 || o.num_samples > parallel::kMaxSamples) {
    std::cerr << "error: num-samples " << o.num_samples << " is not in [1, " << parallel::kMaxSamples << "]\n";
    return kExitBadInput;
  }
  const int64_t max_prompts = parallel::kMaxSamples / o.num_samples;
  auto prompts = ReadPromptsFile(path, tokenizer, max_prompts, loaded.model->config().vocab);
  if (!prompts.ok()) {
    std::cerr << "error: --prompts-file: " << prompts.status().message() << "\n";
    return kExitBadInput;
  }
  std::vector<uint64_t> seeds;
  for (size_t p = 0; p < prompts->size(); ++p) seeds.push_back(o.seed + p);
  auto completions = parallel::SampleBatch(*loaded.model, *prompts, seeds, o);
  if (!completions.ok()) {
    std::cerr << "error: --prompts-file " << path << ": " << completions.status().message() << "\n";
    return kExitBadInput;
  }
  for (size_t p = 0; p < completions->size(); ++p) {
    for (size_t i = 0; i < (*completions)[p].size(); ++i) {
      const parallel::Completion& c = (*completions)[p][i];
      nlohmann::json line = {{"model", text::Utf8Lossy(loaded.source)},
                             {"prompt_index", p},
                             {"prompt", (*prompts)[p]},
                             {"sample", i},
                             {"tokens", c.tokens},
                             {"logprobs", c.logprobs},
                             {"truncated", c.truncated}};
      if (tokenizer) {
        auto text = tokenizer->Decode(std::vector<int32_t>(c.tokens.begin(), c.tokens.end()));
        line["text"] = text::Utf8Lossy(text.ok() ? *text : "?");
      }
      std::cout << line.dump() << "\n";
    }
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  CLI::App app{"tessera generate: sample tokens from a model (KV cache, CPU or CUDA)"};
  app.name("tessera generate");
  std::string model_path, prompt_ids, prompt_text, logits_out, tokenizer_path;
  parallel::GenerateOptions o;
  int threads = 0;
  bool json = false;
  std::string device_text = "cpu";
  app.add_option("model", model_path, "A tessera checkpoint (or checkpoint directory) or a transformers model directory")
      ->required();
  app.add_option("--prompt-ids", prompt_ids, "Prompt token ids, comma-separated: 15496,11,995");
  app.add_option("--prompt", prompt_text,
                 "Prompt text: encoded by --tokenizer, else byte-level (models with a 256-token vocabulary)");
  app.add_option("--tokenizer", tokenizer_path,
                 "A transformers tokenizer.json for --prompt and the output text (default: MODEL/tokenizer.json "
                 "when MODEL is a directory that has one)");
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate (default 32)");
  app.add_option("--temperature", o.temperature, "0 (default): greedy; > 0: sample from softmax(logits / T)");
  app.add_option("--top-k", o.top_k, "Sample among the K most likely tokens (default: all)");
  app.add_option("--top-p", o.top_p,
                 "Sample among the most likely tokens whose probability reaches P, after --top-k (default 1: all)");
  app.add_option("--num-samples", o.num_samples,
                 "Completions of the prompt (default 1), decoded as one batch, each from its own seeded generator");
  app.add_option("--seed", o.seed, "Seed of the sampler (default 0)");
  app.add_option("--stop-id", o.stop_token, "Stop after generating this token id (e.g. the end-of-text id)");
  app.add_option("--device", device_text, "cpu (default), cuda or cuda:N");
  app.add_option("--threads", threads, "Intra-op threads (default: LibTorch's)");
  app.add_option("--logits-out", logits_out, "Write the prompt's logits [T, vocab] (fp32) to this .safetensors file");
  std::string lora;
  app.add_option("--lora", lora, "A PEFT LoRA adapter directory applied over MODEL (as `tessera export` writes one)");
  std::string prompts_file;
  app.add_option("--prompts-file", prompts_file,
                 "A file of prompts, one JSON object a line: {\"prompt\": text} or {\"prompt_ids\": [ids]}; all "
                 "decoded as one batch, line p (of those not blank) sampled with seed SEED + p; prints --json lines "
                 "with \"prompt_index\"");
  app.add_flag("--json", json,
               "Print one line per completion, {\"model\", \"prompt\": [...], \"sample\", \"tokens\": [...], "
               "\"logprobs\": [...], \"truncated\", \"text\"}, instead of the tokens as they come");
  CLI11_PARSE(app, argc, argv);
  const bool given_ids = app.count("--prompt-ids") > 0, given_text = app.count("--prompt") > 0;
  const bool given_file = app.count("--prompts-file") > 0;
  if (int{given_ids} + int{given_text} + int{given_file} != 1) {
    std::cerr << "error: give exactly one of --prompt-ids, --prompt and --prompts-file\n";
    return kExitBadInput;
  }
  if (given_file && !logits_out.empty()) {
    std::cerr << "error: --logits-out: writes one prompt's logits; not with --prompts-file\n";
    return kExitBadInput;
  }
  if (given_text && prompt_text.empty()) {
    std::cerr << "error: --prompt: is empty; the model needs at least one token to continue from (give the "
                 "tokenizer's beginning-of-text id with --prompt-ids)\n";
    return kExitBadInput;
  }
  if (given_ids && prompt_ids.empty()) {
    std::cerr << "error: --prompt-ids: is empty; give at least one token id\n";
    return kExitBadInput;
  }
  std::vector<int64_t> prompt;
  if (!prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(prompt_ids, ',')) {
      int64_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        std::cerr << "error: --prompt-ids: \"" << part << "\" is not an integer\n";
        return kExitBadInput;
      }
      prompt.push_back(id);
    }
  }
  if (tokenizer_path.empty() && (!prompt_text.empty() || given_file) && std::filesystem::is_directory(model_path) &&
      std::filesystem::exists(std::filesystem::path(model_path) / "tokenizer.json")) {
    tokenizer_path = (std::filesystem::path(model_path) / "tokenizer.json").string();
  }
  std::unique_ptr<formats::data::Tokenizer> tokenizer;
  if (!tokenizer_path.empty()) {
    auto t = formats::data::Tokenizer::FromFile(tokenizer_path);
    if (!t.ok()) {
      std::cerr << "error: --tokenizer: " << t.status().message() << "\n";
      return kExitBadInput;
    }
    tokenizer = std::move(*t);
  }
  if (!prompt_text.empty()) {
    if (tokenizer) {
      std::vector<int32_t> ids;
      if (absl::Status s = tokenizer->NewEncoder()->Encode(prompt_text, &ids); !s.ok()) {
        std::cerr << "error: --prompt: " << s.message() << "\n";
        return kExitBadInput;
      }
      prompt.assign(ids.begin(), ids.end());
    } else {
      for (unsigned char ch : prompt_text) prompt.push_back(ch);
    }
  }
  auto device = ParseDevice(device_text);
  if (!device.ok()) {
    std::cerr << "error: " << device.status().message() << "\n";
    return kExitBadInput;
  }
  if (threads > 0) at::set_num_threads(threads);
  auto loaded = parallel::LoadModelForInference(model_path, *device, lora);
  if (!loaded.ok()) {
    std::cerr << "error: " << loaded.status().message() << "\n";
    return kExitBadInput;
  }
  if (loaded->model->config().score_head) {
    std::cerr << "error: " << model_path << " is a reward model (a score head, no LM head): `tessera score` scores "
              << "with it\n";
    return kExitBadInput;
  }
  if (!prompt_text.empty() && !tokenizer && loaded->model->config().vocab < 256) {
    std::cerr << "error: --prompt: byte-level text needs a vocabulary of at least 256 tokens; this model has "
              << loaded->model->config().vocab << " (use --prompt-ids or --tokenizer)\n";
    return kExitBadInput;
  }
  if (given_file) return GenerateFile(*loaded, prompts_file, tokenizer.get(), o);
  const bool bytes = !prompt_text.empty() && !tokenizer;
  // With a tokenizer, each token's bytes as it comes (a character split over tokens completes later).
  auto text_of = [&](const std::vector<int32_t>& ids) -> std::string {
    auto text = tokenizer->Decode(ids);
    return text.ok() ? *text : "?";
  };
  // One completion streams its tokens as they come; several print each on its line when done.
  auto print = [&](int /*sample*/, int64_t t) {
    if (json || o.num_samples > 1) return;
    if (tokenizer) {
      std::cout << text_of({static_cast<int32_t>(t)}) << std::flush;
    } else if (bytes) {
      std::cout << static_cast<char>(t < 256 ? t : '?') << std::flush;
    } else {
      std::cout << t << " " << std::flush;
    }
  };
  at::Tensor logits;
  auto completions = parallel::Sample(*loaded->model, prompt, o, print, logits_out.empty() ? nullptr : &logits);
  if (!completions.ok()) {
    std::cerr << "error: " << completions.status().message() << "\n";
    return kExitBadInput;
  }
  if (!logits_out.empty()) {
    if (absl::Status s = parallel::SaveTensors(logits_out, {{"logits", logits}}); !s.ok()) {
      std::cerr << "error: --logits-out: " << s.message() << "\n";
      return kExitJobFailed;
    }
  }
  for (size_t i = 0; i < completions->size(); ++i) {
    const parallel::Completion& c = (*completions)[i];
    const std::vector<int32_t> ids(c.tokens.begin(), c.tokens.end());
    if (!json) {
      if (o.num_samples == 1) {
        std::cout << "\n";
      } else if (tokenizer) {
        std::cout << nlohmann::json(text::Utf8Lossy(text_of(ids))).dump() << "\n";
      } else {
        for (int64_t t : c.tokens) {
          if (bytes) {
            std::cout << static_cast<char>(t < 256 ? t : '?');
          } else {
            std::cout << t << " ";
          }
        }
        std::cout << "\n";
      }
      continue;
    }
    nlohmann::json line = {{"model", text::Utf8Lossy(loaded->source)},
                           {"prompt", prompt},
                           {"sample", i},
                           {"tokens", c.tokens},
                           {"logprobs", c.logprobs},
                           {"truncated", c.truncated}};
    // Invalid UTF-8 (a character cut by --max-new-tokens, or bytes a model strung together) becomes
    // U+FFFD, as the `tokenizers` library decodes it.
    if (tokenizer) line["text"] = text::Utf8Lossy(text_of(ids));
    std::cout << line.dump() << "\n";
  }
  return kExitOk;
}

}  // namespace
}  // namespace tessera::client

int main(int argc, char** argv) {
  try {
    return tessera::client::Main(argc, argv);
  } catch (const std::exception& e) {  // LibTorch's errors (memory, a device): a message, not an abort.
    std::cerr << "error: " << e.what() << "\n";
    return tessera::client::kExitJobFailed;
  }
}
