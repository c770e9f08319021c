#pragma once
// The JSON Schema keyword whitelist: before a schema is converted to a grammar, every keyword is
// checked against what xgrammar 0.2.8's json_schema_converter.cc enforces. That converter warns
// and ignores some keywords (not, if/then/else, dependent*, uniqueItems, contains, multipleOf on
// numbers, allOf of several schemas, oneOf it cannot prove disjoint, unknown formats, remote
// $refs) and picks ONE of $ref/const/enum/anyOf/oneOf/allOf/type per schema object, ignoring the
// others; each such case would let invalid output through, so it is refused here.
#include <nlohmann/json.hpp>

namespace fuselm::grammar {

/// Rewrites `schema` (in place) into the form whose keywords xgrammar enforces as JSON Schema
/// means them: an object schema with named properties and no additionalProperties gets
/// additionalProperties: false (a further key could be written with escapes that alias a named
/// one: the grammar narrows rather than fail open), unevaluatedProperties with no in-place
/// applicator beside it becomes the additionalProperties it then equals, and type-specific
/// keywords in a schema with no "type" (which xgrammar would drop) become anyOf one branch per
/// type with its keywords plus the remaining types (what JSON Schema means by them).
void normalize_schema(nlohmann::ordered_json& schema);

/// Throws UnsupportedSchemaError naming the first keyword (and its JSON pointer) that the grammar
/// would not enforce, or GrammarError for a schema that is not a JSON Schema (not an object or
/// boolean, a keyword of the wrong JSON type). Returns normally when every keyword is enforced.
/// `strict`: xgrammar's strict mode (objects and arrays closed unless the schema opens them).
/// Run on the normalized schema.
void check_schema(const nlohmann::json& schema, bool strict);

}  // namespace fuselm::grammar
