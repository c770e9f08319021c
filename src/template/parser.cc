#include "template/parser.h"

#include <set>

#include "template/builtins.h"
#include "template/chat_template.h"
#include "template/lexer.h"

namespace fuselm::tmpl {
namespace {

constexpr int kMaxNesting = 200;  // expression and block nesting, far beyond real templates

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  // ---- token helpers
  const Token& cur() const { return t_[p_]; }
  const Token& next() { return t_[p_++]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  [[noreturn]] void fail(const std::string& what, int line = 0) const {
    throw TemplateError("line " + std::to_string(line ? line : cur().line) + ": " + what);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::Eof: return "end of template";
      case Tok::String: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    ++p_;
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail("expected end of statement block, got " + describe(cur()));
    ++p_;
  }
  struct Depth {
    Parser& p;
    explicit Depth(Parser& q) : p(q) {
      if (++p.depth_ > kMaxNesting) p.fail("template nesting deeper than " + std::to_string(kMaxNesting));
    }
    ~Depth() { --p.depth_; }
  };
  struct Soft {
    Parser& p;
    explicit Soft(Parser& q) : p(q) { ++p.soft_; }
    ~Soft() { --p.soft_; }
  };

  // ---- statements
  /// Parses until a block tag whose name is in `ends` (consumed up to and including the name).
  Body parse_body(const std::set<std::string>& ends, std::string& ended_by) {
    Depth d(*this);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == Tok::Eof) {
        if (!ends.empty()) fail("unexpected end of template; expected " + *ends.begin());
        return body;
      }
      if (tok.type == Tok::Text) {
        auto s = std::make_unique<Stmt>(Stmt{StmtKind::Text, tok.line});
        s->text = tok.text;
        body.push_back(std::move(s));
        ++p_;
      } else if (tok.type == Tok::VarBegin) {
        auto s = std::make_unique<Stmt>(Stmt{StmtKind::Print, tok.line});
        ++p_;
        s->expr = parse_tuple(true);
        if (cur().type != Tok::VarEnd) fail("expected end of print statement, got " + describe(cur()));
        ++p_;
        body.push_back(std::move(s));
      } else if (tok.type == Tok::BlockBegin) {
        ++p_;
        if (cur().type != Tok::Name) fail("expected a statement name after '{%'");
        const std::string name = cur().text;
        if (ends.count(name)) {
          ++p_;
          ended_by = name;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  StmtPtr parse_statement() {
    const int line = cur().line;
    const std::string name = next().text;
    if (name == "if") return parse_if(line);
    if (name == "for") return parse_for(line);
    if (name == "set") return parse_set(line);
    if (name == "macro") return parse_macro(line);
    if (name == "call") return parse_call_block(line);
    if (name == "filter") return parse_filter_block(line);
    if (name == "generation") return parse_simple_block(line, StmtKind::Generation, "endgeneration");
    if (name == "with") return parse_with(line);
    if (name == "break" || name == "continue") {
      if (loops_ == 0) fail("'" + name + "' outside of a for loop", line);
      expect_block_end();
      return std::make_unique<Stmt>(Stmt{name == "break" ? StmtKind::Break : StmtKind::Continue, line});
    }
    static const std::set<std::string> known_unsupported = {
        "include", "extends", "import", "from", "block", "raw", "do", "autoescape", "trans", "pluralize"};
    if (known_unsupported.count(name)) fail("unsupported tag '" + name + "'", line);
    fail("unknown or misplaced tag '" + name + "'", line);
  }

  StmtPtr parse_if(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::If, line});
    Soft soft(*this);
    while (true) {
      s->conds.push_back(parse_tuple(false));
      expect_block_end();
      std::string end;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, end);
      }
      expect_block_end();
      return s;
    }
  }

  /// Assignment targets: a name, or names separated by commas, optionally in parentheses.
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = is_op("(");
    if (paren) ++p_;
    do {
      names.push_back(expect_name());
      if (!is_op(",")) break;
      ++p_;
    } while (cur().type == Tok::Name && !is_name("in"));
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::For, line});
    s->targets = parse_targets();
    if (!is_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
    ++p_;
    s->expr = parse_tuple(false, /*condexpr=*/false);
    if (is_name("if")) {
      ++p_;
      s->cond = parse_expression();
    }
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    std::string end;
    ++loops_;
    s->body = parse_body({"else", "endfor"}, end);
    --loops_;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::Set, line});
    std::string first = expect_name();
    if (is_op(".")) {
      ++p_;
      s->targets = {first};
      s->name = expect_name();
    } else {
      s->targets = {first};
      while (is_op(",")) {
        ++p_;
        s->targets.push_back(expect_name());
      }
    }
    if (is_op("=")) {
      ++p_;
      s->expr = parse_tuple(false);
      expect_block_end();
      return s;
    }
    if (!s->name.empty() || s->targets.size() != 1) fail("block set needs a single name target", line);
    s->kind = StmtKind::SetBlock;
    if (is_op("|")) s->expr = parse_filter_chain();
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, end);
    expect_block_end();
    return s;
  }

  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string pname = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        ++p_;
        def = parse_expression();
      }
      s.params.emplace_back(pname, std::move(def));
    }
    ++p_;
  }

  StmtPtr parse_macro(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::Macro, line});
    s->name = expect_name();
    parse_params(*s);
    expect_block_end();
    std::string end;
    int saved_loops = loops_;
    loops_ = 0;
    s->body = parse_body({"endmacro"}, end);
    loops_ = saved_loops;
    if (cur().type == Tok::Name) ++p_;  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::CallBlock, line});
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression();
    if (s->expr->kind != ExprKind::Call) fail("expected a call after 'call'", line);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endcall"}, end);
    expect_block_end();
    return s;
  }

  ExprPtr parse_filter_chain() {
    ExprPtr node;  // null base: the block's rendered body
    while (is_op("|")) node = parse_filter(std::move(node));
    return node;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::FilterBlock, line});
    ExprPtr node;
    node = parse_filter(std::move(node), /*leading_pipe=*/false);
    while (is_op("|")) node = parse_filter(std::move(node));
    s->expr = std::move(node);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_simple_block(int line, StmtKind kind, const char* end_name) {
    auto s = std::make_unique<Stmt>(Stmt{kind, line});
    expect_block_end();
    std::string end;
    s->body = parse_body({end_name}, end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = std::make_unique<Stmt>(Stmt{StmtKind::With, line});
    while (cur().type != Tok::BlockEnd) {
      if (!s->params.empty()) expect_op(",");
      std::string n = expect_name();
      expect_op("=");
      s->params.emplace_back(n, parse_expression());
    }
    expect_block_end();
    std::string end;
    s->body = parse_body({"endwith"}, end);
    expect_block_end();
    return s;
  }

  // ---- expressions (jinja2/parser.py precedence)
  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(ExprKind::Binary, line);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  bool tuple_end() const {
    auto ty = cur().type;
    return ty == Tok::BlockEnd || ty == Tok::VarEnd || ty == Tok::Eof || is_op(")") || is_name("recursive") ||
           (ty == Tok::Name && cur().text == "if" && !condexpr_);
  }

  ExprPtr parse_tuple(bool /*print*/, bool condexpr = true, bool explicit_parens = false) {
    const int line = cur().line;
    bool saved = condexpr_;
    condexpr_ = condexpr;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        ++p_;
        comma = true;
      }
      if (tuple_end()) break;
      items.push_back(condexpr ? parse_expression() : parse_or());
    }
    condexpr_ = saved;
    if (!comma) {
      if (items.empty()) {
        if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
      } else {
        return std::move(items[0]);
      }
    }
    auto e = make(ExprKind::Tuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression() {
    Depth d(*this);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      Soft soft(*this);
      auto e = make(ExprKind::CondExpr, line);
      e->args.push_back(parse_or());
      e->args.push_back(std::move(expr));
      if (is_name("else")) {
        ++p_;
        e->args.push_back(parse_expression());
      } else {
        e->args.push_back(nullptr);
      }
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      int line = next().line;
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      int line = next().line;
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth d(*this);
      auto e = make(ExprKind::Unary, next().line);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && t_[p_ + 1].type == Tok::Name && t_[p_ + 1].text == "in") {
        p_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::Compare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      std::string o = op.text;
      l = binary(o, std::move(l), parse_concat(), op.line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      l = binary("~", std::move(l), parse_math2(), line);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      std::string o = op.text;
      l = binary(o, std::move(l), parse_pow(), op.line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(ExprKind::Unary, cur().line);
      e->name = next().text;
      e->args.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    const int line = tok.line;
    if (tok.type == Tok::Name) {
      ++p_;
      auto e = make(ExprKind::Const, line);
      if (tok.text == "true" || tok.text == "True") e->value = Value::boolean(true);
      else if (tok.text == "false" || tok.text == "False") e->value = Value::boolean(false);
      else if (tok.text == "none" || tok.text == "None") e->value = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = tok.text;
      }
      return e;
    }
    if (tok.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += next().text;
      auto e = make(ExprKind::Const, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (tok.type == Tok::Int || tok.type == Tok::Float) {
      ++p_;
      auto e = make(ExprKind::Const, line);
      e->value = tok.type == Tok::Int ? Value::integer(tok.i) : Value::number(tok.f);
      return e;
    }
    if (is_op("(")) {
      ++p_;
      ExprPtr e = parse_tuple(false, true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      auto e = make(ExprKind::List, line);
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression());
      }
      ++p_;
      return e;
    }
    if (is_op("{")) {
      ++p_;
      auto e = make(ExprKind::Dict, line);
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression());
        expect_op(":");
        e->args.push_back(parse_expression());
      }
      ++p_;
      return e;
    }
    fail("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node));
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& tok = next();
    const int line = tok.line;
    if (tok.text == ".") {
      if (cur().type == Tok::Name) {
        auto e = make(ExprKind::GetAttr, line);
        e->name = next().text;
        e->args.push_back(std::move(node));
        return e;
      }
      if (cur().type != Tok::Int) fail("expected a name or number after '.'");
      auto e = make(ExprKind::GetItem, line);
      auto idx = make(ExprKind::Const, line);
      idx->value = Value::integer(next().i);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(idx));
      return e;
    }
    // '[': an index, a slice, or a tuple of them (only the first two are supported)
    std::vector<ExprPtr> parts(3);
    bool is_slice = false;
    if (!is_op(":")) parts[0] = parse_expression();
    if (is_op(":")) {
      is_slice = true;
      ++p_;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression();
      if (is_op(":")) {
        ++p_;
        if (!is_op("]")) parts[2] = parse_expression();
      }
    }
    if (is_op(",")) fail("tuple subscripts are not supported");
    expect_op("]");
    auto e = make(is_slice ? ExprKind::Slice : ExprKind::GetItem, line);
    e->args.push_back(std::move(node));
    if (is_slice) {
      for (auto& p : parts) e->args.push_back(std::move(p));
    } else {
      e->args.push_back(std::move(parts[0]));
    }
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::Name && t_[p_ + 1].type == Tok::Op && t_[p_ + 1].text == "=") {
        std::string k = next().text;
        ++p_;
        e.kwargs.emplace_back(k, parse_expression());
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.args.push_back(parse_expression());
      }
    }
    ++p_;
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::Call, cur().line);
    e->args.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      ++p_;
      n += "." + expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr node, bool leading_pipe = true) {
    if (leading_pipe) expect_op("|");
    auto e = make(ExprKind::Filter, cur().line);
    e->name = dotted_name();
    e->soft = soft_ > 0;
    if (!find_filter(e->name) && !e->soft) fail("No filter named '" + e->name + "'.", e->line);
    e->args.push_back(std::move(node));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = make(ExprKind::Test, next().line);
    if (is_name("not")) {
      ++p_;
      e->negated = true;
    }
    e->name = dotted_name();
    e->soft = soft_ > 0;
    if (!find_test(e->name) && !e->soft) fail("No test named '" + e->name + "'.", e->line);
    e->args.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
  int soft_ = 0;
  int loops_ = 0;
  bool condexpr_ = true;
};

}  // namespace

Body parse(const std::string& source) { return Parser(lex(source)).parse_all(); }

}  // namespace fuselm::tmpl
