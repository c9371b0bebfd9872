// What the builtins' files (jinja_access.cc, jinja_filters.cc, jinja_globals.cc, jinja_operators.cc,
// jinja_strings.cc) share. Internal to formats/chat.
#ifndef TESSERA_FORMATS_CHAT_JINJA_BUILTINS_INTERNAL_H_
#define TESSERA_FORMATS_CHAT_JINJA_BUILTINS_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_value.h"

namespace tessera::chat {

constexpr size_t kMaxString = size_t{64} << 20;  // A string or list built by an operator.

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
std::vector<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit);
std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
// Argument `i` (or named `name`) as a string (an error naming it otherwise), an integer, a truth value.
absl::StatusOr<std::string> StringArg(const Args& a, size_t i, const char* name, const char* what);
int64_t IntArg(const Args& a, size_t i, const char* name, int64_t def);
bool BoolArg(const Args& a, size_t i, const char* name, bool def);
// The bound method `name` of a str, or nullopt.
std::optional<Value> StrMethod(const std::string& self, const std::string& name);

}  // namespace tessera::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_BUILTINS_INTERNAL_H_
