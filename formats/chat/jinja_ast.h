// The syntax tree of a Jinja template: the expressions and statements chat templates use
// (formats/chat/jinja_parser.h makes it, jinja_render.h runs it).
#ifndef TESSERA_FORMATS_CHAT_JINJA_AST_H_
#define TESSERA_FORMATS_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/chat/jinja_value.h"

namespace tessera::formats::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items (a tuple is a list here)
    kDict,       // keys[i]: items[2i], value: items[2i+1]
    kAttr,       // items[0].name
    kItem,       // items[0][items[1]]
    kSlice,      // items[0][items[1]:items[2]:items[3]] (null parts absent)
    kCall,       // items[0](args...; kwargs: names)
    kFilter,     // items[0] | name(args...)
    kTest,       // items[0] is [not: negate] name(args...)
    kUnary,      // op items[0]: "not", "-", "+"
    kBinary,     // items[0] op items[1]: + - * / // % ** ~ == != < > <= >= in notin and or
    kCondition,  // items[1] if items[0] else items[2] (items[2] may be null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // Name, attribute, filter, test or operator.
  bool negate = false;
  std::vector<ExprPtr> items;
  int depth = 1;  // Levels of the tree from this node down (Add keeps it): the renderer recurses as deep.
  // Appends an operand (null: an absent part of a slice or condition), keeping `depth`.
  void Add(ExprPtr child) {
    if (child != nullptr && child->depth >= depth) depth = child->depth + 1;
    items.push_back(std::move(child));
  }
  // A call's, filter's or test's arguments after items[0] (for kCall/kFilter/kTest: args start at 1),
  // with the names of the keyword ones (the last kwarg_names.size() arguments).
  std::vector<std::string> kwarg_names;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (cond, body)...; else_body
    kFor,       // targets in expr [if filter]: body; else_body
    kSet,       // targets (or target.attr: attr) = expr; or a block set: body
    kMacro,     // name(params with defaults): body
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}: body (rendered as is; transformers tracks its span)
    kCallBlock,   // {% call name(args) %}body{% endcall %}: expr is the call; body is `caller()`
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0].attr = expr.
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // Aligned with params (null: required).
};

}  // namespace tessera::formats::chat

#endif  // TESSERA_FORMATS_CHAT_JINJA_AST_H_
