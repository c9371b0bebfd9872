#include "formats/chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>

#include "absl/strings/str_cat.h"
#include "formats/chat/py_case.h"

namespace tessera::chat {
namespace {

using Kind = Value::Kind;

absl::Status Err(const std::string& what) { return absl::InvalidArgumentError(what); }

constexpr int64_t kMaxRange = 100000;            // Jinja's sandbox: MAX_RANGE.
constexpr size_t kMaxString = size_t{64} << 20;  // A string or list built by an operator.

std::string Lower(const std::string& s) { return PyLower(s); }
std::string Upper(const std::string& s) { return PyUpper(s); }
std::string Title(const std::string& s) { return PyTitle(s); }
std::string Capitalize(const std::string& s) { return PyCapitalize(s); }

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return static_cast<int64_t>(CodePoints(v.AsString()).size());
    case Kind::kList: return static_cast<int64_t>(v.AsList().size());
    case Kind::kDict: return static_cast<int64_t>(v.AsDict().items.size());
    default: return 0;
  }
}

// Python's ordering for sort, min, max and < (numbers, strings, lists); an error otherwise.
absl::StatusOr<int> Compare(const Value& a, const Value& b, int level = 0) {
  if (level > Value::kMaxNesting) return Err("values nested too deep to compare");
  if (a.IsNumber() && b.IsNumber()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      return a.AsFloat() < b.AsFloat() ? -1 : a.AsFloat() > b.AsFloat() ? 1 : 0;
    }
    return a.AsInt() < b.AsInt() ? -1 : a.AsInt() > b.AsInt() ? 1 : 0;
  }
  if (a.IsString() && b.IsString()) return a.AsString().compare(b.AsString()) < 0 ? -1 : a.AsString() == b.AsString() ? 0 : 1;
  if (a.IsList() && b.IsList()) {
    const auto &x = a.AsList(), &y = b.AsList();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      auto c = Compare(x[k], y[k], level + 1);
      if (!c.ok() || *c != 0) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return Err(absl::StrCat("'<' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& x) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!x.IsString()) return Err(absl::StrCat("'in <string>' requires string as left operand, not ", x.TypeName()));
      return container.AsString().find(x.AsString()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.AsList()) {
        if (v.Equals(x)) return true;
      }
      return false;
    case Kind::kDict: return x.IsString() && container.AsDict().Find(x.AsString()) != nullptr;
    default: return Err(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

Value Pair(const std::string& k, const Value& v) { return Value::Tuple({Value::String(k), v}); }

// Python's str.split(sep, maxsplit).
std::vector<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<Value> out;
  if (sep.IsUndefined() || sep.IsNone()) {
    const auto cps = CodePoints(s);
    size_t k = 0;
    auto space = [&](size_t i) {
      size_t len;
      return IsPySpace(DecodeUtf8At(s, cps[i].first, &len));
    };
    while (k < cps.size()) {
      while (k < cps.size() && space(k)) ++k;
      if (k == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(cps[k].first);
        out.push_back(Value::String(std::string(PyStrip(rest, false, true))));
        return out;
      }
      size_t e = k;
      while (e < cps.size() && !space(e)) ++e;
      out.push_back(Value::String(s.substr(cps[k].first, (e == cps.size() ? s.size() : cps[e].first) - cps[k].first)));
      k = e;
    }
    return out;
  }
  const std::string& d = sep.AsString();
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t at = s.find(d, start);
    if (at == std::string::npos) break;
    out.push_back(Value::String(s.substr(start, at - start)));
    start = at + d.size();
  }
  out.push_back(Value::String(s.substr(start)));
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character.
    const auto cps = CodePoints(s);
    int64_t n = 0;
    for (const auto& r : cps) {
      if (count < 0 || n < count) out += to, ++n;
      out.append(s, r.first, r.second - r.first);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

absl::StatusOr<std::string> StringArg(const Args& a, size_t i, const char* name, const char* what) {
  auto v = a.Get(i, name);
  if (!v || !v->IsString()) return Err(absl::StrCat(what, ": the argument '", name, "' must be a string"));
  return v->AsString();
}

int64_t IntArg(const Args& a, size_t i, const char* name, int64_t def) {
  auto v = a.Get(i, name);
  if (!v || v->IsNone() || v->IsUndefined() || !v->IsNumber()) return def;
  return v->AsInt();
}

bool BoolArg(const Args& a, size_t i, const char* name, bool def) {
  auto v = a.Get(i, name);
  return v ? v->Truthy() : def;
}

absl::Status Unsafe(const std::string& attr, const Value& obj) {
  return Err(absl::StrCat("access to attribute '", attr, "' of '", obj.TypeName(),
                          "' object is unsafe (the template may not change its inputs)"));
}

std::optional<Value> StrMethod(const std::string& self, const std::string& name) {
  auto m = [](auto f) { return std::optional<Value>(Value::Callable(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return m([self, l, r](const Args& a) -> absl::StatusOr<Value> {
      auto chars = a.Get(0, "chars");
      const std::string* c = chars && chars->IsString() ? &chars->AsString() : nullptr;
      return Value::String(std::string(PyStrip(self, l, r, c)));
    });
  }
  if (name == "split") {
    return m([self](const Args& a) -> absl::StatusOr<Value> {
      auto sep = a.Get(0, "sep");
      if (sep && sep->IsString() && sep->AsString().empty()) return Err("split: empty separator");
      return Value::List(Split(self, sep.value_or(Value()), IntArg(a, 1, "maxsplit", -1)));
    });
  }
  if (name == "splitlines") {
    return m([self](const Args&) -> absl::StatusOr<Value> {
      std::vector<Value> out;
      size_t start = 0;
      for (size_t i = 0; i < self.size(); ++i) {
        if (self[i] == '\n' || self[i] == '\r') {
          out.push_back(Value::String(self.substr(start, i - start)));
          if (self[i] == '\r' && i + 1 < self.size() && self[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < self.size()) out.push_back(Value::String(self.substr(start)));
      return Value::List(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return m([self, starts](const Args& a) -> absl::StatusOr<Value> {
      auto p = a.Get(0, "prefix");
      if (!p) return Err("startswith/endswith: a prefix is needed");
      std::vector<Value> options = p->IsList() ? p->AsList() : std::vector<Value>{*p};
      for (const Value& o : options) {
        if (!o.IsString()) return Err("startswith/endswith: the prefix must be a string or a tuple of strings");
        const std::string& x = o.AsString();
        if (x.size() <= self.size() &&
            (starts ? self.compare(0, x.size(), x) == 0 : self.compare(self.size() - x.size(), x.size(), x) == 0)) {
          return Value::Bool(true);
        }
      }
      return Value::Bool(false);
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return m([self, name](const Args&) -> absl::StatusOr<Value> {
      return Value::String(name == "upper" ? Upper(self) : name == "lower" ? Lower(self) : name == "title" ? Title(self) : Capitalize(self));
    });
  }
  if (name == "replace") {
    return m([self](const Args& a) -> absl::StatusOr<Value> {
      auto from = StringArg(a, 0, "old", "replace");
      auto to = StringArg(a, 1, "new", "replace");
      if (!from.ok()) return from.status();
      if (!to.ok()) return to.status();
      return Value::String(Replace(self, *from, *to, IntArg(a, 2, "count", -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return m([self, name](const Args& a) -> absl::StatusOr<Value> {
      auto sub = StringArg(a, 0, "sub", name.c_str());
      if (!sub.ok()) return sub.status();
      if (name == "count") {
        if (sub->empty()) return Value::Int(static_cast<int64_t>(CodePoints(self).size()) + 1);
        int64_t n = 0;
        for (size_t at = self.find(*sub); at != std::string::npos; at = self.find(*sub, at + sub->size())) ++n;
        return Value::Int(n);
      }
      const size_t at = name == "rfind" ? self.rfind(*sub) : self.find(*sub);
      if (at == std::string::npos) {
        if (name == "index") return Err("index: substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(CodePoints(self.substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return m([self](const Args& a) -> absl::StatusOr<Value> {
      auto items = a.Get(0, "iterable");
      if (!items) return Err("join: an iterable is needed");
      auto list = Iterate(*items);
      if (!list.ok()) return list.status();
      std::string out;
      for (size_t k = 0; k < list->size(); ++k) {
        if (!(*list)[k].IsString()) return Err(absl::StrCat("join: item ", k, " is a ", (*list)[k].TypeName(), ", not a str"));
        absl::StrAppend(&out, k ? self : "", (*list)[k].AsString());
      }
      return Value::String(std::move(out));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return m([self, prefix](const Args& a) -> absl::StatusOr<Value> {
      auto x = StringArg(a, 0, prefix ? "prefix" : "suffix", "removeprefix");
      if (!x.ok()) return x.status();
      if (prefix && self.compare(0, x->size(), *x) == 0) return Value::String(self.substr(x->size()));
      if (!prefix && x->size() <= self.size() && self.compare(self.size() - x->size(), x->size(), *x) == 0) {
        return Value::String(self.substr(0, self.size() - x->size()));
      }
      return Value::String(self);
    });
  }
  if (name == "islower" || name == "isupper") {
    return m([self, name](const Args&) -> absl::StatusOr<Value> {
      return Value::Bool(name == "islower" ? PyIsLower(self) : PyIsUpper(self));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
    return m([self, name](const Args&) -> absl::StatusOr<Value> {
      if (self.empty()) return Value::Bool(false);
      bool ok = true;
      for (unsigned char c : self) {
        if (name == "isdigit") ok &= std::isdigit(c) != 0;
        if (name == "isalpha") ok &= std::isalpha(c) != 0;
        if (name == "isalnum") ok &= std::isalnum(c) != 0;
        if (name == "isspace") ok &= std::isspace(c) != 0;
      }
      return Value::Bool(ok);
    });
  }
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::Callable([self, name](const Args&) -> absl::StatusOr<Value> {
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

absl::StatusOr<Value> AttrOrItem(const Value& v, const Args& a, const char* what) {
  auto attr = a.Get(0, "attribute");
  (void)what;
  if (!attr) return v;
  if (attr->IsString()) {
    // Dotted paths ("a.b") and integer parts, as Jinja's attribute arguments.
    Value cur = v;
    size_t start = 0;
    const std::string& path = attr->AsString();
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      auto next = digits ? GetItem(cur, Value::Int(std::stoll(part))) : GetItem(cur, Value::String(part));
      if (!next.ok()) return next;
      cur = *next;
      if (dot == std::string::npos) return cur;
      start = dot + 1;
    }
  }
  return GetItem(v, *attr);
}

absl::StatusOr<Value> Tojson(const Value& v, const Args& a) {
  const bool ensure_ascii = BoolArg(a, 0, "ensure_ascii", false);
  auto indent_arg = a.Get(1, "indent");
  int indent = -1;
  std::string indent_str;
  if (indent_arg && indent_arg->IsNumber()) indent = static_cast<int>(std::clamp<int64_t>(indent_arg->AsInt(), 0, 64));
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (auto seps = a.Get(2, "separators"); seps && seps->IsList() && seps->AsList().size() == 2 &&
                                             seps->AsList()[0].IsString() && seps->AsList()[1].IsString()) {
    item_sep = seps->AsList()[0].AsString();
    key_sep = seps->AsList()[1].AsString();
  }
  auto s = v.ToJson(ensure_ascii, indent, item_sep, key_sep, BoolArg(a, 3, "sort_keys", false));
  if (!s.ok()) return Err(absl::StrCat("tojson: ", s.status().message()));
  return Value::String(*std::move(s));
}

absl::StatusOr<Value> Indent(const Value& v, const Args& a) {
  const std::string s = v.Str() + "\n";  // As Jinja: the newline makes splitlines keep a last empty line.
  std::string pad = "    ";
  if (auto w = a.Get(0, "width")) pad = w->IsString() ? w->AsString() : std::string(std::clamp<int64_t>(w->AsInt(), 0, 256), ' ');
  const bool first = BoolArg(a, 1, "first", false), blank = BoolArg(a, 2, "blank", false);
  auto lines = StrMethod(s, "splitlines");
  auto split = lines->AsFunction()(Args{});
  std::vector<Value> ls = split->AsList();
  std::string out;
  for (size_t k = 0; k < ls.size(); ++k) {
    const std::string& line = ls[k].AsString();
    if (k == 0) {
      out = line;
      continue;
    }
    out += "\n";
    if (blank || !line.empty()) out += pad;
    out += line;
  }
  if (first) out = pad + out;
  return Value::String(std::move(out));
}

absl::StatusOr<std::vector<Value>> SortedBy(std::vector<Value> items, const Args& a, size_t attr_index) {
  Args attr_args;
  if (auto at = a.Get(attr_index, "attribute")) attr_args.positional.push_back(*at);
  const bool case_sensitive = BoolArg(a, 1, "case_sensitive", false);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) {
    auto k = AttrOrItem(v, attr_args, "sort");
    if (!k.ok()) return k.status();
    Value key = *k;
    if (key.IsString() && !case_sensitive) key = Value::String(Lower(key.AsString()));
    keyed.emplace_back(std::move(key), std::move(v));
  }
  absl::Status bad;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto c = Compare(x.first, y.first);
    if (!c.ok()) bad = c.status();
    return c.ok() && *c < 0;
  });
  if (!bad.ok()) return bad;
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return out;
}

absl::StatusOr<Value> SelectLike(const std::string& filter, const Value& input, const Args& a) {
  auto items = Iterate(input);
  if (!items.ok()) return items.status();
  const bool by_attr = filter == "selectattr" || filter == "rejectattr";
  const bool keep_when = filter == "select" || filter == "selectattr";
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.positional.empty() || !a.positional[0].IsString()) return Err(absl::StrCat(filter, ": an attribute name is needed"));
    attr = a.positional[0].AsString();
    next = 1;
  }
  std::string test;
  Args test_args;
  if (next < a.positional.size()) {
    if (!a.positional[next].IsString()) return Err(absl::StrCat(filter, ": the test's name must be a string"));
    test = a.positional[next].AsString();
    test_args.positional.assign(a.positional.begin() + static_cast<long>(next) + 1, a.positional.end());
  }
  std::vector<Value> out;
  for (const Value& v : *items) {
    Value x = v;
    if (by_attr) {
      Args at;
      at.positional.push_back(Value::String(attr));
      auto got = AttrOrItem(v, at, filter.c_str());
      if (!got.ok()) return got.status();
      x = *got;
    }
    bool pass = x.Truthy();
    if (!test.empty()) {
      auto t = ApplyTest(test, x, test_args);
      if (!t.ok()) return t.status();
      pass = *t;
    }
    if (pass == keep_when) out.push_back(v);
  }
  return Value::List(std::move(out));
}

}  // namespace

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
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
      const auto cps = CodePoints(obj.AsString());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      const auto& r = cps[static_cast<size_t>(i)];
      return Value::String(obj.AsString().substr(r.first, r.second - r.first));
    }
    default: return Value();
  }
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (!obj.IsList() && !obj.IsString()) {
    if (obj.IsUndefined()) return Err("an undefined value cannot be sliced");
    return Err(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  std::vector<std::pair<size_t, size_t>> cps;
  int64_t n;
  if (obj.IsList()) {
    n = static_cast<int64_t>(obj.AsList().size());
  } else {
    cps = CodePoints(obj.AsString());
    n = static_cast<int64_t>(cps.size());
  }
  auto part = [](const Value& v) -> std::optional<int64_t> {
    if (v.IsUndefined() || v.IsNone() || !v.IsNumber()) return std::nullopt;
    return v.AsInt();
  };
  const int64_t step = part(step_v).value_or(1);
  if (step == 0) return Err("slice step cannot be zero");
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t v = *x;
    if (v < 0) v += n;
    if (step > 0) return std::clamp<int64_t>(v, 0, n);
    return std::clamp<int64_t>(v, -1, n - 1);
  };
  const int64_t b = clamp(part(start), step > 0 ? 0 : n - 1);
  const int64_t e = clamp(part(stop), step > 0 ? n : -1);
  std::vector<Value> items;
  std::string s;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) {
    if (obj.IsList()) {
      items.push_back(obj.AsList()[static_cast<size_t>(i)]);
    } else {
      const auto& r = cps[static_cast<size_t>(i)];
      s.append(obj.AsString(), r.first, r.second - r.first);
    }
  }
  return obj.IsList() ? Value::List(std::move(items)) : Value::String(std::move(s));
}

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& a) {
  if (name == "length" || name == "count") return Value::Int(Length(v));
  if (name == "string") return Value::String(v.Str());
  if (name == "safe") return v;
  if (name == "trim") {
    auto chars = a.Get(0, "chars");
    const std::string s = v.Str();
    return Value::String(std::string(PyStrip(s, true, true, chars && chars->IsString() ? &chars->AsString() : nullptr)));
  }
  if (name == "upper") return Value::String(Upper(v.Str()));
  if (name == "lower") return Value::String(Lower(v.Str()));
  if (name == "title") return Value::String(Title(v.Str()));
  if (name == "capitalize") return Value::String(Capitalize(v.Str()));
  if (name == "tojson") return Tojson(v, a);
  if (name == "indent") return Indent(v, a);
  if (name == "default" || name == "d") {
    const bool boolean = BoolArg(a, 1, "boolean", false);
    if (v.IsUndefined() || (boolean && !v.Truthy())) return a.Get(0, "default_value").value_or(Value::String(""));
    return v;
  }
  if (name == "first" || name == "last") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value();
    return name == "first" ? items->front() : items->back();
  }
  if (name == "list") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    return Value::List(*std::move(items));
  }
  if (name == "items") {
    if (v.IsUndefined()) return Value::List({});
    if (!v.IsDict()) return Err(absl::StrCat("items: a ", v.TypeName(), " is not a mapping"));
    std::vector<Value> out;
    for (const auto& [k, x] : v.AsDict().items) out.push_back(Pair(k, x));
    return Value::List(std::move(out));
  }
  if (name == "join") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    Args attr;
    if (auto at = a.Get(1, "attribute")) attr.positional.push_back(*at);
    const std::string sep = a.Get(0, "d").value_or(Value::String("")).Str();
    std::string out;
    for (size_t k = 0; k < items->size(); ++k) {
      auto x = AttrOrItem((*items)[k], attr, "join");
      if (!x.ok()) return x.status();
      absl::StrAppend(&out, k ? sep : "", x->Str());
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    auto from = StringArg(a, 0, "old", "replace");
    auto to = StringArg(a, 1, "new", "replace");
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    return Value::String(Replace(v.Str(), *from, *to, IntArg(a, 2, "count", -1)));
  }
  if (name == "reverse") {
    if (v.IsString()) return Slice(v, Value(), Value(), Value::Int(-1));
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return Value::List(*std::move(items));
  }
  if (name == "abs") {
    if (v.kind() == Kind::kFloat) return Value::Float(std::fabs(v.AsFloat()));
    if (v.IsNumber()) return v.AsInt() == INT64_MIN ? Err("abs: overflow") : absl::StatusOr<Value>(Value::Int(std::llabs(v.AsInt())));
    return Err(absl::StrCat("abs: bad operand type '", v.TypeName(), "'"));
  }
  if (name == "int" || name == "float") {
    const Value def = a.Get(0, "default").value_or(name == "int" ? Value::Int(0) : Value::Float(0));
    if (v.IsNumber()) return name == "int" ? Value::Int(v.kind() == Kind::kFloat ? static_cast<int64_t>(v.AsFloat()) : v.AsInt()) : Value::Float(v.AsFloat());
    if (v.IsString()) {
      const std::string s(PyStrip(v.AsString(), true, true));
      char* end = nullptr;
      errno = 0;
      if (name == "int") {
        const long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::Int(x);
        const double f = std::strtod(s.c_str(), &end);  // Jinja's int filter reads "3.7" as 3.
        if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(f)) return Value::Int(static_cast<int64_t>(f));
      } else {
        const double f = std::strtod(s.c_str(), &end);
        if (!s.empty() && end == s.c_str() + s.size()) return Value::Float(f);
      }
    }
    return def;
  }
  if (name == "round") {
    if (!v.IsNumber()) return Err(absl::StrCat("round: a ", v.TypeName(), " is not a number"));
    const int64_t precision = std::clamp<int64_t>(IntArg(a, 0, "precision", 0), -20, 20);
    const std::string method = a.Get(1, "method").value_or(Value::String("common")).Str();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    if (method == "common") {
      // Python's round(x, n): the exact binary value rounded to n decimals, ties to even — as
      // printf's correctly rounded conversion does.
      if (precision >= 0) {
        char buf[400];
        std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), v.AsFloat());
        return Value::Float(std::strtod(buf, nullptr));
      }
      return Value::Float(std::nearbyint(v.AsFloat() / (1 / scale)) * (1 / scale));
    }
    if (method == "floor") return Value::Float(std::floor(v.AsFloat() * scale) / scale);
    if (method == "ceil") return Value::Float(std::ceil(v.AsFloat() * scale) / scale);
    return Err("round: method must be common, ceil or floor");
  }
  if (name == "sum") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    Args attr;
    if (auto at = a.Get(0, "attribute")) attr.positional.push_back(*at);
    Value total = a.Get(1, "start").value_or(Value::Int(0));
    for (const Value& x : *items) {
      auto got = AttrOrItem(x, attr, "sum");
      if (!got.ok()) return got.status();
      auto t = BinaryOp("+", total, *got);
      if (!t.ok()) return t.status();
      total = *t;
    }
    return total;
  }
  if (name == "sort") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    auto sorted = SortedBy(*std::move(items), a, 2);
    if (!sorted.ok()) return sorted.status();
    if (BoolArg(a, 0, "reverse", false)) std::reverse(sorted->begin(), sorted->end());
    return Value::List(*std::move(sorted));
  }
  if (name == "min" || name == "max") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value();
    Args sort_args;
    sort_args.keyword.emplace_back("case_sensitive", a.Get(0, "case_sensitive").value_or(Value::Bool(false)));
    if (auto at = a.Get(1, "attribute")) sort_args.keyword.emplace_back("attribute", *at);
    auto sorted = SortedBy(*std::move(items), sort_args, 2);
    if (!sorted.ok()) return sorted.status();
    return name == "min" ? sorted->front() : sorted->back();
  }
  if (name == "unique") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    std::vector<Value> out;
    for (const Value& x : *items) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return y.Equals(x); })) out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "map") {
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    std::vector<Value> out;
    if (a.positional.empty()) {  // map(attribute=..., default=...)
      auto def = a.Get(99, "default");
      for (const Value& x : *items) {
        auto got = AttrOrItem(x, a, "map");
        if (!got.ok()) return got.status();
        out.push_back(got->IsUndefined() && def ? *def : *got);
      }
      return Value::List(std::move(out));
    }
    if (!a.positional[0].IsString()) return Err("map: the filter's name must be a string");
    Args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& x : *items) {
      auto got = ApplyFilter(a.positional[0].AsString(), x, rest);
      if (!got.ok()) return got.status();
      out.push_back(*got);
    }
    return Value::List(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") return SelectLike(name, v, a);
  if (name == "attr") {
    auto n = StringArg(a, 0, "name", "attr");
    if (!n.ok()) return n.status();
    return GetAttr(v, *n);
  }
  if (name == "escape" || name == "e") {
    std::string out;
    for (char c : v.Str()) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.IsDict()) return Err("dictsort: a mapping is needed");
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.AsDict().items) pairs.push_back(Pair(k, x));
    const bool by_value = a.Get(1, "by").value_or(Value::String("key")).Str() == "value";
    Args sort_args;
    sort_args.keyword.emplace_back("case_sensitive", a.Get(0, "case_sensitive").value_or(Value::Bool(false)));
    sort_args.keyword.emplace_back("attribute", Value::Int(by_value ? 1 : 0));
    auto sorted = SortedBy(std::move(pairs), sort_args, 2);
    if (!sorted.ok()) return sorted.status();
    if (BoolArg(a, 2, "reverse", false)) std::reverse(sorted->begin(), sorted->end());
    return Value::List(*std::move(sorted));
  }
  if (name == "wordcount") return Value::Int(static_cast<int64_t>(Split(v.Str(), Value(), -1).size()));
  return Err(absl::StrCat("the filter '", name, "' is not supported by tessera's template renderer"));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& a) {
  auto arg = [&]() -> absl::StatusOr<Value> {
    auto x = a.Get(0, "other");
    if (!x) return Err(absl::StrCat("the test '", name, "' needs an argument"));
    return *x;
  };
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.AsBool();
  if (name == "false") return v.kind() == Kind::kBool && !v.AsBool();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "number") return v.IsNumber();
  if (name == "string") return v.IsString();
  if (name == "mapping") return v.IsDict() && !v.IsNamespace();
  if (name == "iterable") return v.IsList() || v.IsDict() || v.IsString() || v.IsUndefined();
  if (name == "sequence") return v.IsList() || v.IsString() || (v.IsDict() && !v.IsNamespace());
  if (name == "callable") return v.IsCallable();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!v.IsString()) return false;
    auto m = StrMethod(v.AsString(), name == "lower" ? "islower" : "isupper");
    auto r = m->AsFunction()(Args{});
    return r.ok() && r->Truthy();
  }
  if (name == "even" || name == "odd") {
    if (!v.IsNumber() || v.kind() == Kind::kFloat) return Err(absl::StrCat("the test '", name, "' needs an integer"));
    return (v.AsInt() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    auto x = arg();
    if (!x.ok()) return x.status();
    if (!v.IsNumber() || !x->IsNumber() || x->AsInt() == 0) return Err("divisibleby needs integers (and not zero)");
    return v.AsInt() % x->AsInt() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=" || name == "lt" ||
      name == "lessthan" || name == "<" || name == "le" || name == "<=" || name == "gt" || name == "greaterthan" ||
      name == ">" || name == "ge" || name == ">=" || name == "in" || name == "sameas") {
    auto x = arg();
    if (!x.ok()) return x.status();
    std::string op = name;
    if (name == "eq" || name == "equalto") op = "==";
    if (name == "ne") op = "!=";
    if (name == "lt" || name == "lessthan") op = "<";
    if (name == "le") op = "<=";
    if (name == "gt" || name == "greaterthan") op = ">";
    if (name == "ge") op = ">=";
    if (name == "sameas") {
      if (v.kind() != x->kind()) return false;
      if (v.IsList() || v.IsDict() || v.IsCallable()) return v.Equals(*x) && (v.IsList() ? &v.AsList() == &x->AsList() : true);
      return v.Equals(*x);
    }
    auto r = BinaryOp(op, v, *x);
    if (!r.ok()) return r.status();
    return r->Truthy();
  }
  return Err(absl::StrCat("the test '", name, "' is not supported by tessera's template renderer"));
}

absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    auto c = Compare(a, b);
    if (!c.ok()) return Err(absl::StrCat("'", op, "' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'"));
    return Value::Bool(op == "<" ? *c < 0 : op == ">" ? *c > 0 : op == "<=" ? *c <= 0 : *c >= 0);
  }
  if (op == "in" || op == "notin") {
    auto c = Contains(b, a);
    if (!c.ok()) return c.status();
    return Value::Bool(op == "in" ? *c : !*c);
  }
  if (op == "~") {
    std::string s = a.Str() + b.Str();
    if (s.size() > kMaxString) return Err("a string longer than 64 MiB");
    return Value::String(std::move(s));
  }
  auto unsupported = [&]() {
    return Err(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '", b.TypeName(), "'"));
  };
  if (a.IsNumber() && b.IsNumber()) {
    const bool floats = a.kind() == Kind::kFloat || b.kind() == Kind::kFloat;
    const int64_t x = a.AsInt(), y = b.AsInt();
    const double fx = a.AsFloat(), fy = b.AsFloat();
    int64_t r = 0;
    if (op == "+") {
      if (floats) return Value::Float(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) return Err("integer overflow in +");
      return Value::Int(r);
    }
    if (op == "-") {
      if (floats) return Value::Float(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) return Err("integer overflow in -");
      return Value::Int(r);
    }
    if (op == "*") {
      if (floats) return Value::Float(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) return Err("integer overflow in *");
      return Value::Int(r);
    }
    if (op == "/") {
      if (fy == 0) return Err("division by zero");
      return Value::Float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (floats ? fy == 0 : y == 0) return Err(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (floats) {
        const double q = std::floor(fx / fy);
        return op == "//" ? Value::Float(q) : Value::Float(fx - q * fy);
      }
      if (x == INT64_MIN && y == -1) return Err("integer overflow in //");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return Value::Int(op == "//" ? q : m);
    }
    if (op == "**") {
      if (floats || y < 0) return Value::Float(std::pow(fx, fy));
      int64_t result = 1, base = x;
      for (int64_t e = y; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return Err("integer overflow in **");
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return Err("integer overflow in **");
      }
      return Value::Int(result);
    }
    return unsupported();
  }
  if (op == "+" && a.IsString() && b.IsString()) {
    if (a.AsString().size() + b.AsString().size() > kMaxString) return Err("a string longer than 64 MiB");
    return Value::String(a.AsString() + b.AsString());
  }
  if (op == "+" && a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
    std::vector<Value> out = a.AsList();
    out.insert(out.end(), b.AsList().begin(), b.AsList().end());
    return a.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  if (op == "*" && (a.IsString() || a.IsList()) && (b.kind() == Kind::kInt || b.kind() == Kind::kBool)) {
    const int64_t n = std::max<int64_t>(0, b.AsInt());
    const size_t unit = a.IsString() ? a.AsString().size() : a.AsList().size();
    if (unit > 0 && static_cast<uint64_t>(n) > kMaxString / unit) return Err("a repeated string or list larger than 64 MiB");
    if (a.IsString()) {
      std::string s;
      for (int64_t k = 0; k < n; ++k) s += a.AsString();
      return Value::String(std::move(s));
    }
    std::vector<Value> out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), a.AsList().begin(), a.AsList().end());
    return Value::List(std::move(out));
  }
  if (op == "*" && (b.IsString() || b.IsList()) && (a.kind() == Kind::kInt || a.kind() == Kind::kBool)) return BinaryOp(op, b, a);
  return unsupported();
}

void AddGlobals(Dict* g) {
  g->Set("range", Value::Callable([](const Args& a) -> absl::StatusOr<Value> {
    if (a.positional.empty() || a.positional.size() > 3) return Err("range expects 1 to 3 integer arguments");
    for (const Value& v : a.positional) {
      if (v.kind() != Kind::kInt && v.kind() != Kind::kBool) return Err("range: arguments must be integers");
    }
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].AsInt();
    } else {
      start = a.positional[0].AsInt();
      stop = a.positional[1].AsInt();
      if (a.positional.size() == 3) step = a.positional[2].AsInt();
    }
    if (step == 0) return Err("range: step must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange) {
        return Err(absl::StrCat("range too big: the sandbox refuses ranges larger than ", kMaxRange));
      }
      out.push_back(Value::Int(i));
    }
    return Value::List(std::move(out));
  }));
  auto dict_like = [](bool ns) {
    return Value::Callable([ns](const Args& a) -> absl::StatusOr<Value> {
      Value d = ns ? Value::Namespace() : Value::NewDict();
      for (const Value& p : a.positional) {
        if (!p.IsDict()) return Err(absl::StrCat(ns ? "namespace" : "dict", ": a positional argument must be a mapping"));
        for (const auto& [k, v] : p.AsDict().items) d.AsDict().Set(k, v);
      }
      for (const auto& [k, v] : a.keyword) d.AsDict().Set(k, v);
      return d;
    });
  };
  g->Set("namespace", dict_like(true));
  g->Set("dict", dict_like(false));
  g->Set("raise_exception", Value::Callable([](const Args& a) -> absl::StatusOr<Value> {
    const std::string message = a.Get(0, "message").value_or(Value::String("")).Str();
    return absl::FailedPreconditionError(absl::StrCat("the chat template raised an exception: ", message));
  }));
  g->Set("strftime_now", Value::Callable([](const Args& a) -> absl::StatusOr<Value> {
    const std::string format = a.Get(0, "format").value_or(Value::String("")).Str();
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &tm);
    return Value::String(std::string(buf, n));
  }));
}

}  // namespace tessera::chat
