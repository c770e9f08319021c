#include "runtime/sym_expr.h"

#include <cctype>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace fuselm::runtime {
namespace {

// Recursive descent over sympy's printed form; values are kept as doubles so that "/" inside
// floor() works, and rounded at the end.
struct Parser {
  std::string_view s;
  size_t p = 0;
  const SymbolValues& syms;

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("shape expression '" + std::string(s) + "': " + why);
  }
  void ws() {
    while (p < s.size() && s[p] == ' ') ++p;
  }
  bool eat(char c) {
    ws();
    if (p < s.size() && s[p] == c) {
      ++p;
      return true;
    }
    return false;
  }
  double expr() {
    double v = term();
    for (;;) {
      if (eat('+')) v += term();
      else if (eat('-')) v -= term();
      else return v;
    }
  }
  double term() {
    double v = unary();
    for (;;) {
      ws();
      if (s.substr(p, 2) == "//") {
        p += 2;
        v = std::floor(v / unary());
      } else if (eat('*')) {
        v *= unary();
      } else if (eat('/')) {
        v /= unary();
      } else {
        return v;
      }
    }
  }
  double unary() {
    if (eat('-')) return -unary();
    return power();
  }
  // "**" binds tighter than "*" and unary minus, and to the right: 2*s0**2, -s0**2, s0**2**3.
  double power() {
    double v = atom();
    ws();
    if (s.substr(p, 2) == "**") {
      p += 2;
      return std::pow(v, unary());
    }
    return v;
  }
  double atom() {
    ws();
    if (eat('(')) {
      double v = expr();
      if (!eat(')')) fail("expected ')'");
      return v;
    }
    if (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) {
      size_t q = p;
      while (q < s.size() && (std::isdigit(static_cast<unsigned char>(s[q])) || s[q] == '.')) ++q;
      double v = std::stod(std::string(s.substr(p, q - p)));
      p = q;
      return v;
    }
    size_t q = p;
    while (q < s.size() && (std::isalnum(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
    if (q == p) fail("unexpected character");
    std::string_view name = s.substr(p, q - p);
    p = q;
    if (eat('(')) {
      std::vector<double> a{expr()};
      while (eat(',')) a.push_back(expr());
      if (!eat(')')) fail("expected ')'");
      if (name == "floor" && a.size() == 1) return std::floor(a[0]);
      if (name == "ceiling" && a.size() == 1) return std::ceil(a[0]);
      if (name == "Max") { double m = a[0]; for (double x : a) m = std::max(m, x); return m; }
      if (name == "Min") { double m = a[0]; for (double x : a) m = std::min(m, x); return m; }
      if ((name == "Mod" || name == "PythonMod") && a.size() == 2) return a[0] - std::floor(a[0] / a[1]) * a[1];
      if (name == "FloorDiv" && a.size() == 2) return std::floor(a[0] / a[1]);
      if (name == "CeilToInt" || name == "FloorToInt" || name == "TruncToInt") return std::trunc(a[0]);
      fail("function '" + std::string(name) + "' is not supported");
    }
    auto it = syms.find(name);
    if (it == syms.end()) fail("symbol '" + std::string(name) + "' is not bound");
    return static_cast<double>(it->second);
  }
};

}  // namespace

int64_t eval_sym(std::string_view expr, const SymbolValues& symbols) {
  Parser ps{expr, 0, symbols};
  double v = ps.expr();
  ps.ws();
  if (ps.p != expr.size()) ps.fail("trailing characters");
  return static_cast<int64_t>(std::llround(v));
}

}  // namespace fuselm::runtime
