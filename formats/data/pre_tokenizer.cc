#include "formats/data/pre_tokenizer.h"

namespace tessera::formats::data {

std::unique_ptr<PreTokenizer::State> PreTokenizer::NewState() const {
  auto state = std::make_unique<State>();
  for (const auto& step : steps_) state->matchers.push_back(step.regex ? step.regex->NewMatcher() : nullptr);
  return state;
}

absl::Status PreTokenizer::Split(std::string_view text, State* state, std::vector<std::string>* pieces) const {
  pieces->clear();
  if (text.empty()) return absl::OkStatus();
  pieces->emplace_back(text);
  std::vector<std::string> next;
  for (size_t k = 0; k < steps_.size(); ++k) {
    const PreTokenizerStep& step = steps_[k];
    next.clear();
    for (std::string& piece : *pieces) {
      if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.add_prefix_space && piece[0] != ' ') {
        piece.insert(piece.begin(), ' ');
      }
      if (step.regex == nullptr) {
        next.push_back(std::move(piece));
        continue;
      }
      state->spans.clear();
      if (absl::Status s = state->matchers[k]->FindAll(piece, &state->spans); !s.ok()) return s;
      // Matches and the gaps between them, in order; `keep` says whether each survives.
      const bool keep_matches = step.behavior == SplitBehavior::kIsolated || step.invert;
      const bool keep_gaps = step.behavior == SplitBehavior::kIsolated || !step.invert;
      size_t at = 0;
      for (const auto& [begin, end] : state->spans) {
        if (begin > at && keep_gaps) next.emplace_back(piece, at, begin - at);
        if (keep_matches) next.emplace_back(piece, begin, end - begin);
        at = end;
      }
      if (at < piece.size() && keep_gaps) next.emplace_back(piece, at, piece.size() - at);
    }
    pieces->swap(next);
  }
  return absl::OkStatus();
}

}  // namespace tessera::formats::data
