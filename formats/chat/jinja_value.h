// Value: what a chat template computes with — Jinja's data model as Python gives it to a template
// that transformers renders (formats/chat/chat_template.h): undefined, None, bool, int, float, str,
// list, dict (insertion-ordered, string keys: messages come from JSON), namespace (a dict whose
// attributes may be assigned) and callables (globals, methods, macros). Lists and dicts are shared
// by reference, as in Python; so are strings (immutable), so copying a value never copies its text.
// Strings are UTF-8; length, indexing and slicing count code points. Within a rendering, what these
// operations do is charged to its budget (jinja_budget.h): making a string, printing, JSON and ==.
#ifndef TESSERA_FORMATS_CHAT_JINJA_VALUE_H_
#define TESSERA_FORMATS_CHAT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::formats::chat {

class Value;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // In insertion order.
  int depth = 1;  // 1 + the deepest value's depth (Set keeps it).
  // The value of `key`, or nullptr. Keys are scanned in order: one step per 64 of them is charged.
  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  void Set(const std::string& key, Value v);
  // Adds `key`, which the caller knows is not in the dict yet (no scan).
  void Append(std::string key, Value v);
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index`, or named `name`, or nullopt.
  std::optional<Value> Get(size_t index, std::string_view name) const;
};
using Function = std::function<absl::StatusOr<Value>(const Args&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // Undefined.
  Value(const Value&) = default;
  Value(Value&&) = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) = default;
  // Releases what only it holds without recursion (however deep the lists and dicts nest).
  ~Value();
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  // Charges the rendering's budget for the bytes (and spends it if they pass its string limit).
  static Value String(std::string s);
  static Value List(std::vector<Value> items);
  // A list that prints as a tuple: "(a, b)", "(a,)" (dict.items(), tuple literals).
  static Value Tuple(std::vector<Value> items);
  static Value NewDict();
  static Value Namespace();
  static Value Callable(Function f);
  // JSON as Python's json.loads gives it (objects keep their key order).
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsTuple() const { return kind_ == Kind::kList && tuple_; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsNamespace() const { return kind_ == Kind::kDict && namespace_; }
  bool IsCallable() const { return kind_ == Kind::kFunction; }

  bool AsBool() const { return b_; }
  int64_t AsInt() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double AsFloat() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(AsInt()); }
  const std::string& AsString() const { return s_ != nullptr ? *s_ : Empty(); }
  std::vector<Value>& AsList() const { return *list_; }
  Dict& AsDict() const { return *dict_; }
  const Function& AsFunction() const { return *fn_; }

  // Python's truth value (undefined is false).
  bool Truthy() const;
  // Python's str() and repr(). Past kMaxNesting levels, "..." stands for the rest. Each value printed
  // costs a step; printing stops (the text partial) once the budget is spent or the text passes its
  // string limit.
  std::string Str() const;
  std::string Repr() const;
  static constexpr int kMaxNesting = 1000;  // Printing, JSON and comparison go no deeper.
  // Python's json.dumps(value, ensure_ascii, indent, separators, sort_keys); indent < 0: none. A step
  // per value; the budget's error once it is spent or the text passes its string limit.
  absl::StatusOr<std::string> ToJson(bool ensure_ascii, int indent, const std::string& item_sep,
                                     const std::string& key_sep, bool sort_keys) const;
  // Python's == (1 == 1.0 == True; lists and dicts by value). A step per pair of values compared and
  // per 64 bytes of strings compared; false once the budget is spent (the renderer then fails).
  bool Equals(const Value& other) const;
  bool EqualsAt(const Value& other, int level) const;
  // A short name of the type, for errors ("str", "int", "list", ...).
  std::string TypeName() const;
  // How deep lists and dicts nest in it: 0 for a scalar, 1 for a flat list, ... A namespace counts 1
  // (printing and JSON stop at it). The renderer refuses values deeper than its limit, so that nothing
  // recursing over a value (printing, JSON, comparison, destruction) can run out of stack.
  int depth() const;

 private:
  void ReprTo(std::string* out, int level) const;
  void Bury();
  static const std::string& Empty();

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  bool tuple_ = false;
  int list_depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Python's repr() of a float: the shortest digits that read back the same, "1.0", "1e-05", "1e+16".
std::string FloatRepr(double f);

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_VALUE_H_
