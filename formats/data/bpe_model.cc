#include "formats/data/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "formats/data/byte_level.h"

namespace tessera::formats::data {

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(const BpeModelOptions& options) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->ignore_merges_ = options.ignore_merges;
  m->fuse_unk_ = options.fuse_unk;
  int64_t max_id = -1;
  for (const auto& [token, id] : options.vocab) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("vocabulary token '", token, "' has negative id ", id));
    if (!m->vocab_.emplace(token, id).second) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary token '", token, "' appears twice"));
    }
    max_id = std::max<int64_t>(max_id, id);
  }
  m->tokens_.assign(max_id + 1, std::string());
  m->present_.assign(max_id + 1, false);
  for (const auto& [token, id] : options.vocab) {
    if (m->present_[id]) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary id ", id, " is given to two tokens"));
    }
    m->tokens_[id] = token;
    m->present_[id] = true;
    if (auto bytes = ByteLevelDecode(token); bytes.ok()) m->bytes_vocab_.emplace(*bytes, id);
  }
  for (int b = 0; b < 256; ++b) m->byte_id_[b] = m->Id(ByteLevelChar(static_cast<unsigned char>(b)));
  if (!options.unk_token.empty()) {
    m->unk_id_ = m->Id(options.unk_token);
    if (m->unk_id_ < 0) {
      return absl::InvalidArgumentError(absl::StrCat("unk_token '", options.unk_token, "' is not in the vocabulary"));
    }
  }
  m->merges_.reserve(options.merges.size());
  for (size_t rank = 0; rank < options.merges.size(); ++rank) {
    const auto& [left, right] = options.merges[rank];
    const int32_t a = m->Id(left), b = m->Id(right), joined = m->Id(left + right);
    if (a < 0 || b < 0 || joined < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merge ", rank, " ('", left, "' '", right, "'): '",
          a < 0 ? left : b < 0 ? right : left + right, "' is not in the vocabulary"));
    }
    // A merge listed twice takes its last rank, as in the `tokenizers` library's merge map.
    m->merges_[PairKey(a, b)] = MergeResult{static_cast<int32_t>(rank), joined};
  }
  return m;
}

const std::string* BpeModel::Token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(tokens_.size()) || !present_[id]) return nullptr;
  return &tokens_[id];
}

int32_t BpeModel::Id(std::string_view token) const {
  auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::Encode(std::string_view word, BpeCache* cache, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (word.size() == 1 && byte_id_[static_cast<unsigned char>(word[0])] >= 0) {
    ids->push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = bytes_vocab_.find(absl::string_view(word.data(), word.size()));
    if (it != bytes_vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  constexpr size_t kMaxCachedWord = 256;
  if (cache == nullptr || word.size() > kMaxCachedWord) {
    Merge(word, ids);
    return;
  }
  auto it = cache->words_.find(absl::string_view(word.data(), word.size()));
  if (it != cache->words_.end()) {
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = ids->size();
  Merge(word, ids);
  if (cache->words_.size() >= cache->capacity_) cache->words_.clear();
  cache->words_.emplace(std::string(word), std::vector<int32_t>(ids->begin() + first, ids->end()));
}

void BpeModel::Merge(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool live;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (unsigned char b : word) {
    int32_t id = byte_id_[b];
    if (id < 0) {
      if (unk_id_ < 0) continue;  // Dropped, as the library drops a character it cannot map.
      if (fuse_unk_ && !symbols.empty() && symbols.back().id == unk_id_) continue;
      id = unk_id_;
    }
    const int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  }
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push(Candidate{it->second.rank, pos, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& s = symbols[top.pos];
    if (!s.live || s.next < 0) continue;
    auto it = merges_.find(PairKey(s.id, symbols[s.next].id));
    if (it == merges_.end() || it->second.id != top.id) continue;  // Stale: a neighbour changed.
    Symbol& right = symbols[s.next];
    s.id = top.id;
    right.live = false;
    s.next = right.next;
    if (s.next >= 0) symbols[s.next].prev = top.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.live) ids->push_back(s.id);
  }
}

}  // namespace tessera::formats::data
