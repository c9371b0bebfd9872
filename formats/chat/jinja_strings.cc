// The methods of Python's str that chat templates call (strip, split, startswith, replace, ...).
#include <cctype>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"
#include "formats/chat/py_case.h"

namespace tessera::chat {

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
      return Value::String(name == "upper" ? PyUpper(self) : name == "lower" ? PyLower(self) : name == "title" ? PyTitle(self) : PyCapitalize(self));
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


}  // namespace tessera::chat
