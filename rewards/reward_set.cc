#include "rewards/reward_set.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::rewards {

absl::StatusOr<std::unique_ptr<RewardSet>> RewardSet::Create(std::vector<RewardFunctionOptions> functions,
                                                             ModelScorer scorer) {
  if (functions.empty()) return absl::InvalidArgumentError("rewards: there is no reward function");
  std::set<std::string> names;
  std::vector<Function> made;
  for (RewardFunctionOptions& o : functions) {
    auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat("reward ", o.name, ": ", why)); };
    if (o.name.empty()) return absl::InvalidArgumentError("rewards: a reward function has no name");
    if (!names.insert(o.name).second) return bad("another reward function has the same name");
    if (!std::isfinite(o.weight)) return bad(absl::StrCat("weight ", o.weight, " is not finite"));
    Function f;
    switch (o.kind) {
      case RewardKind::kExactAnswer:
        if (o.field.empty()) return bad("exact_answer needs the field holding the answer");
        break;
      case RewardKind::kRegex: {
        auto regex = RegexReward::Create(o.pattern);
        if (!regex.ok()) return bad(std::string(regex.status().message()));
        f.regex = *std::move(regex);
        break;
      }
      case RewardKind::kLength:
        if (auto s = SoftOverlongPunishment(0, o.max_tokens, o.soft_cache); !s.ok()) return bad(std::string(s.status().message()));
        break;
      case RewardKind::kProgram: {
        o.program.name = o.name;
        auto program = RewardProgram::Start(o.program);
        if (!program.ok()) return bad(std::string(program.status().message()));
        f.program = *std::move(program);
        break;
      }
      case RewardKind::kModel:
        if (!scorer) return bad("a reward model needs a scorer (the trainer's)");
        break;
    }
    f.options = std::move(o);
    made.push_back(std::move(f));
  }
  return std::unique_ptr<RewardSet>(new RewardSet(std::move(made), std::move(scorer)));
}

absl::StatusOr<std::vector<std::vector<double>>> RewardSet::Score(const std::vector<ScoredCompletion>& batch) {
  std::vector<std::vector<double>> out;
  for (size_t index = 0; index < functions_.size(); ++index) {
    Function& f = functions_[index];
    const RewardFunctionOptions& o = f.options;
    std::vector<double> scores;
    scores.reserve(batch.size());
    auto at = [&](size_t c, const absl::Status& s) {
      return absl::Status(s.code(), absl::StrCat("reward ", o.name, ": completion ", c, ": ", s.message()));
    };
    if (o.kind == RewardKind::kProgram) {
      std::vector<RewardQuery> queries;
      queries.reserve(batch.size());
      for (const ScoredCompletion& c : batch) queries.push_back({c.prompt, c.completion, c.fields});
      auto got = f.program->Score(queries);
      if (!got.ok()) return got.status();  // The program's errors name it, the answer and its stderr.
      out.push_back(*std::move(got));
      continue;
    }
    if (o.kind == RewardKind::kModel) {
      auto got = scorer_(index, batch);
      if (!got.ok()) return absl::Status(got.status().code(), absl::StrCat("reward ", o.name, ": ", got.status().message()));
      if (got->size() != batch.size()) {
        return absl::InternalError(absl::StrCat("reward ", o.name, ": ", got->size(), " scores for ", batch.size(),
                                                " completions"));
      }
      for (size_t c = 0; c < got->size(); ++c) {
        if (!std::isfinite((*got)[c])) {
          return at(c, absl::InvalidArgumentError(absl::StrCat("the reward model's score is ", (*got)[c])));
        }
      }
      out.push_back(*std::move(got));
      continue;
    }
    for (size_t c = 0; c < batch.size(); ++c) {
      const ScoredCompletion& q = batch[c];
      absl::StatusOr<double> r = 0.0;
      switch (o.kind) {
        case RewardKind::kExactAnswer: {
          if (!q.fields.is_object() || !q.fields.contains(o.field)) {
            return at(c, absl::InvalidArgumentError(
                             absl::StrCat("its prompt's row has no field \"", o.field, "\" (the answer to compare with)")));
          }
          r = ExactAnswerReward(q.completion, q.fields[o.field]);
          break;
        }
        case RewardKind::kRegex:
          r = f.regex->Score(q.completion);
          break;
        case RewardKind::kLength:
          r = SoftOverlongPunishment(q.completion_tokens, o.max_tokens, o.soft_cache);
          break;
        case RewardKind::kProgram:
        case RewardKind::kModel:
          break;  // Above.
      }
      if (!r.ok()) return at(c, r.status());
      scores.push_back(*r);
    }
    out.push_back(std::move(scores));
  }
  return out;
}

std::vector<std::string> RewardSet::names() const {
  std::vector<std::string> out;
  for (const Function& f : functions_) out.push_back(f.options.name);
  return out;
}

std::vector<double> RewardSet::weights() const {
  std::vector<double> out;
  for (const Function& f : functions_) out.push_back(f.options.weight);
  return out;
}

}  // namespace tessera::rewards
