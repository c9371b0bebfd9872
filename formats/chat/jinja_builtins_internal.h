// What the builtins' files (jinja_access.cc, jinja_filters.cc, jinja_globals.cc, jinja_operators.cc,
// jinja_strings.cc) share. Internal to formats/chat.
#ifndef TESSERA_FORMATS_CHAT_JINJA_BUILTINS_INTERNAL_H_
#define TESSERA_FORMATS_CHAT_JINJA_BUILTINS_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_budget.h"
#include "formats/chat/jinja_value.h"

namespace tessera::formats::chat {

// The builtins charge the rendering's budget (jinja_budget.h) before they work: a step per item they
// visit, SpendItems for the items they make, strings by their bytes; a string is checked against the
// limit of one value as it is built, not after.

absl::Status Err(const std::string& what);  // InvalidArgument.
// len(): code points of a str, items of a list or dict; 0 otherwise.
int64_t Length(const Value& v);
// Python's ordering (numbers, strings, lists): −1, 0, 1; an error for other types.
absl::StatusOr<int> Compare(const Value& a, const Value& b, int level = 0);
// `x in container`.
absl::StatusOr<bool> Contains(const Value& container, const Value& x);
// The (key, value) tuple of dict.items().
Value Pair(const std::string& k, const Value& v);
// Python's str.split(sep, maxsplit) (sep undefined or None: runs of whitespace) and str.replace.
absl::StatusOr<std::vector<Value>> Split(const std::string& s, const Value& sep, int64_t maxsplit);
absl::StatusOr<std::string> Replace(const std::string& s, const std::string& from, const std::string& to,
                                    int64_t count);
// Calls `line` with each line of `s` as str.splitlines() cuts them at "\n", "\r" and "\r\n" (none after
// a final line break); stops at the first error and returns it.
absl::Status ForEachLine(std::string_view s, const std::function<absl::Status(std::string_view)>& line);
// The first occurrence of `sub` in `s` at or after `from` (npos: none), and the last one, in time
// linear in both (glibc's memmem: two-way), where std::string::find takes |s| × |sub| at worst.
size_t FindIn(std::string_view s, std::string_view sub, size_t from = 0);
size_t RFindIn(std::string_view s, std::string_view sub);
// `*out` += `piece`, or the budget's error when the result would pass the limit of one string.
absl::Status AppendChecked(std::string* out, std::string_view piece);
// Python's int(f) for a float that fits int64; an error otherwise (inf, nan, 1e300).
absl::StatusOr<int64_t> FloatToInt(double f);
// Argument `i` (or named `name`) as a string (an error naming it otherwise), an integer, a truth value.
absl::StatusOr<std::string> StringArg(const Args& a, size_t i, const char* name, const char* what);
int64_t IntArg(const Args& a, size_t i, const char* name, int64_t def);
bool BoolArg(const Args& a, size_t i, const char* name, bool def);
// The bound method `name` of a str, or nullopt.
std::optional<Value> StrMethod(const std::string& self, const std::string& name);

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_BUILTINS_INTERNAL_H_
