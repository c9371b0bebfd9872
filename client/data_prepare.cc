#include "client/data_prepare.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/document_reader.h"
#include "formats/data/indexed_dataset.h"
#include "formats/data/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tessera::client {

absl::StatusOr<int64_t> PrepareByteTokens(const std::string& input, const std::string& output) {
  std::ifstream in(input, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(input, ": cannot read: ", std::strerror(errno)));
  const std::string tmp = output + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat(output, ": cannot write: ", std::strerror(errno)));
  std::vector<char> buf(1 << 20);
  std::vector<uint16_t> tokens;
  int64_t count = 0;
  while (in) {
    in.read(buf.data(), buf.size());
    const std::streamsize n = in.gcount();
    tokens.resize(n);
    for (std::streamsize i = 0; i < n; ++i) tokens[i] = static_cast<uint8_t>(buf[i]);  // x86 is little-endian.
    out.write(reinterpret_cast<const char*>(tokens.data()), n * 2);
    count += n;
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(output, ": write failed"));
  if (std::rename(tmp.c_str(), output.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(output, ": rename failed: ", std::strerror(errno)));
  }
  if (count == 0) return absl::InvalidArgumentError(absl::StrCat(input, ": is empty"));
  return count;
}

namespace {

using formats::data::Tokenizer;

absl::StatusOr<int32_t> FindEos(const Tokenizer& tok, const PrepareOptions& o) {
  std::string name = o.eos_token;
  std::string source = "--eos-token";
  if (name.empty()) {
    const std::string config = (std::filesystem::path(o.tokenizer).parent_path() / "tokenizer_config.json").string();
    std::ifstream in(config);
    if (in) {
      nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.is_object() && j.contains("eos_token")) {
        const auto& e = j["eos_token"];
        if (e.is_string()) name = e.get<std::string>();
        if (e.is_object() && e.contains("content") && e["content"].is_string()) name = e["content"].get<std::string>();
        source = config + " (eos_token)";
      }
    }
  }
  if (name.empty()) {
    std::vector<std::string> found;
    for (const auto& a : tok.added_tokens()) {
      for (const char* eos : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"}) {
        if (a.special && a.content == eos) found.push_back(a.content);
      }
    }
    if (found.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--append-eos: ", found.empty() ? "no special token looks like an EOS" : "several special tokens look like an EOS",
          " and there is no tokenizer_config.json beside the tokenizer: name it with --eos-token"));
    }
    name = found[0];
    source = "the tokenizer's special tokens";
  }
  const int32_t id = tok.TokenId(name);
  if (id < 0) return absl::InvalidArgumentError(absl::StrCat("EOS token '", name, "' from ", source, " is not in the tokenizer"));
  return id;
}

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
}

// Encodes `docs` on `encoders.size()` threads into `ids` (one list per document). Returns the first
// document's error, named by its place.
absl::Status EncodeBatch(std::vector<std::unique_ptr<Tokenizer::Encoder>>& encoders, const std::vector<Document>& docs,
                         std::vector<std::vector<int32_t>>* ids) {
  ids->assign(docs.size(), {});
  std::vector<absl::Status> errors(docs.size());
  std::atomic<size_t> next{0};
  auto work = [&](Tokenizer::Encoder* enc) {
    for (size_t i; (i = next.fetch_add(1)) < docs.size();) errors[i] = enc->Encode(docs[i].text, &(*ids)[i]);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < encoders.size() && t < docs.size(); ++t) threads.emplace_back(work, encoders[t].get());
  work(encoders[0].get());
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!errors[i].ok()) return absl::InvalidArgumentError(absl::StrCat(docs[i].where, ": ", errors[i].message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrepareReport> PrepareTokenized(const PrepareOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto tok = Tokenizer::FromFile(o.tokenizer);
  if (!tok.ok()) return tok.status();
  int32_t eos = -1;
  if (o.append_eos) {
    auto id = FindEos(**tok, o);
    if (!id.ok()) return id.status();
    eos = *id;
  }
  auto reader = DocumentReader::Open(o.inputs, o.text_key);
  if (!reader.ok()) return reader.status();
  const formats::data::IndexedDtype dtype = formats::data::IndexedDtypeForVocab((*tok)->vocab_size());
  auto writer = formats::data::IndexedDatasetWriter::Create(o.output_prefix, dtype);
  if (!writer.ok()) return writer.status();
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::unique_ptr<Tokenizer::Encoder>> encoders;
  for (int t = 0; t < threads; ++t) encoders.push_back((*tok)->NewEncoder());

  const bool tty = isatty(STDERR_FILENO);
  auto last_print = start;
  PrepareReport report;
  report.dtype = formats::data::IndexedDtypeName(dtype);
  std::vector<Document> docs;
  std::vector<std::vector<int32_t>> ids;
  while (true) {
    docs.clear();
    auto n = (*reader)->Read(/*max_docs=*/65536, /*max_bytes=*/size_t{32} << 20, &docs);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    if (absl::Status s = EncodeBatch(encoders, docs, &ids); !s.ok()) return s;
    for (auto& d : ids) {
      if (eos >= 0) d.push_back(eos);
      if (absl::Status s = (*writer)->AddDocument(d); !s.ok()) return s;
    }
    report.documents += static_cast<int64_t>(docs.size());
    for (const auto& d : docs) report.bytes += d.text.size();
    const auto now = std::chrono::steady_clock::now();
    if (o.progress && now - last_print > std::chrono::seconds(tty ? 1 : 10)) {
      last_print = now;
      const double secs = std::chrono::duration<double>(now - start).count();
      const uint64_t done = (*reader)->bytes_read(), total = (*reader)->total_bytes();
      const double rate = done / std::max(secs, 1e-9);
      std::string line = absl::StrFormat("tokenizing: %d documents, %.1f MB, %.1f MB/s", report.documents,
                                         report.bytes / 1e6, rate / 1e6);
      if (total > done) {
        absl::StrAppendFormat(&line, ", %.0f%%, ETA %s", 100.0 * done / total, Duration((total - done) / rate));
      }
      std::cerr << (tty ? "\r" : "") << line << (tty ? "" : "\n") << std::flush;
    }
  }
  if (o.progress && tty) std::cerr << "\n";
  if (report.documents == 0) return absl::InvalidArgumentError("the inputs hold no documents");
  if (absl::Status s = (*writer)->Finish(); !s.ok()) return s;
  report.tokens = (*writer)->tokens();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

absl::Status TokenizeCommand(const std::string& tokenizer, const std::vector<std::string>& texts,
                             const std::vector<std::string>& inputs, const std::string& text_key, bool pieces,
                             bool match_special) {
  auto tok = Tokenizer::FromFile(tokenizer);
  if (!tok.ok()) return tok.status();
  auto made = (*tok)->NewEncoder(match_special);
  if (!made.ok()) return made.status();
  auto encoder = *std::move(made);
  std::vector<Document> docs;
  for (size_t i = 0; i < texts.size(); ++i) docs.push_back({texts[i], absl::StrCat("--text ", i + 1)});
  if (!inputs.empty()) {
    auto reader = DocumentReader::Open(inputs, text_key);
    if (!reader.ok()) return reader.status();
    while (true) {
      auto n = (*reader)->Read(SIZE_MAX, SIZE_MAX, &docs);
      if (!n.ok()) return n.status();
      if (*n == 0) break;
    }
  }
  std::vector<int32_t> ids;
  std::vector<std::string> words;
  for (const Document& d : docs) {
    if (pieces) {
      if (absl::Status s = encoder->Pieces(d.text, &words); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(d.where, ": ", s.message()));
      }
      std::cout << nlohmann::json(words).dump() << "\n";
      continue;
    }
    ids.clear();
    if (absl::Status s = encoder->Encode(d.text, &ids); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(d.where, ": ", s.message()));
    }
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&line, i ? ", " : "", ids[i]);
    std::cout << line << "]\n";
  }
  return absl::OkStatus();
}

}  // namespace tessera::client
