// `tessera generate --prompts-file FILE`: one prompt per line, a JSON object — {"prompt": "text"}
// (encoded by the tokenizer, else byte-level) or {"prompt_ids": [ids]} — its other members ignored.
// No torch.
#ifndef TESSERA_GENERATE_PROMPTS_FILE_H_
#define TESSERA_GENERATE_PROMPTS_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/data/tokenizer.h"

namespace tessera::client {

inline constexpr int64_t kMaxPromptsFileBytes = int64_t{1} << 30;

// The prompts of `path` (a regular file of at most kMaxPromptsFileBytes, at most `max_prompts` lines
// that are not blank) as ids below `vocab`; `tokenizer` may be null (text as bytes). InvalidArgument
// names the file, the line and the problem: not JSON, no prompt or both kinds, an empty prompt, an id
// that is not an integer in [0, vocab).
absl::StatusOr<std::vector<std::vector<int64_t>>> ReadPromptsFile(const std::string& path,
                                                                  const formats::data::Tokenizer* tokenizer,
                                                                  int64_t max_prompts, int64_t vocab);

}  // namespace tessera::client

#endif  // TESSERA_GENERATE_PROMPTS_FILE_H_
