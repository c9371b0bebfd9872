// `tessera data prepare`: text -> training data.
//   Without a tokenizer: one input file -> a flat file of byte-level tokens (uint16, vocab 256).
//   With --tokenizer tokenizer.json: documents (see document_reader.h) -> a Megatron indexed dataset
//   OUT_PREFIX.bin + OUT_PREFIX.idx (uint16 when the vocabulary fits, else int32), encoded on
//   several threads, written under temporary names and renamed at the end.
// `tessera data tokenize`: the ids of texts, one JSON list per document, for checking a tokenizer.
#ifndef TESSERA_CLIENT_DATA_PREPARE_H_
#define TESSERA_CLIENT_DATA_PREPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::client {

// Writes one little-endian uint16 per byte of `input` to `output`; returns the token count.
absl::StatusOr<int64_t> PrepareByteTokens(const std::string& input, const std::string& output);

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::string tokenizer;       // A transformers tokenizer.json.
  std::string text_key = "text";
  bool append_eos = false;     // End every document with the EOS token.
  std::string eos_token;       // Its text; default: tokenizer_config.json's eos_token beside the
                               // tokenizer, else the one special token named like an EOS.
  int threads = 0;             // 0: one per core.
  bool progress = true;        // A progress line on stderr (documents, MB/s, ETA).
};

struct PrepareReport {
  int64_t documents = 0;
  int64_t tokens = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  std::string dtype;
};

absl::StatusOr<PrepareReport> PrepareTokenized(const PrepareOptions& options);

// Prints the ids of each text (or of each INPUT's documents) as a JSON list per line; with `pieces`,
// the pre-tokenizer's pieces (byte-level alphabet) instead.
absl::Status TokenizeCommand(const std::string& tokenizer, const std::vector<std::string>& texts,
                             const std::vector<std::string>& inputs, const std::string& text_key,
                             bool pieces = false, bool match_special = false);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DATA_PREPARE_H_
