// What a chat template can call: Jinja's filters and tests, the Python methods of str, dict and list
// that templates use (dict.items(), str.strip(), ...), attribute and item lookup as Jinja's sandbox
// does them (a missing one is undefined), and the globals transformers provides (raise_exception,
// strftime_now) besides Jinja's (range, namespace, dict). The sandbox is immutable, as transformers'
// ImmutableSandboxedEnvironment: list.append and the like are refused. An unknown filter, test or
// method is an error that names it.
#ifndef TESSERA_FORMATS_CHAT_JINJA_BUILTINS_H_
#define TESSERA_FORMATS_CHAT_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "formats/chat/jinja_value.h"

namespace tessera::formats::chat {

// obj.name: a dict's key (or its method, for items/keys/values/get), a str's method, a namespace's
// attribute; undefined when there is none. Reading an attribute of undefined is an error.
absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// obj[key]: a dict's key, a list's or str's index (negative from the end); else as GetAttr for a
// string key; undefined when missing.
absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
// obj[start:stop:step] (absent parts undefined), for lists and strings.
absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits: a list's, a dict's keys, a str's characters; none for undefined.
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const Args& args);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& args);
// A binary operator of Python / Jinja: + - * / // % ** ~ == != < > <= >= in notin.
absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b);
// The global functions (range, namespace, dict, raise_exception, strftime_now) by name.
void AddGlobals(Dict* globals);

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_BUILTINS_H_
