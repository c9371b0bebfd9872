#include "formats/data/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/text/utf8.h"
#include "formats/data/byte_level.h"
#include "formats/data/nfc.h"
#include "formats/data/onig_pattern.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::data {
namespace {

using Json = nlohmann::json;

// Collects the first problem, named by file and JSON path.
class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}
  absl::Status status() const { return status_; }
  bool ok() const { return status_.ok(); }
  void Fail(const std::string& field, const std::string& why) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(name_, ": ", field, ": ", why));
  }
  void Fail(const std::string& field, const absl::Status& s) { Fail(field, std::string(s.message())); }

  bool Bool(const Json& j, const std::string& key, const std::string& field, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) {
      Fail(field + "." + key, "must be true or false");
      return fallback;
    }
    return j[key].get<bool>();
  }
  std::string String(const Json& j, const std::string& key, const std::string& field) {
    if (!j.contains(key) || j[key].is_null()) return "";
    if (!j[key].is_string()) {
      Fail(field + "." + key, "must be a string");
      return "";
    }
    return j[key].get<std::string>();
  }

 private:
  std::string name_;
  absl::Status status_;
};

// A literal string as a PCRE2 pattern.
std::string EscapeLiteral(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Regex>> CompileOnig(std::string_view pattern) {
  auto translated = OnigToPcre2(pattern);
  if (!translated.ok()) return translated.status();
  auto regex = Regex::Compile(*translated);
  if (!regex.ok()) return regex.status();
  return std::shared_ptr<const Regex>(std::move(*regex));
}

void ReadStep(Reader& r, const Json& j, const std::string& field, std::vector<PreTokenizerStep>* steps) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    r.Fail(field, "must be an object with a \"type\"");
    return;
  }
  const std::string type = j["type"];
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      r.Fail(field + ".pretokenizers", "must be a list");
      return;
    }
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
      ReadStep(r, j["pretokenizers"][i], absl::StrCat(field, ".pretokenizers[", i, "]"), steps);
    }
    return;
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = r.Bool(j, "add_prefix_space", field, true);
    if (r.Bool(j, "use_regex", field, true)) {
      auto regex = CompileOnig(kGpt2SplitPattern);
      if (!regex.ok()) return r.Fail(field, regex.status());
      step.regex = *regex;
    }
  } else if (type == "Split") {
    const Json& pattern = j.contains("pattern") ? j["pattern"] : Json();
    std::string onig;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      onig = pattern["Regex"];
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      onig = EscapeLiteral(pattern["String"].get<std::string>());
    } else {
      return r.Fail(field + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
    }
    auto regex = CompileOnig(onig);
    if (!regex.ok()) return r.Fail(field + ".pattern", regex.status());
    step.regex = *regex;
    const std::string behavior = r.String(j, "behavior", field);
    if (behavior == "Isolated") {
      step.behavior = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      step.behavior = SplitBehavior::kRemoved;
    } else {
      return r.Fail(field + ".behavior", absl::StrCat("'", behavior, "' is not supported (Isolated, Removed)"));
    }
    step.invert = r.Bool(j, "invert", field, false);
  } else {
    return r.Fail(field + ".type",
                  absl::StrCat("'", type, "' is not supported (ByteLevel, Split, Sequence: byte-level BPE only)"));
  }
  steps->push_back(std::move(step));
}

// None, NFC, or a Sequence of at most one NFC.
Normalization ReadNormalizer(Reader& r, const Json& j) {
  if (j.is_null()) return Normalization::kNone;
  if (j.is_object() && j.value("type", "") == "NFC") return Normalization::kNfc;
  if (j.is_object() && j.value("type", "") == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
    const Json& list = j["normalizers"];
    if (list.empty()) return Normalization::kNone;
    if (list.size() == 1 && list[0].is_object() && list[0].value("type", "") == "NFC") return Normalization::kNfc;
  }
  r.Fail("normalizer", absl::StrCat(j.is_object() ? absl::StrCat("'", j.value("type", "?"), "'") : "this value",
                                    " is not supported (none or NFC)"));
  return Normalization::kNone;
}

void ReadModel(Reader& r, const Json& j, BpeModelOptions* options) {
  if (!j.is_object()) return r.Fail("model", "must be an object");
  if (j.contains("type") && j["type"] != "BPE") {
    return r.Fail("model.type", absl::StrCat(j["type"].dump(), " is not supported (BPE only)"));
  }
  if (j.contains("dropout") && !j["dropout"].is_null() && !(j["dropout"].is_number() && j["dropout"] == 0)) {
    return r.Fail("model.dropout", "must be null: BPE dropout is random, and tessera's ids are reproducible");
  }
  if (r.Bool(j, "byte_fallback", "model", false)) {
    return r.Fail("model.byte_fallback", "true is not supported (a SentencePiece-style tokenizer, not byte-level BPE)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!r.String(j, key, "model").empty()) {
      return r.Fail(absl::StrCat("model.", key), "is not supported (byte-level BPE has none)");
    }
  }
  options->ignore_merges = r.Bool(j, "ignore_merges", "model", false);
  options->unk_token = r.String(j, "unk_token", "model");
  options->fuse_unk = r.Bool(j, "fuse_unk", "model", false);
  if (!j.contains("vocab") || !j["vocab"].is_object()) return r.Fail("model.vocab", "must be an object {token: id}");
  for (const auto& [token, id] : j["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return r.Fail("model.vocab", absl::StrCat("token '", token, "': id ", id.dump(), " is not an integer in [0, 2^31)"));
    }
    options->vocab.emplace_back(token, id.get<int32_t>());
  }
  if (!j.contains("merges") || !j["merges"].is_array()) return r.Fail("model.merges", "must be a list");
  const Json& merges = j["merges"];
  options->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {  // The older form: "left right".
      const std::string s = m;
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return r.Fail(absl::StrCat("model.merges[", i, "]"), absl::StrCat("'", s, "' is not two tokens separated by a space"));
      }
      options->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      options->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return r.Fail(absl::StrCat("model.merges[", i, "]"), "must be \"left right\" or [\"left\", \"right\"]");
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the tokenizer file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return FromJson(ss.str(), path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view text, const std::string& name) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a JSON object (a transformers tokenizer.json)"));
  }
  Reader r(name);
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->normalization_ = ReadNormalizer(r, j.contains("normalizer") ? j["normalizer"] : Json());
  std::vector<PreTokenizerStep> steps;
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null()) {
    r.Fail("pre_tokenizer", "is missing: a byte-level tokenizer has a ByteLevel pre-tokenizer");
  } else {
    ReadStep(r, j["pre_tokenizer"], "pre_tokenizer", &steps);
  }
  if (r.ok()) {
    int byte_level = 0;
    for (const auto& s : steps) byte_level += s.kind == PreTokenizerStep::Kind::kByteLevel;
    if (byte_level != 1 || steps.back().kind != PreTokenizerStep::Kind::kByteLevel) {
      r.Fail("pre_tokenizer", "must end in one ByteLevel step (byte-level BPE), with only Split steps before it");
    }
  }
  t->pre_tokenizer_ = PreTokenizer(std::move(steps));
  BpeModelOptions model;
  if (r.ok()) ReadModel(r, j.contains("model") ? j["model"] : Json(), &model);
  if (!r.ok()) return r.status();
  auto bpe = BpeModel::Create(model);
  if (!bpe.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": model: ", bpe.status().message()));
  t->model_ = std::move(*bpe);
  t->vocab_size_ = t->model_->size();

  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    const Json& added = j["added_tokens"];
    if (!added.is_array()) return absl::InvalidArgumentError(absl::StrCat(name, ": added_tokens: must be a list"));
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string field = absl::StrCat("added_tokens[", i, "]");
      const Json& a = added[i];
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
          a["id"].get<int64_t>() > INT32_MAX || !a.contains("content") || !a["content"].is_string() ||
          a["content"].get<std::string>().empty()) {
        r.Fail(field, "must have an integer \"id\" in [0, 2^31) and a non-empty \"content\"");
        break;
      }
      AddedToken token{a["id"].get<int32_t>(), a["content"].get<std::string>(), r.Bool(a, "special", field, false)};
      token.normalized = r.Bool(a, "normalized", field, !token.special);
      if (token.special) {
        for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
          if (r.Bool(a, flag, field, false) && t->special_flag_error_.empty()) {
            t->special_flag_error_ = absl::StrCat(name, ": ", field, ".", flag,
                                                  ": true is not supported when special tokens are matched in text");
          }
        }
      } else {
        for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
          if (r.Bool(a, flag, field, false)) r.Fail(absl::StrCat(field, ".", flag), "true is not supported for a non-special token");
        }
        if (text::FirstInvalidUtf8(token.content) >= 0) r.Fail(field + ".content", "is not valid UTF-8");
      }
      t->added_.push_back(std::move(token));
    }
  }
  if (!r.ok()) return r.status();
  for (auto& m : t->matchable_) m.resize(256);
  for (auto& m : t->matchable_with_special_) m.resize(256);
  for (const AddedToken& a : t->added_) {
    t->vocab_size_ = std::max<int64_t>(t->vocab_size_, int64_t{a.id} + 1);
    t->added_by_id_[a.id] = &a;
    if (!a.special) t->matchable_[a.normalized][static_cast<unsigned char>(a.content[0])].push_back(&a);
    t->matchable_with_special_[a.normalized][static_cast<unsigned char>(a.content[0])].push_back(&a);
  }
  for (auto* tables : {&t->matchable_, &t->matchable_with_special_}) {
    for (auto& m : *tables) {
      for (auto& list : m) {
        std::stable_sort(list.begin(), list.end(),
                         [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
      }
    }
  }
  return t;
}

std::unique_ptr<Tokenizer::Encoder> Tokenizer::NewEncoder() const {
  return std::unique_ptr<Encoder>(new Encoder(this, /*match_special=*/false));
}

absl::StatusOr<std::unique_ptr<Tokenizer::Encoder>> Tokenizer::NewEncoder(bool match_special) const {
  if (match_special && !special_flag_error_.empty()) return absl::InvalidArgumentError(special_flag_error_);
  return std::unique_ptr<Encoder>(new Encoder(this, match_special));
}

Tokenizer::Encoder::Encoder(const Tokenizer* tokenizer, bool match_special)
    : tokenizer_(tokenizer), match_special_(match_special), state_(tokenizer->pre_tokenizer_.NewState()) {}

absl::Status Tokenizer::Encoder::Encode(std::string_view text, std::vector<int32_t>* ids) {
  if (const int64_t bad = text::FirstInvalidUtf8(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte ", bad, ": invalid UTF-8"));
  }
  return SplitAtAdded(text, /*normalized=*/false, ids, [&](std::string_view raw) {
    if (tokenizer_->normalization_ == Normalization::kNone) {
      return SplitAtAdded(raw, /*normalized=*/true, ids, [&](std::string_view s) { return EncodeSegment(s, ids); });
    }
    const std::string normal = Nfc(raw);
    return SplitAtAdded(normal, /*normalized=*/true, ids, [&](std::string_view s) { return EncodeSegment(s, ids); });
  });
}

absl::Status Tokenizer::Encoder::EncodeWithOffsets(std::string_view text, std::vector<int32_t>* ids,
                                                   std::vector<std::pair<size_t, size_t>>* offsets) {
  if (const int64_t bad = text::FirstInvalidUtf8(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte ", bad, ": invalid UTF-8"));
  }
  offsets->resize(ids->size(), {0, 0});  // Ids already there are not ours.
  // Split as Encode does; a piece's place is its view's distance from the start of its text.
  // SplitAtAdded appends an added token's id just before it hands over the piece that follows it.
  return SplitAtAdded(text, /*normalized=*/false, ids, [&](std::string_view raw) -> absl::Status {
    const size_t raw_begin = static_cast<size_t>(raw.data() - text.data());
    while (offsets->size() < ids->size()) {
      const AddedToken* a = tokenizer_->added_by_id_.at((*ids)[offsets->size()]);
      offsets->push_back({raw_begin - a->content.size(), raw_begin});
    }
    // The normalised text, and for each of its bytes the raw range it came from.
    std::string normal;
    std::vector<std::pair<size_t, size_t>> from;
    if (tokenizer_->normalization_ == Normalization::kNone) {
      normal = std::string(raw);
      for (size_t i = 0; i < raw.size(); ++i) from.push_back({raw_begin + i, raw_begin + i + 1});
    } else {
      // NFC in runs that start at an ASCII character: such a character never composes with what
      // precedes it, so the runs normalise independently.
      for (size_t b = 0; b < raw.size();) {
        size_t e = b + 1;
        while (e < raw.size() && static_cast<unsigned char>(raw[e]) >= 0x80) ++e;
        const std::string_view run = raw.substr(b, e - b);
        const std::string n = Nfc(run);
        // A rewritten run keeps its leading ASCII character apart when that one did not compose.
        const bool lead_apart = n != run && !n.empty() && n[0] == run[0] && Nfc(run.substr(1)) == n.substr(1);
        for (size_t i = 0; i < n.size(); ++i) {
          if (n == run || (lead_apart && i == 0)) {
            from.push_back({raw_begin + b + i, raw_begin + b + i + 1});
          } else {
            from.push_back({raw_begin + b + (lead_apart ? 1 : 0), raw_begin + e});
          }
        }
        normal += n;
        b = e;
      }
    }
    std::vector<std::pair<size_t, size_t>> local;  // Ranges in `normal`.
    const size_t first = ids->size();
    absl::Status s = SplitAtAdded(normal, /*normalized=*/true, ids, [&](std::string_view seg) -> absl::Status {
      const size_t seg_begin = static_cast<size_t>(seg.data() - normal.data());
      while (first + local.size() < ids->size()) {
        const AddedToken* a = tokenizer_->added_by_id_.at((*ids)[first + local.size()]);
        local.push_back({seg_begin - a->content.size(), seg_begin});
      }
      return EncodeSegmentAt(seg, seg_begin, ids, &local);
    });
    if (!s.ok()) return s;
    if (first + local.size() != ids->size()) return absl::InternalError("token offsets out of step with the ids");
    for (const auto& [b, e] : local) offsets->push_back({from[b].first, from[e - 1].second});
    return absl::OkStatus();
  });
}

absl::Status Tokenizer::Encoder::EncodeSegmentAt(std::string_view segment, size_t base, std::vector<int32_t>* ids,
                                                 std::vector<std::pair<size_t, size_t>>* offsets) {
  if (absl::Status s = tokenizer_->pre_tokenizer_.Split(segment, state_.get(), &pieces_); !s.ok()) return s;
  size_t cursor = 0;  // In `segment`.
  for (const std::string& piece : pieces_) {
    // Where the piece lies: at the cursor; or with a space the pre-tokenizer put in front of it; or
    // further on, past text a Split step removed.
    size_t at = cursor, added_space = 0;
    if (segment.compare(cursor, piece.size(), piece) != 0) {
      if (!piece.empty() && piece[0] == ' ' && segment.compare(cursor, piece.size() - 1, std::string_view(piece).substr(1)) == 0) {
        added_space = 1;
      } else {
        at = segment.find(piece, cursor);
        if (at == std::string_view::npos) return absl::InternalError("a pre-tokenizer piece is not in its text");
      }
    }
    const size_t first = ids->size();
    tokenizer_->model_->Encode(piece, &cache_, ids);
    size_t pos = 0;  // In `piece`.
    for (size_t k = first; k < ids->size(); ++k) {
      // A vocabulary token's bytes: one per character of its byte-level spelling (no decoding needed).
      size_t n = 0;
      if (const std::string* token = tokenizer_->model_->Token((*ids)[k])) {
        for (unsigned char c : *token) n += (c & 0xc0) != 0x80;
      }
      // Piece byte p is segment byte at + p - added_space (the added space maps to the token's start).
      const size_t b = at + (pos > added_space ? pos - added_space : 0);
      const size_t e = at + (pos + n > added_space ? pos + n - added_space : 0);
      offsets->push_back({base + b, base + std::max(b, e)});
      pos += n;
    }
    cursor = at + piece.size() - added_space;
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::Encoder::SplitAtAdded(std::string_view text, bool normalized, std::vector<int32_t>* ids,
                                              const std::function<absl::Status(std::string_view)>& piece) {
  const auto& matchable = (match_special_ ? tokenizer_->matchable_with_special_ : tokenizer_->matchable_)[normalized];
  size_t segment = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* a : matchable[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, a->content.size(), a->content) == 0) {
        hit = a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (absl::Status s = piece(text.substr(segment, i - segment)); !s.ok()) return s;
    ids->push_back(hit->id);
    i += hit->content.size();
    segment = i;
  }
  return piece(text.substr(segment));
}

absl::Status Tokenizer::Encoder::Pieces(std::string_view text, std::vector<std::string>* pieces) {
  if (const int64_t bad = text::FirstInvalidUtf8(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte ", bad, ": invalid UTF-8"));
  }
  if (absl::Status s = tokenizer_->pre_tokenizer_.Split(text, state_.get(), pieces); !s.ok()) return s;
  for (std::string& piece : *pieces) piece = ByteLevelEncode(piece);
  return absl::OkStatus();
}

absl::Status Tokenizer::Encoder::EncodeSegment(std::string_view segment, std::vector<int32_t>* ids) {
  if (absl::Status s = tokenizer_->pre_tokenizer_.Split(segment, state_.get(), &pieces_); !s.ok()) return s;
  for (const std::string& piece : pieces_) tokenizer_->model_->Encode(piece, &cache_, ids);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      out += it->second->content;
      continue;
    }
    const std::string* token = model_->Token(id);
    if (token == nullptr) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the tokenizer"));
    auto bytes = ByteLevelDecode(*token);
    if (!bytes.ok()) return bytes.status();
    out += *bytes;
  }
  return out;
}

int32_t Tokenizer::TokenId(std::string_view text) const {
  for (const AddedToken& a : added_) {
    if (a.content == text) return a.id;
  }
  return model_->Id(ByteLevelEncode(text));
}

}  // namespace tessera::formats::data
