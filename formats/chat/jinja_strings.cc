// The methods of Python's str that chat templates call (strip, split, startswith, replace, ...).
#include <string.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"
#include "formats/chat/py_case.h"

namespace tessera::formats::chat {

size_t FindIn(std::string_view s, std::string_view sub, size_t from) {
  if (from > s.size()) return std::string_view::npos;
  if (sub.empty()) return from;
  const void* at = memmem(s.data() + from, s.size() - from, sub.data(), sub.size());
  return at == nullptr ? std::string_view::npos : static_cast<size_t>(static_cast<const char*>(at) - s.data());
}

size_t RFindIn(std::string_view s, std::string_view sub) {
  if (sub.size() > s.size()) return std::string_view::npos;
  const std::string rs(s.rbegin(), s.rend()), rsub(sub.rbegin(), sub.rend());  // The first from the end.
  const size_t at = FindIn(rs, rsub);
  return at == std::string_view::npos ? at : s.size() - at - sub.size();
}

absl::Status AppendChecked(std::string* out, std::string_view piece) {
  if (absl::Status s = CheckStringSize(out->size() + piece.size()); !s.ok()) return s;
  out->append(piece);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Value>> Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<Value> out;
  auto add = [&](std::string piece) -> absl::Status {
    if (absl::Status st = SpendItems(1); !st.ok()) return st;
    out.push_back(Value::String(std::move(piece)));
    return absl::OkStatus();
  };
  if (sep.IsUndefined() || sep.IsNone()) {
    // Runs of whitespace, walked code point by code point.
    auto space_at = [&](size_t i, size_t* len) { return IsPySpace(DecodeUtf8At(s, i, len)); };
    size_t i = 0, len = 1;
    while (i < s.size()) {
      while (i < s.size() && space_at(i, &len)) i += len;
      if (i == s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        absl::Status st = add(s.substr(i));  // The rest as it is, trailing whitespace kept (Python's).
        if (!st.ok()) return st;
        return out;
      }
      size_t e = i;
      while (e < s.size() && !space_at(e, &len)) e += len;
      if (absl::Status st = add(s.substr(i, e - i)); !st.ok()) return st;
      i = e;
    }
    return out;
  }
  if (!sep.IsString() || sep.AsString().empty()) return Err("split: the separator must be a non-empty str or None");
  const std::string& d = sep.AsString();
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t at = FindIn(s, d, start);
    if (at == std::string::npos) break;
    if (absl::Status st = add(s.substr(start, at - start)); !st.ok()) return st;
    start = at + d.size();
  }
  if (absl::Status st = add(s.substr(start)); !st.ok()) return st;
  return out;
}

absl::StatusOr<std::string> Replace(const std::string& s, const std::string& from, const std::string& to,
                                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character: the size is known before building.
    const uint64_t slots = CountCodePoints(s) + 1;
    const uint64_t inserts = count < 0 ? slots : std::min<uint64_t>(static_cast<uint64_t>(count), slots);
    const uint64_t total = to.empty() || inserts <= (UINT64_MAX - s.size()) / to.size()
                               ? s.size() + inserts * to.size()
                               : UINT64_MAX;
    if (absl::Status st = CheckStringSize(total); !st.ok()) return st;
    out.reserve(total);
    uint64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      size_t len = 1;
      DecodeUtf8At(s, i, &len);
      if (n < inserts) out += to, ++n;
      out.append(s, i, len);
      i += len;
    }
    if (n < inserts) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = FindIn(s, from, start);
    if (at == std::string::npos) break;
    if (absl::Status st = AppendChecked(&out, std::string_view(s).substr(start, at - start)); !st.ok()) return st;
    if (absl::Status st = AppendChecked(&out, to); !st.ok()) return st;
    start = at + from.size();
    ++n;
  }
  if (absl::Status st = AppendChecked(&out, std::string_view(s).substr(start)); !st.ok()) return st;
  return out;
}

absl::Status ForEachLine(std::string_view s, const std::function<absl::Status(std::string_view)>& line) {
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      if (absl::Status st = line(s.substr(start, i - start)); !st.ok()) return st;
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) return line(s.substr(start));
  return absl::OkStatus();
}

std::optional<Value> StrMethod(const std::string& self, const std::string& name) {
  // The method keeps a copy of the string and may read it through: charged by its bytes.
  (void)Spend(static_cast<int64_t>(self.size() / RenderBudget::kBytesPerStep));
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
      auto parts = Split(self, sep.value_or(Value()), IntArg(a, 1, "maxsplit", -1));
      if (!parts.ok()) return parts.status();
      return Value::List(*std::move(parts));
    });
  }
  if (name == "splitlines") {
    return m([self](const Args&) -> absl::StatusOr<Value> {
      std::vector<Value> out;
      absl::Status s = ForEachLine(self, [&](std::string_view line) {
        if (absl::Status st = SpendItems(1); !st.ok()) return st;
        out.push_back(Value::String(std::string(line)));
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
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
        if (absl::Status s = Spend(1 + static_cast<int64_t>(o.AsString().size() / RenderBudget::kBytesPerStep));
            !s.ok()) {
          return s;
        }
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
      auto out = Replace(self, *from, *to, IntArg(a, 2, "count", -1));
      if (!out.ok()) return out.status();
      return Value::String(*std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return m([self, name](const Args& a) -> absl::StatusOr<Value> {
      auto sub = StringArg(a, 0, "sub", name.c_str());
      if (!sub.ok()) return sub.status();
      if (name == "count") {
        if (sub->empty()) return Value::Int(static_cast<int64_t>(CountCodePoints(self)) + 1);
        int64_t n = 0;
        for (size_t at = FindIn(self, *sub); at != std::string::npos; at = FindIn(self, *sub, at + sub->size())) ++n;
        return Value::Int(n);
      }
      const size_t at = name == "rfind" ? RFindIn(self, *sub) : FindIn(self, *sub);
      if (at == std::string::npos) {
        if (name == "index") return Err("index: substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(CountCodePoints(std::string_view(self).substr(0, at))));
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
        if (absl::Status s = AppendChecked(&out, k ? self : ""); !s.ok()) return s;
        if (absl::Status s = AppendChecked(&out, (*list)[k].AsString()); !s.ok()) return s;
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


}  // namespace tessera::formats::chat
