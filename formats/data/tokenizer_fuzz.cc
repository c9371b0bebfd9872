#include "formats/data/tokenizer_fuzz.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/text/utf8.h"
#include "formats/data/byte_level.h"
#include "formats/data/pre_tokenizer.h"
#include "formats/data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::data {
namespace {

// Every byte, a few merges, Llama 3's Split regex, a non-special and a special added token.
Tokenizer::Encoder& TheEncoder(const Tokenizer** tokenizer) {
  static const Tokenizer* t = [] {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(static_cast<unsigned char>(b))] = b;
    const std::string sp = ByteLevelChar(' ');
    vocab[sp + "t"] = 256;
    vocab["he"] = 257;
    vocab[sp + "the"] = 258;
    nlohmann::json j = {
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"added_tokens",
         {{{"id", 259}, {"content", "<tool>"}, {"special", false}},
          {{"id", 260}, {"content", "<|eot|>"}, {"special", true}}}},
        {"model",
         {{"type", "BPE"},
          {"vocab", vocab},
          {"merges", {sp + " t", "h e", sp + "t he"}},
          {"ignore_merges", true}}}};
    auto tok = Tokenizer::FromJson(j.dump(), "fuzz.json");
    if (!tok.ok()) {
      std::fprintf(stderr, "fuzz tokenizer: %s\n", std::string(tok.status().message()).c_str());
      std::abort();
    }
    return tok->release();
  }();
  static thread_local std::unique_ptr<Tokenizer::Encoder> encoder = t->NewEncoder();
  *tokenizer = t;
  return *encoder;
}

}  // namespace

std::string CheckTokenizerOn(std::string_view input) {
  const Tokenizer* t;
  Tokenizer::Encoder& enc = TheEncoder(&t);
  std::vector<int32_t> ids;
  const absl::Status s = enc.Encode(input, &ids);
  const int64_t bad = text::FirstInvalidUtf8(input);
  if (bad >= 0) {
    const std::string want = absl::StrCat("byte ", bad, ": invalid UTF-8");
    if (s.ok() || s.message() != want) return absl::StrCat("invalid input at byte ", bad, ": got '", s.ToString(), "'");
    return "";
  }
  if (!s.ok()) return absl::StrCat("valid UTF-8 refused: ", s.ToString());
  for (int32_t id : ids) {
    if (id < 0 || id >= t->vocab_size() || id == 260) return absl::StrCat("id ", id, " out of place");
  }
  auto back = t->Decode(ids);
  if (!back.ok()) return absl::StrCat("decode failed: ", back.status().ToString());
  if (*back != input) return "decode(encode(x)) != x";
  return "";
}

}  // namespace tessera::formats::data

#ifdef TESSERA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string broke =
      tessera::formats::data::CheckTokenizerOn(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!broke.empty()) {
    std::fprintf(stderr, "%s\n", broke.c_str());
    std::abort();
  }
  return 0;
}
#endif
