#pragma once
// The grammar that makes a reply one tool call (tool_choice "required" or a named function),
// built from the markers discovered in the chat template (tool_format.h) and each function's
// parameters schema: the call's opening text, its name, its arguments as the schema allows,
// then its closing text, then the end of the reply.
#include <nlohmann/json.hpp>

#include <string>

#include "grammar/grammar.h"
#include "template/tool_format.h"

namespace fuselm::server {

/// One call of `name` (or, when `name` is empty, of any function in `tools`) written as format
/// `f` writes it, its arguments valid under the function's `parameters` (strict when the
/// function says "strict": true; an absent schema is any object). For name_then_params formats
/// the required parameters are written, in the schema's order: a string one as one line of text
/// without the close marker's first character (minLength/maxLength kept; or one of its enum), any
/// other as JSON under its schema. Throws ApiError 400 (param "tools") naming the function and the schema keyword the
/// grammar cannot enforce.
grammar::Grammar tool_call_grammar(const tmpl::ToolFormat& f, const nlohmann::json& tools, const std::string& name);

}  // namespace fuselm::server
