// Jinja's filters (and transformers' tojson) as chat templates use them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"
#include "formats/chat/py_case.h"

namespace tessera::formats::chat {

namespace {

using Kind = Value::Kind;

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
      if (absl::Status s = Spend(1); !s.ok()) return s;  // A step per part (map applies a path to each item).
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      int64_t index = 0;
      const bool is_index = digits && absl::SimpleAtoi(part, &index);  // Past int64: no such item either way.
      auto next = is_index ? GetItem(cur, Value::Int(index)) : GetItem(cur, Value::String(part));
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
  std::string out;
  bool first_line = true;
  absl::Status built = ForEachLine(s, [&](std::string_view line) -> absl::Status {
    if (absl::Status st = Spend(1); !st.ok()) return st;
    if (!first_line) {
      if (absl::Status st = AppendChecked(&out, "\n"); !st.ok()) return st;
      if (blank || !line.empty()) {
        if (absl::Status st = AppendChecked(&out, pad); !st.ok()) return st;
      }
    }
    first_line = false;
    return AppendChecked(&out, line);
  });
  if (!built.ok()) return built;
  if (first) {
    if (absl::Status st = CheckStringSize(pad.size() + out.size()); !st.ok()) return st;
    out = pad + out;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<std::vector<Value>> SortedBy(std::vector<Value> items, const Args& a, size_t attr_index) {
  Args attr_args;
  if (auto at = a.Get(attr_index, "attribute")) attr_args.positional.push_back(*at);
  const bool case_sensitive = BoolArg(a, 1, "case_sensitive", false);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) {
    if (absl::Status s = Spend(1); !s.ok()) return s;
    auto k = AttrOrItem(v, attr_args, "sort");
    if (!k.ok()) return k.status();
    Value key = *k;
    if (key.IsString() && !case_sensitive) {
      if (absl::Status s = Spend(static_cast<int64_t>(key.AsString().size() / RenderBudget::kBytesPerStep)); !s.ok()) {
        return s;
      }
      key = Value::String(PyLower(key.AsString()));
    }
    keyed.emplace_back(std::move(key), std::move(v));
  }
  absl::Status bad;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto c = Compare(x.first, y.first);
    if (!c.ok()) bad = c.status();
    return c.ok() && *c < 0;
  });
  if (!bad.ok()) return bad;  // The budget's error when Compare spent it.
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
    if (absl::Status s = Spend(1); !s.ok()) return s;
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

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Args& a) {
  // A filter may read its input through: charged by its bytes (again, when map applies it to items).
  if (v.IsString()) {
    if (absl::Status s = Spend(static_cast<int64_t>(v.AsString().size() / RenderBudget::kBytesPerStep)); !s.ok()) {
      return s;
    }
  }
  if (name == "length" || name == "count") return Value::Int(Length(v));
  if (name == "string") return Value::String(v.Str());
  if (name == "safe") return v;
  if (name == "trim") {
    auto chars = a.Get(0, "chars");
    const std::string s = v.Str();
    return Value::String(std::string(PyStrip(s, true, true, chars && chars->IsString() ? &chars->AsString() : nullptr)));
  }
  if (name == "upper") return Value::String(PyUpper(v.Str()));
  if (name == "lower") return Value::String(PyLower(v.Str()));
  if (name == "title") return Value::String(PyTitle(v.Str()));
  if (name == "capitalize") return Value::String(PyCapitalize(v.Str()));
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
    if (absl::Status s = SpendItems(v.AsDict().items.size()); !s.ok()) return s;
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
      if (absl::Status s = AppendChecked(&out, k ? sep : ""); !s.ok()) return s;
      if (absl::Status s = AppendChecked(&out, x->Str()); !s.ok()) return s;
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    auto from = StringArg(a, 0, "old", "replace");
    auto to = StringArg(a, 1, "new", "replace");
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    auto out = Replace(v.Str(), *from, *to, IntArg(a, 2, "count", -1));
    if (!out.ok()) return out.status();
    return Value::String(*std::move(out));
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
    if (v.IsNumber()) {
      if (name == "float") return Value::Float(v.AsFloat());
      if (v.kind() != Kind::kFloat) return Value::Int(v.AsInt());
      if (std::isnan(v.AsFloat())) return def;  // Python's ValueError, which Jinja's filter turns into the default.
      auto i = FloatToInt(v.AsFloat());
      if (!i.ok()) return i.status();
      return Value::Int(*i);
    }
    if (v.IsString()) {
      const std::string s(PyStrip(v.AsString(), true, true));
      char* end = nullptr;
      errno = 0;
      if (name == "int") {
        const long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::Int(x);
        const double f = std::strtod(s.c_str(), &end);  // Jinja's int filter reads "3.7" as 3.
        if (!s.empty() && end == s.c_str() + s.size() && !std::isnan(f)) {
          auto i = FloatToInt(f);
          if (!i.ok()) return i.status();
          return Value::Int(*i);
        }
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
      if (absl::Status s = Spend(1); !s.ok()) return s;
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
      bool seen = false;
      for (size_t k = 0; k < out.size() && !seen; ++k) seen = out[k].Equals(x);
      if (BudgetSpent()) return RenderBudget::Current()->status();  // Equals is charged: a step per pair.
      if (!seen) out.push_back(x);
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
        if (absl::Status s = Spend(1); !s.ok()) return s;
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
      if (absl::Status s = Spend(1); !s.ok()) return s;
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
    const std::string s = v.Str();
    std::string out;
    for (size_t i = 0; i < s.size();) {
      const size_t special = s.find_first_of("&<>\"'", i);
      const size_t end = special == std::string::npos ? s.size() : special;
      if (absl::Status st = AppendChecked(&out, std::string_view(s).substr(i, end - i)); !st.ok()) return st;
      if (end == s.size()) break;
      const char* entity = s[end] == '&' ? "&amp;" : s[end] == '<' ? "&lt;" : s[end] == '>' ? "&gt;"
                           : s[end] == '"' ? "&#34;" : "&#39;";
      if (absl::Status st = AppendChecked(&out, entity); !st.ok()) return st;
      i = end + 1;
    }
    return Value::String(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.IsDict()) return Err("dictsort: a mapping is needed");
    if (absl::Status s = SpendItems(v.AsDict().items.size()); !s.ok()) return s;
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
  if (name == "wordcount") {
    auto words = Split(v.Str(), Value(), -1);
    if (!words.ok()) return words.status();
    return Value::Int(static_cast<int64_t>(words->size()));
  }
  return Err(absl::StrCat("the filter '", name, "' is not supported by tessera's template renderer"));
}


}  // namespace tessera::formats::chat
