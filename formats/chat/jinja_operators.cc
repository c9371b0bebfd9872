// Jinja's operators and tests with Python's semantics, and the helpers the other builtins share
// (jinja_builtins_internal.h).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_builtins.h"
#include "formats/chat/jinja_builtins_internal.h"
#include "formats/chat/py_case.h"

namespace tessera::formats::chat {

using Kind = Value::Kind;

absl::Status Err(const std::string& what) { return absl::InvalidArgumentError(what); }

absl::StatusOr<int64_t> FloatToInt(double f) {
  // The doubles in [-2^63, 2^63) convert exactly; others (and nan) do not fit int64.
  if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0)) {
    return Err(absl::StrCat("cannot convert float ", FloatRepr(f), " to an integer (it does not fit 64 bits)"));
  }
  return static_cast<int64_t>(f);
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return static_cast<int64_t>(CountCodePoints(v.AsString()));
    case Kind::kList: return static_cast<int64_t>(v.AsList().size());
    case Kind::kDict: return static_cast<int64_t>(v.AsDict().items.size());
    default: return 0;
  }
}

// Python's ordering for sort, min, max and < (numbers, strings, lists); an error otherwise.
absl::StatusOr<int> Compare(const Value& a, const Value& b, int level) {
  if (level > Value::kMaxNesting) return Err("values nested too deep to compare");
  if (absl::Status s = Spend(1); !s.ok()) return s;  // A step per pair compared, and per 64 bytes of strings.
  if (a.IsNumber() && b.IsNumber()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      return a.AsFloat() < b.AsFloat() ? -1 : a.AsFloat() > b.AsFloat() ? 1 : 0;
    }
    return a.AsInt() < b.AsInt() ? -1 : a.AsInt() > b.AsInt() ? 1 : 0;
  }
  if (a.IsString() && b.IsString()) {
    const size_t bytes = std::min(a.AsString().size(), b.AsString().size());
    if (absl::Status s = Spend(static_cast<int64_t>(bytes / RenderBudget::kBytesPerStep)); !s.ok()) return s;
    const int c = a.AsString().compare(b.AsString());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
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
      return FindIn(container.AsString(), x.AsString()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.AsList()) {
        if (v.Equals(x)) return true;
        if (BudgetSpent()) return RenderBudget::Current()->status();  // Equals is charged.
      }
      return false;
    case Kind::kDict: return x.IsString() && container.AsDict().Find(x.AsString()) != nullptr;
    default: return Err(absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

Value Pair(const std::string& k, const Value& v) { return Value::Tuple({Value::String(k), v}); }

// Python's str.split(sep, maxsplit).
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

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Args& a) {
  if (v.IsString()) {  // As a filter's input (select applies tests to items).
    if (absl::Status s = Spend(static_cast<int64_t>(v.AsString().size() / RenderBudget::kBytesPerStep)); !s.ok()) {
      return s;
    }
  }
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
      if (v.IsList()) return &v.AsList() == &x->AsList();
      if (v.IsDict() || v.IsCallable()) return v.Equals(*x);
      return v.Equals(*x);
    }
    auto r = BinaryOp(op, v, *x);
    if (!r.ok()) return r.status();
    return r->Truthy();
  }
  return Err(absl::StrCat("the test '", name, "' is not supported by tessera's template renderer"));
}

absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==" || op == "!=") {
    const bool equal = a.Equals(b);
    if (BudgetSpent()) return RenderBudget::Current()->status();
    return Value::Bool(equal == (op == "=="));
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    auto c = Compare(a, b);
    if (BudgetSpent()) return RenderBudget::Current()->status();
    if (!c.ok()) return Err(absl::StrCat("'", op, "' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'"));
    return Value::Bool(op == "<" ? *c < 0 : op == ">" ? *c > 0 : op == "<=" ? *c <= 0 : *c >= 0);
  }
  if (op == "in" || op == "notin") {
    auto c = Contains(b, a);
    if (!c.ok()) return c.status();
    return Value::Bool(op == "in" ? *c : !*c);
  }
  if (op == "~") {
    std::string s = a.Str();
    if (absl::Status st = AppendChecked(&s, b.Str()); !st.ok()) return st;
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
    if (absl::Status st = CheckStringSize(a.AsString().size() + b.AsString().size()); !st.ok()) return st;
    return Value::String(a.AsString() + b.AsString());
  }
  if (op == "+" && a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
    // Charged before the copy is made.
    if (absl::Status st = SpendItems(static_cast<uint64_t>(Length(a) + Length(b))); !st.ok()) return st;
    std::vector<Value> out = a.AsList();
    out.insert(out.end(), b.AsList().begin(), b.AsList().end());
    return a.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  if (op == "*" && (a.IsString() || a.IsList()) && (b.kind() == Kind::kInt || b.kind() == Kind::kBool)) {
    const int64_t n = std::max<int64_t>(0, b.AsInt());
    const size_t unit = a.IsString() ? a.AsString().size() : a.AsList().size();
    if (unit == 0 || n == 0) return a.IsString() ? Value::String("") : a.IsTuple() ? Value::Tuple({}) : Value::List({});
    // Checked before anything is made: a string's bytes, a list's items.
    const uint64_t total = static_cast<uint64_t>(n) > UINT64_MAX / unit ? UINT64_MAX : static_cast<uint64_t>(n) * unit;
    if (a.IsString()) {
      if (absl::Status st = CheckStringSize(total); !st.ok()) return st;
    } else if (absl::Status st = SpendItems(total); !st.ok()) {
      return st;
    }
    if (a.IsString()) {
      std::string s;
      s.reserve(total);
      s = a.AsString();
      while (s.size() < total) s.append(s, 0, std::min<size_t>(s.size(), total - s.size()));  // Doubling.
      return Value::String(std::move(s));
    }
    std::vector<Value> out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), a.AsList().begin(), a.AsList().end());
    return a.IsTuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  if (op == "*" && (b.IsString() || b.IsList()) && (a.kind() == Kind::kInt || a.kind() == Kind::kBool)) return BinaryOp(op, b, a);
  return unsupported();
}


}  // namespace tessera::formats::chat
