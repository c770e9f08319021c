// Template errors: the template's raise_exception message exactly, jinja2's own messages where
// templates meet them (undefined values, sandbox refusals), and the sandbox bounds: unbounded
// recursion, huge loops and huge outputs end in a clear error, never a crash or a hang.
#include <gtest/gtest.h>

#include <string>

#include "template/chat_template.h"

namespace fuselm::tmpl {
namespace template_errors_test {

std::string error_of(const std::string& source, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  try {
    render(source, vars);
  } catch (const TemplateError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(TemplateErrors, RaiseExceptionMessageIsExact) {
  EXPECT_EQ(error_of("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
                     nlohmann::ordered_json::parse(R"({"messages": [{"role": "system"}]})")),
            "System role not supported");
}

TEST(TemplateErrors, Jinja2Messages) {
  // The messages jinja2 3.1.6 raises for the same templates.
  EXPECT_EQ(error_of("{{ x.y }}"), "'x' is undefined");
  EXPECT_EQ(error_of("{{ d.y.z }}", {{"d", nlohmann::ordered_json::object()}}), "'dict object' has no attribute 'y'");
  EXPECT_EQ(error_of("{{ l[5].x }}", {{"l", nlohmann::ordered_json::array()}}), "list object has no element 5");
  EXPECT_EQ(error_of("{{ x|tojson }}"), "Object of type Undefined is not JSON serializable");
  EXPECT_EQ(error_of("{% set a = [1] %}{{ a.append(3) }}"), "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(error_of("{% macro m(a) %}{{a}}{% endmacro %}{{ m(1, 2) }}"), "macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(error_of("{{ x|from_json }}"), "line 1: No filter named 'from_json'.");
  EXPECT_EQ(error_of("{{ range(200000)|length }}"),
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
}

TEST(TemplateErrors, UnknownFilterInsideIfFailsOnlyWhenRun) {
  EXPECT_EQ(render("{% if false %}{{ x|from_json }}{% endif %}ok", nlohmann::ordered_json::object()), "ok");
  EXPECT_EQ(error_of("{% if true %}{{ x|from_json }}{% endif %}"), "No filter named 'from_json' found.");
}

TEST(TemplateErrors, UnboundedRecursionIsAnError) {
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("calls nested deeper than"),
            std::string::npos);
}

TEST(TemplateErrors, HugeLoopIsAnError) {
  EXPECT_EQ(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
            "line 1: loop iterations exceed the sandbox bound of 2000000");
}

TEST(TemplateErrors, HugeOutputIsAnError) {
  EXPECT_EQ(error_of("{{ 'x' * 100000000 }}"), "template output exceeds 16777216 bytes");
  EXPECT_EQ(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"), "template output exceeds 16777216 bytes");
}

TEST(TemplateErrors, UnsupportedConstructsNameLineAndConstruct) {
  EXPECT_EQ(error_of("a\n{% include 'other.jinja' %}"), "line 2: unsupported tag 'include'");
  EXPECT_EQ(error_of("{% extends 'base' %}"), "line 1: unsupported tag 'extends'");
  EXPECT_EQ(error_of("\n\n{% for x in y recursive %}{% endfor %}"), "line 3: recursive for loops are not supported");
  EXPECT_EQ(error_of("{{ xs|groupby('a') }}"), "line 1: unsupported filter 'groupby'");
  EXPECT_EQ(error_of("{{ f(*args) }}"), "line 1: *args and **kwargs in calls are not supported");
}

TEST(TemplateErrors, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(error_of("{% if x %}\n\n{% endfor %}"), "line 3: unknown or misplaced tag 'endfor'");
  EXPECT_EQ(error_of("{{ 1 +"), "line 1: unexpected end of template, expected '}}'");
  EXPECT_EQ(error_of("{% for x in y %}"), "line 1: unexpected end of template; expected '{% endfor %}'");
  EXPECT_EQ(error_of("{% break %}"), "line 1: 'break' outside of a for loop");
  EXPECT_EQ(error_of("{% if a if b else c %}{% endif %}"), "line 1: expected end of statement block, got 'if'");
}

TEST(TemplateErrors, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of(deep).find("nesting deeper than"), std::string::npos);
  std::string blocks;
  for (int k = 0; k < 5000; ++k) blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks).find("nesting deeper than"), std::string::npos);
}

}  // namespace template_errors_test
}  // namespace fuselm::tmpl
