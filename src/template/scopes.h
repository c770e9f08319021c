#pragma once
// Frame analysis: which names each jinja2 frame stores, and which start with the outer value,
// following jinja2/idtracking.py (symbol loads/stores, branch_update for if-statements).
#include <string>
#include <vector>

#include "template/ast.h"

namespace fuselm::tmpl {

/// Analyses `body` as one frame whose `preset` names (loop targets, macro parameters) are set on
/// entry; fills the frames of nested bodies (Stmt::frame, else_frame) and returns this one's.
FramePtr analyze_frames(Body& body, const std::vector<std::string>& preset);

}  // namespace fuselm::tmpl
