// Documents for `tessera data prepare --tokenizer`: each INPUT is a .jsonl file (one document per
// line, the string field `text_key` of a JSON object), `-` (JSON lines on stdin), or any other file
// (one document: the whole file). Documents come in order: inputs in the order given, lines in order.
#ifndef TESSERA_CLIENT_DOCUMENT_READER_H_
#define TESSERA_CLIENT_DOCUMENT_READER_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::client {

struct Document {
  std::string text;
  std::string where;  // "FILE" or "FILE:LINE", for error messages.
};

class DocumentReader {
 public:
  // Fails naming the first input that does not exist.
  static absl::StatusOr<std::unique_ptr<DocumentReader>> Open(std::vector<std::string> inputs, std::string text_key);

  // Appends up to `max_docs` documents or about `max_bytes` of text to `out`; returns how many it
  // appended (0 at the end). Fails on a line that is not a JSON object with a string `text_key`.
  absl::StatusOr<size_t> Read(size_t max_docs, size_t max_bytes, std::vector<Document>* out);

  // Sum of the input files' sizes (stdin counts 0): the progress bar's 100%.
  uint64_t total_bytes() const { return total_bytes_; }
  // Bytes consumed so far.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  DocumentReader() = default;
  absl::Status NextInput();

  std::vector<std::string> inputs_;
  std::string text_key_;
  size_t next_input_ = 0;
  std::string current_;
  bool jsonl_ = false;
  std::ifstream file_;
  std::istream* stream_ = nullptr;
  int64_t line_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t bytes_read_ = 0;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DOCUMENT_READER_H_
