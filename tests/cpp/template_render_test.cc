// Renderer output against jinja2: each expected string was rendered by jinja2 3.1.6 in
// transformers' environment (transformers.utils.chat_template_utils._cached_compile_jinja_template)
// with the same variables; tests/python/test_template_property.py checks thousands more.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"

namespace fuselm::tmpl {
namespace template_render_test {

struct Case {
  const char* name;
  const char* source;
  const char* variables;
  const char* expected;
};

const Case kCases[] = {
  {"whitespace", "  {% if true %}\n  yes\n  {%- endif %}\n{{ 'a' }}  {% if 1 %}b{% endif %}\n",
   R"json({})json",
   "  yesa  b"},
  {"markers", "a  {%- if true -%}  b  {%+ if true %}c{% endif %}{%- endif %}\n  d {#- c -#} e\n",
   R"json({})json",
   "ab  c  de"},
  {"loop_vars", "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{{ '' if loop.last else ',' }}{{ loop.cycle('a','b') }}{% else %}none{% endfor %}",
   R"json({"xs": [3, 4, 5]})json",
   "1/3,a2/3,b3/3a"},
  {"namespace", "{% set ns = namespace(n=0) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n }}",
   R"json({"msgs": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]})json",
   "2"},
  {"loop_scope", "{% set c = 0 %}{% for i in [1, 2] %}{% set c = c + i %}{{ c }}{% endfor %}{{ c }}",
   R"json({})json",
   "120"},
  {"tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"<'|tojson }}",
   R"json({"d": {"z": 1, "a": [true, null, 1.5], "\u00e9": "\u00fc"}})json",
   "{\"z\": 1, \"a\": [true, null, 1.5], \"é\": \"ü\"}|{\n  \"z\": 1,\n  \"a\": [\n    true,\n    null,\n    1.5\n  ],\n  \"é\": \"ü\"\n}|\"é\\\"<\""},
  {"macro_call", "{% macro tag(name, body='x') %}<{{ name }}>{{ body }}{{ caller() if caller is defined else '' }}</{{ name }}>{% endmacro %}{{ tag('a') }}{% call tag('b', body='y') %}inner{% endcall %}",
   R"json({})json",
   "<a>x</a><b>yinner</b>"},
  {"filters", "{{ ' Hi '|trim|upper }} {{ [3,1,2]|sort|join(',') }} {{ xs|map(attribute='n')|select('odd')|list }} {{ 'a-b c'|title }} {{ 2.5|round }} {{ '42.7'|int }} {{ none|default('d') }} {{ xs|selectattr('n', 'gt', 1)|list|length }}",
   R"json({"xs": [{"n": 1}, {"n": 2}, {"n": 3}]})json",
   "HI 1,2,3 [1, 3] A-B C 2.0 42 None 2"},
  {"methods", "{{ s.strip('-').split(',') }} {{ s.startswith('-') }} {{ d.get('k', 'none') }} {{ d.items()|list }} {{ '{}+{}'.format(1, 'x') }} {{ s[::-1] }} {{ s.replace('-', '') }}",
   R"json({"s": "-a,b-", "d": {"q": 1}})json",
   "['a', 'b'] True none [('q', 1)] 1+x -b,a- a,b"},
  {"tests", "{{ 3 is odd }} {{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ 4 is divisibleby 2 }} {{ [1] is iterable }} {{ 1 is sameas 1 }} {{ 'A' is upper }}",
   R"json({})json",
   "True False True True True True True True True"},
  {"printing", "{{ [1, 'a', none, true, {'k': \"it's\"}] }} {{ 1/2 }} {{ 7//2 }} {{ -7 % 3 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 2**10 }} {{ (1, 2) }}",
   R"json({})json",
   "[1, 'a', None, True, {'k': \"it's\"}] 0.5 3 2 1e+20 0.30000000000000004 1024 (1, 2)"},
  {"undefined", "[{{ missing }}][{{ d.nope }}][{{ missing|default('x') }}][{{ missing is defined }}][{% for x in missing %}{{ x }}{% endfor %}]",
   R"json({"d": {}})json",
   "[][][x][False][]"},
  {"markup", "{{ ('<b>'|safe + '<i>') }} {{ '<x>'|e }} {{ '<a>' ~ ('<b>'|safe) }}",
   R"json({})json",
   "<b>&lt;i&gt; &lt;x&gt; <a><b>"},
  {"filter_block", "{% filter upper %}abc {{ x }}{% endfilter %}{% set b | trim %}  pad  {% endset %}[{{ b }}]",
   R"json({"x": "y"})json",
   "ABC Y[pad]"},
  {"unicode", "{{ s|length }} {{ s[1] }} {{ s|upper }} {{ s[::-1] }}",
   R"json({"s": "\u00e9\u00df\u65e5\ud83d\ude00"})json",
   "4 ß ÉSS日😀 😀日ßé"},
};

TEST(TemplateRender, MatchesJinja2) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(render(c.source, nlohmann::ordered_json::parse(c.variables)), c.expected);
  }
}

TEST(TemplateRender, TransformersDefaultsAndNullAsAbsent) {
  // render_jinja_template passes tools=None, documents=None, add_generation_prompt=False.
  EXPECT_EQ(render("{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ x is defined }}",
                   nlohmann::ordered_json{{"x", nullptr}}),
            "TrueTrueFalseFalse");
  EXPECT_EQ(render("{{ tools|length }}", nlohmann::ordered_json{{"tools", nlohmann::ordered_json::array({1, 2})}}), "2");
}

TEST(TemplateRender, KeyOrderFollowsTheInput) {
  auto vars = nlohmann::ordered_json::parse(R"({"d": {"b": 1, "a": 2}})");
  EXPECT_EQ(render("{{ d|tojson }}", vars), "{\"b\": 1, \"a\": 2}");
  // nlohmann::json keeps keys sorted; the ordered_json overload is the one that keeps them.
  EXPECT_EQ(render("{{ d|tojson }}", nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}})")), "{\"a\": 2, \"b\": 1}");
}

}  // namespace template_render_test
}  // namespace fuselm::tmpl
