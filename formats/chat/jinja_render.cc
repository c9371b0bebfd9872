#include "formats/chat/jinja_render.h"

#include <algorithm>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formats/chat/jinja_budget.h"
#include "formats/chat/jinja_builtins.h"

namespace tessera::formats::chat {
namespace {

struct Scope {
  std::map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

// The error with "line N: " in front, once.
absl::Status AtLine(const absl::Status& s, int line) {
  if (s.ok() || absl::StartsWith(s.message(), "line ")) return s;
  return absl::Status(s.code(), absl::StrCat("line ", line, ": ", s.message()));
}

class Renderer {
 public:
  Renderer(const RenderOptions& options, const Value& context, RenderBudget* budget)
      : options_(options), budget_(*budget) {
    globals_ = Value::NewDict();
    AddGlobals(&globals_.AsDict());
    // namespace() as Jinja's, remembering each one: a namespace may come to hold itself (ns.self =
    // ns), which shared ownership alone would never release; they are emptied when the rendering ends.
    const Value make = *globals_.AsDict().Find("namespace");
    globals_.AsDict().Set("namespace", Value::Callable([this, make](const Args& a) -> absl::StatusOr<Value> {
      auto ns = make.AsFunction()(a);
      if (ns.ok()) namespaces_.push_back(*ns);
      return ns;
    }));
    root_ = std::make_shared<Scope>();
    if (context.IsDict()) {
      for (const auto& [k, v] : context.AsDict().items) root_->vars[k] = v;
    }
  }

  ~Renderer() {
    for (Value& ns : namespaces_) ns.AsDict().items.clear();
  }

  absl::Status Run(const Body& body, std::string* out) { return Exec(body, root_, out); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Value Lookup(const std::string& name, const ScopePtr& scope) const {
    for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
      if (auto it = s->vars.find(name); it != s->vars.end()) return it->second;
    }
    if (const Value* g = globals_.AsDict().Find(name)) return *g;
    return Value();
  }

  absl::Status Exec(const Body& body, const ScopePtr& scope, std::string* out) {
    if (nesting_ >= options_.max_nesting) return TooNested();
    Level level(&nesting_);
    for (const auto& stmt : body) {
      if (absl::Status s = ExecOne(*stmt, scope, out); !s.ok()) return AtLine(s, stmt->line);
      if (out->size() > options_.max_output_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the rendering is longer than ", options_.max_output_bytes, " bytes"));
      }
      if (flow_ != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Unpack(const std::vector<std::string>& targets, const Value& v, Scope* scope) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = v;
      return absl::OkStatus();
    }
    auto items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrCat(items->size() < targets.size() ? "not enough" : "too many",
                                                     " values to unpack (expected ", targets.size(), ", got ",
                                                     items->size(), ")"));
    }
    for (size_t k = 0; k < targets.size(); ++k) scope->vars[targets[k]] = (*items)[k];
    return absl::OkStatus();
  }

  // Charges the budget; its error once spent (by this or by an operation that stopped early).
  absl::Status Step(int64_t n = 1) {
    budget_.Charge(n);
    return budget_.status();
  }

  // One more level of `*depth` (calls, or nesting) for its lifetime.
  class Level {
   public:
    explicit Level(int* depth) : depth_(depth) { ++*depth_; }
    ~Level() { --*depth_; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;

   private:
    int* depth_;
  };
  absl::Status TooDeep(const std::string& what) const {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": calls nested deeper than ", options_.max_call_depth));
  }
  absl::Status TooNested() const {
    return absl::ResourceExhaustedError(absl::StrCat("blocks and expressions nested deeper than ", options_.max_nesting,
                                                     ", counting those of the calls in progress"));
  }

  absl::Status ExecOne(const Stmt& st, const ScopePtr& scope, std::string* out) {
    if (absl::Status s = Step(); !s.ok()) return s;
    switch (st.kind) {
      case Stmt::Kind::kText: return Print(Value(), st.text, out);
      case Stmt::Kind::kOutput: {
        auto v = Eval(*st.expr, scope);
        if (!v.ok()) return v.status();
        return Print(*v, out);
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : st.branches) {
          auto c = Eval(*cond, scope);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return Exec(body, scope, out);
        }
        return Exec(st.else_body, scope, out);
      case Stmt::Kind::kFor: return ExecFor(st, scope, out);
      case Stmt::Kind::kSet: {
        Value v;
        if (st.expr != nullptr) {
          auto e = Eval(*st.expr, scope);
          if (!e.ok()) return e.status();
          v = *e;
        } else {
          std::string text;
          if (absl::Status s = Exec(st.body, scope, &text); !s.ok()) return s;
          v = Value::String(std::move(text));
        }
        if (!st.attr.empty()) {
          Value ns = Lookup(st.targets[0], scope);
          if (!ns.IsNamespace()) {
            return absl::InvalidArgumentError(
                absl::StrCat("cannot assign attribute on non-namespace object '", st.targets[0], "'"));
          }
          ns.AsDict().Set(st.attr, std::move(v));
          return absl::OkStatus();
        }
        return Unpack(st.targets, v, scope.get());
      }
      case Stmt::Kind::kMacro: scope->vars[st.name] = MacroOf(st, scope); return absl::OkStatus();
      case Stmt::Kind::kBreak: flow_ = Flow::kBreak; return absl::OkStatus();
      case Stmt::Kind::kContinue: flow_ = Flow::kContinue; return absl::OkStatus();
      case Stmt::Kind::kGeneration: return Exec(st.body, scope, out);
      case Stmt::Kind::kCallBlock: {
        const Stmt* block = &st;
        Value caller = Value::Callable([this, block, scope](const Args&) -> absl::StatusOr<Value> {
          if (depth_ >= options_.max_call_depth) return TooDeep("caller()");
          Level call(&depth_);
          std::string text;
          absl::Status s = Exec(block->body, scope, &text);
          flow_ = Flow::kNormal;
          if (!s.ok()) return s;
          return Value::String(std::move(text));
        });
        auto v = Call(*st.expr, scope, &caller);
        if (!v.ok()) return v.status();
        return Print(*v, out);
      }
    }
    return absl::OkStatus();
  }

  absl::Status ExecFor(const Stmt& st, const ScopePtr& scope, std::string* out) {
    auto iterable = Eval(*st.expr, scope);
    if (!iterable.ok()) return iterable.status();
    auto all = Iterate(*iterable);
    if (!all.ok()) return all.status();
    std::vector<Value> items;
    if (st.filter != nullptr) {
      for (const Value& item : *all) {
        if (absl::Status s = Step(); !s.ok()) return s;
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        if (absl::Status s = Unpack(st.targets, item, probe.get()); !s.ok()) return s;
        auto keep = Eval(*st.filter, probe);
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) items.push_back(item);
      }
    } else {
      items = *std::move(all);
    }
    if (items.empty()) return Exec(st.else_body, scope, out);
    const int64_t n = static_cast<int64_t>(items.size());
    // One `loop` object per loop, updated in place each iteration (as Jinja's LoopContext).
    auto index = std::make_shared<int64_t>(0);
    Value loop = Value::NewDict();
    Dict& l = loop.AsDict();
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0",
                            "previtem", "nextitem"}) {
      l.items.emplace_back(key, Value());
    }
    l.Set("cycle", Value::Callable([index](const Args& a) -> absl::StatusOr<Value> {
      if (a.positional.empty()) return absl::InvalidArgumentError("loop.cycle needs at least one value");
      return a.positional[static_cast<size_t>(*index) % a.positional.size()];
    }));
    for (int64_t i = 0; i < n; ++i) {
      if (absl::Status s = Step(); !s.ok()) return s;
      auto iter = std::make_shared<Scope>();  // Assignments in the body live for one iteration.
      iter->parent = scope;
      if (absl::Status s = Unpack(st.targets, items[static_cast<size_t>(i)], iter.get()); !s.ok()) return s;
      *index = i;
      l.items[0].second = Value::Int(i + 1);
      l.items[1].second = Value::Int(i);
      l.items[2].second = Value::Int(n - i);
      l.items[3].second = Value::Int(n - i - 1);
      l.items[4].second = Value::Bool(i == 0);
      l.items[5].second = Value::Bool(i == n - 1);
      l.items[6].second = Value::Int(n);
      l.items[7].second = Value::Int(1);
      l.items[8].second = Value::Int(0);
      l.items[9].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value();
      l.items[10].second = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value();
      iter->vars["loop"] = loop;
      if (absl::Status s = Exec(st.body, iter, out); !s.ok()) return s;
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    return absl::OkStatus();
  }

  // The macro sees the scope it was defined in (held weakly: the macro lives in that scope, and a
  // strong reference would keep both alive after the rendering; once that scope is gone, the top level).
  Value MacroOf(const Stmt& st, const ScopePtr& defined_in) {
    const Stmt* macro = &st;
    std::weak_ptr<Scope> weak = defined_in;
    return Value::Callable([this, macro, weak](const Args& a) -> absl::StatusOr<Value> {
      ScopePtr defined_in = weak.lock();
      if (defined_in == nullptr) defined_in = root_;
      if (depth_ >= options_.max_call_depth) return TooDeep(absl::StrCat("macro '", macro->name, "'"));
      Level call(&depth_);  // From here: a default value that calls the macro is a nested call.
      if (a.positional.size() > macro->params.size()) {
        return absl::InvalidArgumentError(absl::StrCat("macro '", macro->name, "' takes ", macro->params.size(),
                                                       " arguments, ", a.positional.size(), " given"));
      }
      auto scope = std::make_shared<Scope>();
      scope->parent = defined_in;
      for (size_t k = 0; k < macro->params.size(); ++k) {
        if (k < a.positional.size()) {
          scope->vars[macro->params[k]] = a.positional[k];
          continue;
        }
        bool given = false;
        for (const auto& [name, v] : a.keyword) {
          if (name == macro->params[k]) scope->vars[name] = v, given = true;
        }
        if (given) continue;
        if (macro->defaults[k] != nullptr) {
          auto d = Eval(*macro->defaults[k], scope);
          if (!d.ok()) return d.status();
          scope->vars[macro->params[k]] = *d;
        } else {
          scope->vars[macro->params[k]] = Value();
        }
      }
      for (const auto& [name, v] : a.keyword) {
        if (name == "caller") {
          scope->vars["caller"] = v;
          continue;
        }
        if (std::find(macro->params.begin(), macro->params.end(), name) == macro->params.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("macro '", macro->name, "' takes no keyword argument '", name, "'"));
        }
      }
      std::string text;
      absl::Status s = Exec(macro->body, scope, &text);
      flow_ = Flow::kNormal;
      if (!s.ok()) return s;
      return Value::String(std::move(text));
    });
  }

  // Arguments of a call, filter or test node: items[1..] (the last kwarg_names.size() by name).
  absl::StatusOr<Args> ArgsOf(const Expr& e, const ScopePtr& scope) {
    Args a;
    const size_t n = e.items.size() - 1, kw = e.kwarg_names.size();
    for (size_t k = 0; k < n; ++k) {
      auto v = Eval(*e.items[k + 1], scope);
      if (!v.ok()) return v.status();
      if (k < n - kw) {
        a.positional.push_back(*v);
      } else {
        a.keyword.emplace_back(e.kwarg_names[k - (n - kw)], *v);
      }
    }
    return a;
  }

  absl::StatusOr<Value> Call(const Expr& e, const ScopePtr& scope, const Value* caller = nullptr) {
    auto callee = Eval(*e.items[0], scope);
    if (!callee.ok()) return callee;
    if (!callee->IsCallable()) {
      std::string what = e.items[0]->kind == Expr::Kind::kName ? e.items[0]->name
                         : e.items[0]->kind == Expr::Kind::kAttr ? e.items[0]->name
                                                                 : "the value";
      if (callee->IsUndefined()) return absl::InvalidArgumentError(absl::StrCat("'", what, "' is undefined"));
      return absl::InvalidArgumentError(absl::StrCat("'", what, "' (a ", callee->TypeName(), ") is not callable"));
    }
    auto args = ArgsOf(e, scope);
    if (!args.ok()) return args.status();
    if (caller != nullptr) args->keyword.emplace_back("caller", *caller);
    return callee->AsFunction()(*args);
  }

  // `v` printed into `out` (Python's str()) — or `text`, when given — charged by its bytes; the budget's
  // error when printing spent it.
  absl::Status Print(const Value& v, std::string* out) { return Print(v, {}, out); }
  absl::Status Print(const Value& v, std::string_view text, std::string* out) {
    std::string printed;
    if (v.IsString()) {
      text = v.AsString();
    } else if (!v.IsUndefined()) {
      printed = v.Str();
      if (budget_.spent()) return budget_.status();
      text = printed;
    }
    if (absl::Status s = Step(static_cast<int64_t>(text.size() / RenderBudget::kBytesPerStep)); !s.ok()) return s;
    out->append(text);
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope) {
    if (nesting_ >= options_.max_nesting) return AtLine(TooNested(), e.line);
    Level level(&nesting_);
    auto v = EvalInner(e, scope);
    // An operation that spent the budget may have stopped early with a partial result or another error.
    if (budget_.spent()) return AtLine(budget_.status(), e.line);
    if (!v.ok()) return AtLine(v.status(), e.line);
    // What the value costs each time it is computed: its items, or its bytes.
    const int64_t size = v->IsString() ? static_cast<int64_t>(v->AsString().size() / RenderBudget::kBytesPerStep)
                         : v->IsList()  ? static_cast<int64_t>(v->AsList().size())
                         : v->IsDict()  ? static_cast<int64_t>(v->AsDict().items.size())
                                        : 0;
    if (absl::Status s = Step(size); !s.ok()) return AtLine(s, e.line);
    if (v->depth() > kMaxValueDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", e.line, ": lists and dicts nested deeper than ", kMaxValueDepth, " levels"));
    }
    return v;
  }
  static constexpr int kMaxValueDepth = 256;

  absl::StatusOr<Value> EvalInner(const Expr& e, const ScopePtr& scope) {
    if (absl::Status s = Step(); !s.ok()) return s;
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: return Lookup(e.name, scope);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const auto& x : e.items) {
          auto v = Eval(*x, scope);
          if (!v.ok()) return v;
          items.push_back(*v);
        }
        return e.kind == Expr::Kind::kTuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
      }
      case Expr::Kind::kDict: {
        Value d = Value::NewDict();
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          auto key = Eval(*e.items[k], scope);
          if (!key.ok()) return key;
          auto v = Eval(*e.items[k + 1], scope);
          if (!v.ok()) return v;
          if (!key->IsString()) return absl::InvalidArgumentError("dict keys must be strings here");
          d.AsDict().Set(key->AsString(), *v);
        }
        return d;
      }
      case Expr::Kind::kAttr: {
        auto obj = Eval(*e.items[0], scope);
        if (!obj.ok()) return obj;
        if (obj->IsUndefined() && e.items[0]->kind == Expr::Kind::kName) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", e.items[0]->name, "' is undefined (reading its attribute '", e.name, "')"));
        }
        return GetAttr(*obj, e.name);
      }
      case Expr::Kind::kItem: {
        auto obj = Eval(*e.items[0], scope);
        if (!obj.ok()) return obj;
        auto key = Eval(*e.items[1], scope);
        if (!key.ok()) return key;
        if (obj->IsUndefined() && e.items[0]->kind == Expr::Kind::kName) {
          return absl::InvalidArgumentError(
              absl::StrCat("'", e.items[0]->name, "' is undefined (reading its item ", key->Repr(), ")"));
        }
        return GetItem(*obj, *key);
      }
      case Expr::Kind::kSlice: {
        auto obj = Eval(*e.items[0], scope);
        if (!obj.ok()) return obj;
        Value parts[3];
        for (int k = 0; k < 3; ++k) {
          if (e.items[k + 1] == nullptr) continue;
          auto p = Eval(*e.items[k + 1], scope);
          if (!p.ok()) return p;
          parts[k] = *p;
        }
        return Slice(*obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: return Call(e, scope);
      case Expr::Kind::kFilter: {
        auto input = Eval(*e.items[0], scope);
        if (!input.ok()) return input;
        auto args = ArgsOf(e, scope);
        if (!args.ok()) return args.status();
        return ApplyFilter(e.name, *input, *args);
      }
      case Expr::Kind::kTest: {
        auto input = Eval(*e.items[0], scope);
        if (!input.ok()) return input;
        auto args = ArgsOf(e, scope);
        if (!args.ok()) return args.status();
        auto r = ApplyTest(e.name, *input, *args);
        if (!r.ok()) return r.status();
        return Value::Bool(*r != e.negate);
      }
      case Expr::Kind::kUnary: {
        auto a = Eval(*e.items[0], scope);
        if (!a.ok()) return a;
        if (e.name == "not") return Value::Bool(!a->Truthy());
        if (!a->IsNumber()) {
          return absl::InvalidArgumentError(absl::StrCat("bad operand type for unary ", e.name, ": '", a->TypeName(), "'"));
        }
        if (e.name == "+") return a->kind() == Value::Kind::kBool ? Value::Int(a->AsInt()) : *a;
        if (a->kind() == Value::Kind::kFloat) return Value::Float(-a->AsFloat());
        if (a->AsInt() == INT64_MIN) return absl::InvalidArgumentError("integer overflow in unary -");
        return Value::Int(-a->AsInt());
      }
      case Expr::Kind::kBinary: {
        auto a = Eval(*e.items[0], scope);
        if (!a.ok()) return a;
        if (e.name == "and") return a->Truthy() ? Eval(*e.items[1], scope) : a;
        if (e.name == "or") return a->Truthy() ? a : Eval(*e.items[1], scope);
        auto b = Eval(*e.items[1], scope);
        if (!b.ok()) return b;
        if ((a->IsUndefined() || b->IsUndefined()) && e.name != "==" && e.name != "!=" && e.name != "~" &&
            e.name != "in" && e.name != "notin") {
          return absl::InvalidArgumentError(absl::StrCat("an undefined value in '", e.name, "'"));
        }
        return BinaryOp(e.name, *a, *b);
      }
      case Expr::Kind::kCondition: {
        auto c = Eval(*e.items[0], scope);
        if (!c.ok()) return c;
        if (c->Truthy()) return Eval(*e.items[1], scope);
        if (e.items[2] == nullptr) return Value();
        return Eval(*e.items[2], scope);
      }
    }
    return Value();
  }

  const RenderOptions options_;
  RenderBudget& budget_;
  Value globals_;
  ScopePtr root_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;    // Calls of the template's own code in progress.
  int nesting_ = 0;  // Bodies and expressions being run, across those calls: the renderer's recursion.
  std::vector<Value> namespaces_;
};

}  // namespace

absl::StatusOr<std::string> RenderTemplate(const Body& body, const Value& context, const RenderOptions& options) {
  RenderBudget budget(options.max_steps, options.max_string_bytes);
  RenderBudget::Scope in_effect(&budget);
  Renderer r(options, context, &budget);
  std::string out;
  if (absl::Status s = r.Run(body, &out); !s.ok()) return s;
  return out;
}

}  // namespace tessera::formats::chat
