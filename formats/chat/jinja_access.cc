// Attribute, item and slice access as Jinja's immutable sandbox does it, dict and list methods, and
// what a for loop iterates.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"
#include "formats/chat/py_case.h"

namespace tessera::formats::chat {

using Kind = Value::Kind;

absl::Status Unsafe(const std::string& attr, const Value& obj) {
  return Err(absl::StrCat("access to attribute '", attr, "' of '", obj.TypeName(),
                          "' object is unsafe (the template may not change its inputs)"));
}

std::optional<Value> DictMethod(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::Callable([self, name](const Args&) -> absl::StatusOr<Value> {
      if (absl::Status s = SpendItems(self.AsDict().items.size()); !s.ok()) return s;
      std::vector<Value> out;
      for (const auto& [k, v] : self.AsDict().items) {
        out.push_back(name == "items" ? Pair(k, v) : name == "keys" ? Value::String(k) : v);
      }
      return Value::List(std::move(out));
    });
  }
  if (name == "get") {
    return Value::Callable([self](const Args& a) -> absl::StatusOr<Value> {
      auto key = a.Get(0, "key");
      if (!key) return Err("get: a key is needed");
      if (key->IsString()) {
        if (const Value* v = self.AsDict().Find(key->AsString())) return *v;
      }
      return a.Get(1, "default").value_or(Value::None());
    });
  }
  return std::nullopt;
}

bool IsMutator(const Value& obj, const std::string& name) {
  static const std::set<std::string> kList = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
  static const std::set<std::string> kDict = {"update", "pop", "popitem", "setdefault", "clear"};
  return (obj.IsList() && kList.count(name)) || (obj.IsDict() && !obj.IsNamespace() && kDict.count(name));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  // The items, charged before they are made.
  const uint64_t items = v.IsString() ? CountCodePoints(v.AsString()) : static_cast<uint64_t>(Length(v));
  if (absl::Status s = SpendItems(items); !s.ok()) return s;
  switch (v.kind()) {
    case Kind::kUndefined: return std::vector<Value>{};
    case Kind::kList: return v.AsList();
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.AsDict().items) keys.push_back(Value::String(k));
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (const auto& [b, e] : CodePoints(v.AsString())) chars.push_back(Value::String(v.AsString().substr(b, e - b)));
      return chars;
    }
    default: return Err(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined: return Err(absl::StrCat("an undefined value has no attribute '", name, "'"));
    case Kind::kDict:
      if (!obj.IsNamespace()) {
        if (auto m = DictMethod(obj, name)) return *m;
        if (IsMutator(obj, name)) return Unsafe(name, obj);
      }
      if (const Value* v = obj.AsDict().Find(name)) return *v;
      return Value();
    case Kind::kString:
      if (auto m = StrMethod(obj.AsString(), name)) return *m;
      return Value();
    case Kind::kList:
      if (IsMutator(obj, name)) return Unsafe(name, obj);
      if (name == "index" || name == "count") {
        return Value::Callable([obj, name](const Args& a) -> absl::StatusOr<Value> {
          auto x = a.Get(0, "value");
          if (!x) return Err(absl::StrCat(name, ": a value is needed"));
          int64_t n = 0;
          for (size_t k = 0; k < obj.AsList().size(); ++k) {
            if (absl::Status s = Spend(1); !s.ok()) return s;
            if (!obj.AsList()[k].Equals(*x)) continue;
            if (name == "index") return Value::Int(static_cast<int64_t>(k));
            ++n;
          }
          if (name == "index") return Err("index: the value is not in the list");
          return Value::Int(n);
        });
      }
      return Value();
    default: return Value();
  }
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined: return Err(absl::StrCat("an undefined value has no item ", key.Repr()));
    case Kind::kDict:
      if (key.IsString()) {
        if (const Value* v = obj.AsDict().Find(key.AsString())) return *v;
      }
      return Value();
    case Kind::kList:
    case Kind::kString: {
      if (key.IsString()) return GetAttr(obj, key.AsString());
      if (key.kind() != Kind::kInt && key.kind() != Kind::kBool) return Value();
      int64_t i = key.AsInt();
      if (obj.IsList()) {
        const int64_t n = static_cast<int64_t>(obj.AsList().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();
        return obj.AsList()[static_cast<size_t>(i)];
      }
      const std::string& s = obj.AsString();
      // Found by reading the code points up to it (and all of them for an index from the end).
      if (absl::Status st = Spend(static_cast<int64_t>(s.size() / RenderBudget::kBytesPerStep)); !st.ok()) return st;
      if (i < 0) i += static_cast<int64_t>(CountCodePoints(s));
      if (i < 0) return Value();
      const size_t at = CodePointStart(s, static_cast<size_t>(i));
      if (at == s.size()) return Value();
      size_t len = 1;
      DecodeUtf8At(s, at, &len);
      return Value::String(s.substr(at, len));
    }
    default: return Value();
  }
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (!obj.IsList() && !obj.IsString()) {
    if (obj.IsUndefined()) return Err("an undefined value cannot be sliced");
    return Err(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  // A string's code points by index: its bytes when it is ASCII, else a table of them.
  const bool ascii = obj.IsString() && std::all_of(obj.AsString().begin(), obj.AsString().end(),
                                                   [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  std::vector<std::pair<size_t, size_t>> cps;
  if (obj.IsString() && !ascii) cps = CodePoints(obj.AsString());
  const int64_t n =
      static_cast<int64_t>(obj.IsList() ? obj.AsList().size() : ascii ? obj.AsString().size() : cps.size());
  auto part = [](const Value& v) -> std::optional<int64_t> {
    if (v.IsUndefined() || v.IsNone() || !v.IsNumber()) return std::nullopt;
    return v.AsInt();
  };
  const int64_t step = part(step_v).value_or(1);
  if (step == 0) return Err("slice step cannot be zero");
  // Python's slice.indices(): b and e within [-1, n], so that e - b cannot overflow.
  auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t v = *x;
    if (v < 0) v = v < -n ? -n - 1 : v + n;
    if (step > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  const int64_t b = clamp(part(start), step > 0 ? 0 : n - 1);
  const int64_t e = clamp(part(stop), step > 0 ? n : -1);
  // How many items: ceil(|e - b| / |step|), in unsigned arithmetic (|INT64_MIN| fits there).
  const uint64_t span = step > 0 ? (e > b ? static_cast<uint64_t>(e - b) : 0)
                                 : (b > e ? static_cast<uint64_t>(b - e) : 0);
  const uint64_t stride = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
  // A list's items are charged here; a string's bytes when it is made.
  if (obj.IsList()) {
    if (absl::Status s = SpendItems(count); !s.ok()) return s;
  }
  std::vector<Value> items;
  std::string text;
  for (uint64_t k = 0; k < count; ++k) {
    // b + k * step stays within [0, n) for k < count.
    const int64_t i = step > 0 ? b + static_cast<int64_t>(k * stride) : b - static_cast<int64_t>(k * stride);
    if (obj.IsList()) {
      items.push_back(obj.AsList()[static_cast<size_t>(i)]);
    } else if (ascii) {
      text += obj.AsString()[static_cast<size_t>(i)];
    } else {
      const auto& r = cps[static_cast<size_t>(i)];
      text.append(obj.AsString(), r.first, r.second - r.first);
    }
  }
  return obj.IsList() ? Value::List(std::move(items)) : Value::String(std::move(text));
}


}  // namespace tessera::formats::chat
