#pragma once
// The template parser: tokens -> statement tree, following jinja2's grammar and operator
// precedence (jinja2/parser.py). Constructs outside the supported subset are errors naming the
// line and the construct.
#include <string>

#include "template/ast.h"

namespace fuselm::tmpl {

/// Parses a whole template. Throws TemplateError("line N: ...") on syntax errors, unsupported
/// tags (include, extends, import, block, raw, do, ...), and, as jinja2 does at compile time, on
/// unknown filters or tests outside if-statements and conditional expressions.
Body parse(const std::string& source);

}  // namespace fuselm::tmpl
