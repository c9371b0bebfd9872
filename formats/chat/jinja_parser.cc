#include "formats/chat/jinja_parser.h"

#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formats/chat/jinja_lexer.h"

namespace tessera::formats::chat {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string end;
    if (absl::Status s = Statements({}, &body, &end); !s.ok()) return s;
    if (!end.empty()) return Error(absl::StrCat("unexpected '", end, "'"));
    return body;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().text == op; }
  bool IsName(const char* name) const { return Cur().type == T::kName && Cur().text == name; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    ++i_;
    return true;
  }
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", Cur().line, ": ", what));
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kEof: return "the end of the template";
      case T::kVarEnd: return "'}}'";
      case T::kBlockEnd: return "'%}'";
      case T::kText: return "text";
      default: return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(const char* op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", op, "', found ", Describe(Cur())));
  }
  absl::Status ExpectType(T type, const char* what) {
    if (Cur().type == type) {
      ++i_;
      return absl::OkStatus();
    }
    return Error(absl::StrCat("expected ", what, ", found ", Describe(Cur())));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != T::kName) return Error(absl::StrCat("expected a name, found ", Describe(Cur())));
    return t_[i_++].text;
  }

  // Items separated by commas (a trailing one allowed) up to `close`, which it consumes.
  absl::Status Separated(const char* close, const std::function<absl::Status()>& item) {
    for (bool first = true; !IsOp(close); first = false) {
      if (!first) {
        if (absl::Status st = Expect(","); !st.ok()) return st;
        if (IsOp(close)) break;
      }
      if (absl::Status st = item(); !st.ok()) return st;
    }
    ++i_;
    return absl::OkStatus();
  }

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- Statements ----

  // Statements until a block tag whose name is in `ends` (left in *end, the tag's name consumed) or
  // the end of the template (*end empty).
  absl::Status Statements(const std::set<std::string>& ends, Body* body, std::string* end) {
    while (true) {
      const Token& tok = Cur();
      if (tok.type == T::kEof) {
        if (!ends.empty()) {
          return Error(absl::StrCat("the template ended inside a block: expected ", absl::StrJoin(ends, " or ")));
        }
        end->clear();
        return absl::OkStatus();
      }
      if (tok.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body->push_back(std::move(s));
        ++i_;
        continue;
      }
      if (tok.type == T::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = tok.line;
        auto e = Tuple(/*condexpr=*/true, /*explicit_parens=*/false);
        if (!e.ok()) return e.status();
        s->expr = *std::move(e);
        if (absl::Status st = ExpectType(T::kVarEnd, "'}}'"); !st.ok()) return st;
        body->push_back(std::move(s));
        continue;
      }
      if (tok.type != T::kBlockBegin) return Error(absl::StrCat("unexpected ", Describe(tok)));
      ++i_;
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      if (ends.count(*name)) {
        *end = *name;
        return absl::OkStatus();
      }
      auto stmt = Statement(*name, tok.line);
      if (!stmt.ok()) return stmt.status();
      body->push_back(*std::move(stmt));
    }
  }

  absl::Status EndTag() { return ExpectType(T::kBlockEnd, "'%}'"); }

  absl::StatusOr<std::unique_ptr<Stmt>> Statement(const std::string& name, int line) {
    Nest nest(&depth_);
    if (depth_ > kMaxDepth) return TooDeep();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (name == "if") {
      s->kind = Stmt::Kind::kIf;
      std::string which = "if";
      while (true) {
        ExprPtr cond;
        if (which != "else") {
          auto c = Tuple(/*condexpr=*/false, false);
          if (!c.ok()) return c.status();
          cond = *std::move(c);
        }
        if (absl::Status st = EndTag(); !st.ok()) return st;
        Body body;
        if (absl::Status st = Statements(which == "else" ? std::set<std::string>{"endif"}
                                                          : std::set<std::string>{"elif", "else", "endif"},
                                         &body, &end);
            !st.ok()) {
          return st;
        }
        if (which == "else") {
          s->else_body = std::move(body);
        } else {
          s->branches.emplace_back(std::move(cond), std::move(body));
        }
        which = end;
        if (end == "endif") break;
      }
      if (absl::Status st = EndTag(); !st.ok()) return st;
      return s;
    }
    if (name == "for") {
      s->kind = Stmt::Kind::kFor;
      if (absl::Status st = Targets(&s->targets, /*allow_attr=*/nullptr); !st.ok()) return st;
      if (!SkipName("in")) return Error(absl::StrCat("expected 'in' in a for loop, found ", Describe(Cur())));
      auto iter = Tuple(/*condexpr=*/false, false);
      if (!iter.ok()) return iter.status();
      s->expr = *std::move(iter);
      if (SkipName("if")) {
        auto f = Tuple(/*condexpr=*/false, false);
        if (!f.ok()) return f.status();
        s->filter = *std::move(f);
      }
      if (IsName("recursive")) return Error("recursive for loops are not supported by tessera's template renderer");
      if (absl::Status st = EndTag(); !st.ok()) return st;
      if (absl::Status st = Statements({"else", "endfor"}, &s->body, &end); !st.ok()) return st;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      if (end == "else") {
        if (absl::Status st = Statements({"endfor"}, &s->else_body, &end); !st.ok()) return st;
        if (absl::Status st = EndTag(); !st.ok()) return st;
      }
      return s;
    }
    if (name == "set") {
      s->kind = Stmt::Kind::kSet;
      if (absl::Status st = Targets(&s->targets, &s->attr); !st.ok()) return st;
      if (SkipOp("=")) {
        auto e = Tuple(/*condexpr=*/true, false);
        if (!e.ok()) return e.status();
        s->expr = *std::move(e);
        if (absl::Status st = EndTag(); !st.ok()) return st;
        return s;
      }
      if (s->targets.size() != 1 || !s->attr.empty()) return Error("a block set assigns one name");
      if (absl::Status st = EndTag(); !st.ok()) return st;
      if (absl::Status st = Statements({"endset"}, &s->body, &end); !st.ok()) return st;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      return s;
    }
    if (name == "macro") {
      s->kind = Stmt::Kind::kMacro;
      auto n = ExpectName();
      if (!n.ok()) return n.status();
      s->name = *n;
      if (absl::Status st = Expect("("); !st.ok()) return st;
      absl::Status params = Separated(")", [&]() -> absl::Status {
        auto p = ExpectName();
        if (!p.ok()) return p.status();
        s->params.push_back(*p);
        ExprPtr def;
        if (SkipOp("=")) {
          auto d = Expression(/*condexpr=*/true);
          if (!d.ok()) return d.status();
          def = *std::move(d);
        }
        s->defaults.push_back(std::move(def));
        return absl::OkStatus();
      });
      if (!params.ok()) return params;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      if (absl::Status st = Statements({"endmacro"}, &s->body, &end); !st.ok()) return st;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      return s;
    }
    if (name == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      if (IsOp("(")) return Error("call blocks with caller arguments are not supported by tessera's template renderer");
      auto e = Expression(/*condexpr=*/true);
      if (!e.ok()) return e.status();
      if ((*e)->kind != Expr::Kind::kCall) return Error("a call block needs a call");
      s->expr = *std::move(e);
      if (absl::Status st = EndTag(); !st.ok()) return st;
      if (absl::Status st = Statements({"endcall"}, &s->body, &end); !st.ok()) return st;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      return s;
    }
    if (name == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      if (absl::Status st = Statements({"endgeneration"}, &s->body, &end); !st.ok()) return st;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      return s;
    }
    if (name == "break" || name == "continue") {
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      if (absl::Status st = EndTag(); !st.ok()) return st;
      return s;
    }
    static const std::set<std::string> kKnown = {"include", "extends", "import", "from", "block", "filter",
                                                 "with", "raw", "autoescape", "do", "trans"};
    if (kKnown.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line, ": the tag '", name,
                                                     "' is not supported by tessera's template renderer"));
    }
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": unknown tag '", name, "'"));
  }

  // Assignment targets: NAME, NAME.ATTR (with `attr`), or NAME, NAME, ... (parenthesised or not).
  absl::Status Targets(std::vector<std::string>* names, std::string* attr) {
    const bool parens = SkipOp("(");
    while (true) {
      auto n = ExpectName();
      if (!n.ok()) return n.status();
      names->push_back(*n);
      if (attr != nullptr && names->size() == 1 && SkipOp(".")) {
        auto a = ExpectName();
        if (!a.ok()) return a.status();
        *attr = *a;
        return absl::OkStatus();
      }
      if (!SkipOp(",")) break;
      if (IsOp(")")) break;
    }
    if (parens) return Expect(")");
    return absl::OkStatus();
  }

  // ---- Expressions ----

  // A tuple where a comma makes one (output, for iterables, set values, parenthesised expressions).
  absl::StatusOr<ExprPtr> Tuple(bool condexpr, bool explicit_parens) {
    const int line = Cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        comma = true;
      }
      if (IsTupleEnd()) break;
      auto e = Expression(condexpr);
      if (!e.ok()) return e.status();
      items.push_back(*std::move(e));
    }
    if (!comma) {
      if (items.size() == 1) return std::move(items[0]);
      if (!explicit_parens) return Error(absl::StrCat("expected an expression, found ", Describe(Cur())));
    }
    auto t = Make(Expr::Kind::kTuple, line);
    for (auto& item : items) t->Add(std::move(item));
    return t;
  }

  bool IsTupleEnd() const {
    const Token& c = Cur();
    if (c.type == T::kVarEnd || c.type == T::kBlockEnd || c.type == T::kEof) return true;
    if (c.type == T::kOp && (c.text == ")" || c.text == "]" || c.text == "}")) return true;
    if (c.type == T::kName && (c.text == "if" || c.text == "in" || c.text == "recursive")) return true;
    return false;
  }

  absl::StatusOr<ExprPtr> Expression(bool condexpr) {
    Nest nest(&depth_);
    if (depth_ > kMaxDepth) return TooDeep();
    if (!condexpr) return Or();
    auto e = Or();
    if (!e.ok()) return e;
    ExprPtr expr = *std::move(e);
    while (IsName("if")) {
      const int line = Cur().line;
      ++i_;
      auto cond = Or();
      if (!cond.ok()) return cond;
      ExprPtr otherwise;
      if (SkipName("else")) {
        auto o = Expression(true);
        if (!o.ok()) return o;
        otherwise = *std::move(o);
      }
      auto c = Make(Expr::Kind::kCondition, line);
      c->Add(*std::move(cond));
      c->Add(std::move(expr));
      c->Add(std::move(otherwise));
      expr = std::move(c);
      if (TooDeep(*expr)) return TooDeep();
    }
    return expr;
  }

  ExprPtr BinaryOf(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = Make(Expr::Kind::kBinary, line);
    e->name = op;
    e->Add(std::move(a));
    e->Add(std::move(b));
    return e;
  }

  absl::StatusOr<ExprPtr> Or() { return LeftAssoc({"or"}, &Parser::And, /*keywords=*/true); }
  absl::StatusOr<ExprPtr> And() { return LeftAssoc({"and"}, &Parser::Not, /*keywords=*/true); }

  absl::StatusOr<ExprPtr> Not() {
    Nest nest(&depth_);
    if (depth_ > kMaxDepth) return TooDeep();
    if (IsName("not")) {
      const int line = Cur().line;
      ++i_;
      auto a = Not();
      if (!a.ok()) return a;
      auto e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->Add(*std::move(a));
      return e;
    }
    return Compare();
  }

  absl::StatusOr<ExprPtr> Compare() {
    auto a = Math1();
    if (!a.ok()) return a;
    ExprPtr e = *std::move(a);
    while (true) {
      const int line = Cur().line;
      std::string op;
      if (Cur().type == T::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                   Cur().text == ">" || Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().type == T::kName && Peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      auto b = Math1();
      if (!b.ok()) return b;
      e = BinaryOf(op, std::move(e), *std::move(b), line);
      if (TooDeep(*e)) return TooDeep();
    }
    return e;
  }

  // next (op next)*, left-associative; `keywords`: the operators are names (and, or).
  template <typename Next>
  absl::StatusOr<ExprPtr> LeftAssoc(std::initializer_list<const char*> ops, Next next, bool keywords = false) {
    auto a = (this->*next)();
    if (!a.ok()) return a;
    ExprPtr e = *std::move(a);
    while (true) {
      const char* found = nullptr;
      for (const char* op : ops) {
        if (keywords ? IsName(op) : IsOp(op)) found = op;
      }
      if (found == nullptr) return e;
      const int line = Cur().line;
      ++i_;
      auto b = (this->*next)();
      if (!b.ok()) return b;
      e = BinaryOf(found, std::move(e), *std::move(b), line);
      if (TooDeep(*e)) return TooDeep();
    }
  }

  absl::StatusOr<ExprPtr> Math1() { return LeftAssoc({"+", "-"}, &Parser::Concat); }
  absl::StatusOr<ExprPtr> Concat() { return LeftAssoc({"~"}, &Parser::Math2); }
  absl::StatusOr<ExprPtr> Math2() { return LeftAssoc({"*", "/", "//", "%"}, &Parser::Pow); }
  absl::StatusOr<ExprPtr> Pow() { return LeftAssoc({"**"}, &Parser::UnaryWithFilters); }
  absl::StatusOr<ExprPtr> UnaryWithFilters() { return Unary(true); }

  absl::StatusOr<ExprPtr> Unary(bool with_filter) {
    Nest nest(&depth_);
    if (depth_ > kMaxDepth) return TooDeep();
    const int line = Cur().line;
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const std::string op = Cur().text;
      ++i_;
      auto a = Unary(false);
      if (!a.ok()) return a;
      e = Make(Expr::Kind::kUnary, line);
      e->name = op;
      e->Add(*std::move(a));
    } else {
      auto p = Primary();
      if (!p.ok()) return p;
      e = *std::move(p);
    }
    auto post = Postfix(std::move(e));
    if (!post.ok()) return post;
    e = *std::move(post);
    if (with_filter) return FilterExpr(std::move(e));
    return e;
  }

  absl::StatusOr<ExprPtr> Primary() {
    const Token& tok = Cur();
    const int line = tok.line;
    if (tok.type == T::kName) {
      ++i_;
      auto e = Make(Expr::Kind::kLiteral, line);
      if (tok.text == "true" || tok.text == "True") {
        e->value = Value::Bool(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = Value::Bool(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::None();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = tok.text;
      }
      return e;
    }
    if (tok.type == T::kString) {
      std::string s;
      while (Cur().type == T::kString) s += t_[i_++].text;  // Adjacent literals concatenate.
      auto e = Make(Expr::Kind::kLiteral, line);
      e->value = Value::String(std::move(s));
      return e;
    }
    if (tok.type == T::kInt || tok.type == T::kFloat) {
      ++i_;
      auto e = Make(Expr::Kind::kLiteral, line);
      e->value = tok.type == T::kInt ? Value::Int(tok.int_value) : Value::Float(tok.float_value);
      return e;
    }
    if (SkipOp("(")) {
      auto e = Tuple(/*condexpr=*/true, /*explicit_parens=*/true);
      if (!e.ok()) return e;
      if (absl::Status st = Expect(")"); !st.ok()) return st;
      return e;
    }
    if (SkipOp("[")) {
      auto e = Make(Expr::Kind::kList, line);
      absl::Status items = Separated("]", [&]() -> absl::Status {
        auto x = Expression(true);
        if (!x.ok()) return x.status();
        e->Add(*std::move(x));
        return absl::OkStatus();
      });
      if (!items.ok()) return items;
      return e;
    }
    if (SkipOp("{")) {
      auto e = Make(Expr::Kind::kDict, line);
      absl::Status items = Separated("}", [&]() -> absl::Status {
        auto k = Expression(true);
        if (!k.ok()) return k.status();
        if (absl::Status st = Expect(":"); !st.ok()) return st;
        auto v = Expression(true);
        if (!v.ok()) return v.status();
        e->Add(*std::move(k));
        e->Add(*std::move(v));
        return absl::OkStatus();
      });
      if (!items.ok()) return items;
      return e;
    }
    return Error(absl::StrCat("expected an expression, found ", Describe(tok)));
  }

  absl::StatusOr<ExprPtr> Postfix(ExprPtr e) {
    while (true) {
      if (TooDeep(*e)) return TooDeep();
      const int line = Cur().line;
      if (SkipOp(".")) {
        if (Cur().type == T::kInt) {  // x.0: an item.
          auto idx = Make(Expr::Kind::kLiteral, line);
          idx->value = Value::Int(Cur().int_value);
          ++i_;
          auto item = Make(Expr::Kind::kItem, line);
          item->Add(std::move(e));
          item->Add(std::move(idx));
          e = std::move(item);
          continue;
        }
        auto n = ExpectName();
        if (!n.ok()) return n.status();
        auto a = Make(Expr::Kind::kAttr, line);
        a->name = *n;
        a->Add(std::move(e));
        e = std::move(a);
      } else if (SkipOp("[")) {
        auto sub = Subscript(std::move(e), line);
        if (!sub.ok()) return sub;
        e = *std::move(sub);
      } else if (IsOp("(")) {
        auto call = Make(Expr::Kind::kCall, line);
        call->Add(std::move(e));
        if (absl::Status st = CallArgs(call.get()); !st.ok()) return st;
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> Subscript(ExprPtr target, int line) {
    // [a], [a:b], [a:b:c], with any part left out.
    ExprPtr parts[3];
    int colons = 0;
    for (int k = 0; k < 3; ++k) {
      if (!IsOp(":") && !IsOp("]")) {
        auto x = Expression(true);
        if (!x.ok()) return x;
        parts[k] = *std::move(x);
      }
      if (k < 2 && SkipOp(":")) {
        ++colons;
        continue;
      }
      break;
    }
    if (colons == 0 && parts[0] == nullptr) return Error("expected an expression in [], found ']'");
    if (absl::Status st = Expect("]"); !st.ok()) return st;
    if (colons == 0) {
      auto item = Make(Expr::Kind::kItem, line);
      item->Add(std::move(target));
      item->Add(std::move(parts[0]));
      return item;
    }
    auto slice = Make(Expr::Kind::kSlice, line);
    slice->Add(std::move(target));
    for (auto& p : parts) slice->Add(std::move(p));
    return slice;
  }

  // (args...) into e->items (after items[0]) and e->kwarg_names.
  absl::Status CallArgs(Expr* e) {
    if (absl::Status st = Expect("("); !st.ok()) return st;
    return Separated(")", [&]() -> absl::Status {
      if (IsOp("*") || IsOp("**")) return Error("*args and **kwargs in calls are not supported by tessera's template renderer");
      if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == "=") {
        const std::string name = Cur().text;
        i_ += 2;
        auto v = Expression(true);
        if (!v.ok()) return v.status();
        e->Add(*std::move(v));
        e->kwarg_names.push_back(name);
        return absl::OkStatus();
      }
      if (!e->kwarg_names.empty()) return Error("a positional argument follows a keyword argument");
      auto v = Expression(true);
      if (!v.ok()) return v.status();
      e->Add(*std::move(v));
      return absl::OkStatus();
    });
  }

  absl::StatusOr<ExprPtr> FilterExpr(ExprPtr e) {
    while (true) {
      if (TooDeep(*e)) return TooDeep();
      const int line = Cur().line;
      if (SkipOp("|")) {
        auto n = ExpectName();
        if (!n.ok()) return n.status();
        auto f = Make(Expr::Kind::kFilter, line);
        f->name = *n;
        f->Add(std::move(e));
        if (IsOp("(")) {
          if (absl::Status st = CallArgs(f.get()); !st.ok()) return st;
        }
        e = std::move(f);
      } else if (IsName("is")) {
        ++i_;
        auto t = Make(Expr::Kind::kTest, line);
        t->negate = SkipName("not");
        auto n = ExpectName();
        if (!n.ok()) return n.status();
        t->name = *n;
        t->Add(std::move(e));
        if (IsOp("(")) {
          if (absl::Status st = CallArgs(t.get()); !st.ok()) return st;
        } else if ((Cur().type == T::kName && Cur().text != "else" && Cur().text != "or" && Cur().text != "and" &&
                    Cur().text != "if" && Cur().text != "is") ||
                   Cur().type == T::kString || Cur().type == T::kInt || Cur().type == T::kFloat || IsOp("[") ||
                   IsOp("{")) {
          auto arg = Primary();
          if (!arg.ok()) return arg;
          auto post = Postfix(*std::move(arg));
          if (!post.ok()) return post;
          t->Add(*std::move(post));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        auto call = Make(Expr::Kind::kCall, line);
        call->Add(std::move(e));
        if (absl::Status st = CallArgs(call.get()); !st.ok()) return st;
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  // Expressions and blocks nest at most kMaxDepth deep (the parser and the renderer recurse): counted
  // as the parser recurses and, for chains that it builds in a loop (a.b.c, x|f|g, 1 + 2 + 3), as the
  // tree's depth under the current nesting.
  static constexpr int kMaxDepth = 200;
  bool TooDeep(const Expr& e) const { return depth_ + e.depth > kMaxDepth; }
  struct Nest {
    explicit Nest(int* depth) : depth(depth) { ++*depth; }
    ~Nest() { --*depth; }
    int* depth;
  };
  absl::Status TooDeep() const {
    return Error(absl::StrCat("expressions or blocks nested deeper than ", kMaxDepth));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> ParseTemplate(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the template is longer than ", kMaxTemplateBytes, " bytes"));
  }
  auto tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(*std::move(tokens)).Run();
}

}  // namespace tessera::formats::chat
