#pragma once
// The parsed template: expression and statement nodes. One generic node per layer keeps the
// parser and evaluator small; `kind` says which fields are used.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace fuselm::tmpl {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  Const,      // value
  Name,       // name
  List,       // args
  Tuple,      // args
  Dict,       // args: key0, value0, key1, value1, ...
  GetAttr,    // args[0] . name
  GetItem,    // args[0] [ args[1] ]
  Slice,      // args[0] [ args[1] : args[2] : args[3] ] (null = omitted)
  Call,       // args[0] ( args[1..], kwargs )
  Filter,     // args[0] | name ( args[1..], kwargs ); args[0] null in a filter block
  Test,       // args[0] is [not] name ( args[1..], kwargs )
  Unary,      // name in {"-", "+", "not"} args[0]
  Binary,     // args[0] name args[1]: + - * / // % ** ~ and or
  Compare,    // args[0] ops[k] args[k+1] ... (chained)
  CondExpr,   // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;  // Test: `is not`
  bool soft = false;     // Filter/Test: inside an if or conditional expression (checked at run time)
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind : uint8_t {
  Text,        // text
  Print,       // expr
  If,          // conds[k] -> bodies[k]; else_body
  For,         // targets in expr [if cond] body, else_body; recursive
  Set,         // targets (or attr target: targets[0] . attr) = expr
  SetBlock,    // targets[0] = rendered body | filters (expr: filter chain or null)
  Macro,       // name(params = defaults) body
  CallBlock,   // expr (a Call), caller params, body
  FilterBlock, // expr: filter chain with a null base; body
  Generation,  // body
  With,        // params = defaults; body
  Break,
  Continue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // Text
  std::string name;  // Macro name; Set attr target
  ExprPtr expr;
  ExprPtr cond;      // For filter
  bool recursive = false;
  std::vector<std::string> targets;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro/CallBlock/With: default null = none given
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
};

}  // namespace fuselm::tmpl
