#include "formats/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "formats/chat/jinja_budget.h"
#include "formats/chat/py_case.h"

namespace tessera::formats::chat {

namespace {

// Python's str.isprintable() for the code points a chat message may hold: controls, separators other
// than the space, format characters and private use are not printable (an approximation of the
// Unicode categories Cc, Cf, Co, Zl, Zp, Zs for the ranges that occur in text).
bool Printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return false;
  if (cp == 0xa0 || cp == 0xad || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
      (cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff || (cp >= 0xe000 && cp <= 0xf8ff) ||
      (cp >= 0xfff9 && cp <= 0xfffb)) {
    return false;
  }
  return true;
}

void StringRepr(const std::string& s, std::string* out_text) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string& out = *out_text;
  out += quote;
  for (size_t i = 0; i < s.size();) {
    size_t run = i;  // Printable ASCII other than the quote and the backslash: copied as it is, at once.
    while (run < s.size() && s[run] >= 0x20 && s[run] < 0x7f && s[run] != quote && s[run] != '\\') ++run;
    if (run > i) {
      out.append(s, i, run - i);
      i = run;
      continue;
    }
    size_t len = 1;
    const uint32_t cp = DecodeUtf8At(s, i, &len);
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!Printable(cp)) {
      out += cp <= 0xff ? absl::StrFormat("\\x%02x", cp) : cp <= 0xffff ? absl::StrFormat("\\u%04x", cp)
                                                                        : absl::StrFormat("\\U%08x", cp);
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += quote;
}

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t run = i;  // ASCII that JSON keeps as it is: copied at once.
    while (run < s.size() && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '"' && s[run] != '\\') ++run;
    if (run > i) {
      out->append(s, i, run - i);
      i = run;
      continue;
    }
    size_t len = 1;
    const uint32_t cp = DecodeUtf8At(s, i, &len);
    switch (cp) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
          if (cp > 0xffff) {
            const uint32_t v = cp - 0x10000;
            absl::StrAppendFormat(out, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          } else {
            absl::StrAppendFormat(out, "\\u%04x", cp);
          }
        } else {
          out->append(s, i, len);
        }
    }
    i += len;
  }
  *out += '"';
}

absl::Status JsonAppend(const Value& v, bool ensure_ascii, int indent, int level, const std::string& item_sep,
                        const std::string& key_sep, bool sort_keys, std::string* out) {
  if (absl::Status s = Spend(1); !s.ok()) return s;
  if (absl::Status s = CheckStringSize(out->size()); !s.ok()) return s;
  if (level > Value::kMaxNesting) {
    return absl::InvalidArgumentError(absl::StrCat("values nested deeper than ", Value::kMaxNesting, " levels"));
  }
  auto newline = [&](int l) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent) * l, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: *out += v.AsBool() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: absl::StrAppend(out, v.AsInt()); return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double f = v.AsFloat();
      *out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : FloatRepr(f);
      return absl::OkStatus();
    }
    case Value::Kind::kString: JsonString(v.AsString(), ensure_ascii, out); return absl::OkStatus();
    case Value::Kind::kList: {
      const auto& items = v.AsList();
      if (items.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) *out += item_sep;
        newline(level + 1);
        if (absl::Status s = JsonAppend(items[k], ensure_ascii, indent, level + 1, item_sep, key_sep, sort_keys, out);
            !s.ok()) {
          return s;
        }
      }
      newline(level);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.IsNamespace()) return absl::InvalidArgumentError("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.AsDict().items) items.push_back(&kv);
      if (items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) *out += item_sep;
        newline(level + 1);
        JsonString(items[k]->first, ensure_ascii, out);
        *out += key_sep;
        if (absl::Status s =
                JsonAppend(items[k]->second, ensure_ascii, indent, level + 1, item_sep, key_sep, sort_keys, out);
            !s.ok()) {
          return s;
        }
      }
      newline(level);
      *out += '}';
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  // The shortest round-trip digits and exponent, then Python's layout: positional for exponents in
  // [-4, 16), else d.ddde±XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += absl::StrFormat("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  }
  return neg ? "-" + out : out;
}

// A scan of many keys (a large JSON object) is charged, so that a loop of lookups cannot hang.
constexpr size_t kKeysPerStep = 64;

const Value* Dict::Find(std::string_view key) const {
  if (items.size() >= kKeysPerStep) (void)Spend(static_cast<int64_t>(items.size() / kKeysPerStep));
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::Find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Dict*>(this)->Find(key));
}

void Dict::Set(const std::string& key, Value v) {
  depth = std::max(depth, 1 + v.depth());
  if (Value* old = Find(key)) {
    *old = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

void Dict::Append(std::string key, Value v) {
  depth = std::max(depth, 1 + v.depth());
  items.emplace_back(std::move(key), std::move(v));
}

std::optional<Value> Args::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return v;
  }
  return std::nullopt;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  (void)SpendString(s.size());  // Spent, the rendering fails after the operation that made it.
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

const std::string& Value::Empty() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

int Value::depth() const {
  if (kind_ == Kind::kList) return list_depth_;
  if (kind_ == Kind::kDict) return namespace_ ? 1 : dict_->depth;
  return 0;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_depth_ = 1;
  for (const Value& x : items) v.list_depth_ = std::max(v.list_depth_, 1 + x.depth());
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::NewDict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}

Value Value::Namespace() {
  Value v = NewDict();
  v.namespace_ = true;
  return v;
}

Value Value::Callable(Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u)) : Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(FromJson(x));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = NewDict();
      for (const auto& [k, x] : j.items()) d.AsDict().Append(k, FromJson(x));  // JSON's keys are unique.
      return d;
    }
    default: return Value();
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !AsString().empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return namespace_ || !dict_->items.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return AsString();
    default: return Repr();
  }
}

Value::~Value() {
  if ((list_ != nullptr && list_.use_count() == 1) || (dict_ != nullptr && dict_.use_count() == 1)) Bury();
}

// The last holder of a list or dict: its items go to a work list that the outermost call empties one
// by one (each item's own items join the list as it goes), so that destroying a deeply nested value
// never recurses more than two levels.
void Value::Bury() {
  thread_local std::vector<Value>* pending = nullptr;
  std::vector<Value> mine;
  const bool owner = pending == nullptr;
  if (owner) pending = &mine;
  if (list_ != nullptr && list_.use_count() == 1) {
    for (Value& x : *list_) pending->push_back(std::move(x));
    list_->clear();
  }
  if (dict_ != nullptr && dict_.use_count() == 1) {
    for (auto& kv : dict_->items) pending->push_back(std::move(kv.second));
    dict_->items.clear();
  }
  if (!owner) return;
  while (!mine.empty()) {
    Value v = std::move(mine.back());
    mine.pop_back();
  }  // Each v releases here, handing its items to `mine`.
  pending = nullptr;
}

std::string Value::Repr() const {
  std::string out;
  ReprTo(&out, 0);
  return out;
}

void Value::ReprTo(std::string* out, int level) const {
  if (!Spend(1).ok() || !CheckStringSize(out->size()).ok()) return;
  if (level > kMaxNesting) {
    *out += "...";
    return;
  }
  switch (kind_) {
    case Kind::kUndefined: return;
    case Kind::kNone: *out += "None"; return;
    case Kind::kBool: *out += b_ ? "True" : "False"; return;
    case Kind::kInt: absl::StrAppend(out, i_); return;
    case Kind::kFloat: *out += FloatRepr(f_); return;
    case Kind::kString: StringRepr(AsString(), out); return;
    case Kind::kList: {
      *out += tuple_ ? "(" : "[";
      for (size_t k = 0; k < list_->size() && !BudgetSpent(); ++k) {
        if (k > 0) *out += ", ";
        (*list_)[k].ReprTo(out, level + 1);
      }
      *out += tuple_ ? (list_->size() == 1 ? ",)" : ")") : "]";
      return;
    }
    case Kind::kDict: {
      // A dict being printed that contains itself prints as {...}, as Python's repr does.
      thread_local std::vector<const Dict*> printing;
      if (std::find(printing.begin(), printing.end(), dict_.get()) != printing.end()) {
        *out += "{...}";
        return;
      }
      printing.push_back(dict_.get());
      *out += namespace_ ? "<Namespace {" : "{";
      for (size_t k = 0; k < dict_->items.size() && !BudgetSpent(); ++k) {
        if (k > 0) *out += ", ";
        StringRepr(dict_->items[k].first, out);
        *out += ": ";
        dict_->items[k].second.ReprTo(out, level + 1);
      }
      printing.pop_back();
      *out += namespace_ ? "}>" : "}";
      return;
    }
    case Kind::kFunction: *out += "<function>"; return;
  }
}

absl::StatusOr<std::string> Value::ToJson(bool ensure_ascii, int indent, const std::string& item_sep,
                                          const std::string& key_sep, bool sort_keys) const {
  std::string out;
  if (absl::Status s = JsonAppend(*this, ensure_ascii, indent, 0, item_sep, key_sep, sort_keys, &out); !s.ok()) return s;
  return out;
}

bool Value::Equals(const Value& o) const { return EqualsAt(o, 0); }

bool Value::EqualsAt(const Value& o, int level) const {
  if (level > kMaxNesting || !Spend(1).ok()) return false;
  if (IsNumber() && o.IsNumber()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return AsFloat() == o.AsFloat();
    return AsInt() == o.AsInt();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString:
      if (s_ == o.s_) return true;  // One string (copies share their text).
      if (AsString().size() != o.AsString().size()) return false;
      if (!Spend(static_cast<int64_t>(AsString().size() / RenderBudget::kBytesPerStep)).ok()) return false;
      return AsString() == o.AsString();
    case Kind::kList: {
      // One list: equal without visiting it, as Python's identity shortcut makes `x == x` (and an item
      // compared with itself) for a list of shared lists.
      if (list_ == o.list_ && tuple_ == o.tuple_) return true;
      if (tuple_ != o.tuple_ || list_->size() != o.list_->size()) return false;
      for (size_t k = 0; k < list_->size(); ++k) {
        if (!(*list_)[k].EqualsAt((*o.list_)[k], level + 1)) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (namespace_ || o.namespace_ || dict_ == o.dict_) return dict_ == o.dict_;  // One dict: as lists.
      if (dict_->items.size() != o.dict_->items.size()) return false;
      for (const auto& [k, v] : dict_->items) {
        const Value* other = o.dict_->Find(k);
        if (other == nullptr || !v.EqualsAt(*other, level + 1)) return false;
      }
      return true;
    }
    case Kind::kFunction: return fn_ == o.fn_;
    default: return false;
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return tuple_ ? "tuple" : "list";
    case Kind::kDict: return namespace_ ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "?";
}

}  // namespace tessera::formats::chat
