// The records of JSON-lines inputs, for the commands that read conversations (data render-chat,
// data prepare --chat): each non-blank line a JSON object, keys in their order.
#ifndef TESSERA_CLIENT_JSONL_RECORDS_H_
#define TESSERA_CLIENT_JSONL_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace tessera::client {

// Limits on one line's JSON (refused with the line's place and the limit).
inline constexpr int64_t kMaxJsonKeys = 10000;       // Keys of one object.
inline constexpr int64_t kMaxJsonLineKeys = 100000;  // Keys of all the objects of one line.
inline constexpr size_t kMaxJsonDepth = 256;    // Arrays and objects nested.

// Calls `record` with each record of `inputs` (.jsonl files; "-" is stdin) in order and its place
// "FILE:LINE: " (for the caller's errors); stops at the first error, `record`'s or a line's ("FILE:LINE:
// not valid JSON", "... not a JSON object", "... an object with more than 10000 keys", "... more than
// 100000 keys in one line", "... nested deeper than 256"); a line is checked against the limits in one
// linear pass before it is parsed.
absl::Status ForEachJsonRecord(
    const std::vector<std::string>& inputs,
    const std::function<absl::Status(const nlohmann::ordered_json& record, const std::string& where)>& record);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_JSONL_RECORDS_H_
