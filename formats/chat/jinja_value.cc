#include "formats/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::chat {
namespace {

}  // namespace

uint32_t DecodeUtf8At(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    *len = 1;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (d & 0x3f);
  }
  *len = static_cast<size_t>(n);
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

std::string_view PyStrip(std::string_view s, bool left, bool right, const std::string* chars) {
  const auto cps = CodePoints(s);
  auto strip = [&](const std::pair<size_t, size_t>& r) {
    if (chars == nullptr) {
      size_t len = 0;
      return IsPySpace(DecodeUtf8At(s, r.first, &len));
    }
    return chars->find(s.substr(r.first, r.second - r.first)) != std::string::npos;
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  if (b == e) return s.substr(0, 0);
  return s.substr(cps[b].first, cps[e - 1].second - cps[b].first);
}

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

std::string StringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
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
  return out;
}

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
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

std::vector<std::pair<size_t, size_t>> CodePoints(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    DecodeUtf8At(s, i, &len);
    out.push_back({i, i + len});
    i += len;
  }
  return out;
}

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

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::Find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value v) {
  depth = std::max(depth, 1 + v.depth());
  if (Value* old = Find(key)) {
    *old = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
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
  v.s_ = std::move(s);
  return v;
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
      for (const auto& [k, x] : j.items()) d.AsDict().Set(k, FromJson(x));
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
    case Kind::kString: return !s_.empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return namespace_ || !dict_->items.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return s_;
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

std::string Value::Repr() const { return ReprAt(0); }

std::string Value::ReprAt(int level) const {
  if (level > kMaxNesting) return "...";
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return absl::StrCat(i_);
    case Kind::kFloat: return FloatRepr(f_);
    case Kind::kString: return StringRepr(s_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t k = 0; k < list_->size(); ++k) absl::StrAppend(&out, k ? ", " : "", (*list_)[k].ReprAt(level + 1));
      if (tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      // A dict being printed that contains itself prints as {...}, as Python's repr does.
      thread_local std::vector<const Dict*> printing;
      if (std::find(printing.begin(), printing.end(), dict_.get()) != printing.end()) return "{...}";
      printing.push_back(dict_.get());
      std::string out = "{";
      for (size_t k = 0; k < dict_->items.size(); ++k) {
        absl::StrAppend(&out, k ? ", " : "", StringRepr(dict_->items[k].first), ": ",
                        dict_->items[k].second.ReprAt(level + 1));
      }
      printing.pop_back();
      return namespace_ ? "<Namespace " + out + "}>" : out + "}";
    }
    case Kind::kFunction: return "<function>";
  }
  return "";
}

absl::StatusOr<std::string> Value::ToJson(bool ensure_ascii, int indent, const std::string& item_sep,
                                          const std::string& key_sep, bool sort_keys) const {
  std::string out;
  if (absl::Status s = JsonAppend(*this, ensure_ascii, indent, 0, item_sep, key_sep, sort_keys, &out); !s.ok()) return s;
  return out;
}

bool Value::Equals(const Value& o) const { return EqualsAt(o, 0); }

bool Value::EqualsAt(const Value& o, int level) const {
  if (level > kMaxNesting) return false;
  if (IsNumber() && o.IsNumber()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return AsFloat() == o.AsFloat();
    return AsInt() == o.AsInt();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return s_ == o.s_;
    case Kind::kList: {
      if (tuple_ != o.tuple_ || list_->size() != o.list_->size()) return false;
      for (size_t k = 0; k < list_->size(); ++k) {
        if (!(*list_)[k].EqualsAt((*o.list_)[k], level + 1)) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (namespace_ || o.namespace_) return dict_ == o.dict_;
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

}  // namespace tessera::chat
