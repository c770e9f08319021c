#pragma once
// Evaluates the symbolic shape expressions torch.export writes (sympy text over s0, s1, ...).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace fuselm::runtime {

using SymbolValues = std::map<std::string, int64_t, std::less<>>;

/// Integer value of expr ("s0", "2*s0 + 1", "floor(s0/2)", "Max(1, s0)", "Mod(s0, 4)").
/// Throws std::runtime_error naming the expression when it uses an unbound symbol or an
/// unsupported function.
int64_t eval_sym(std::string_view expr, const SymbolValues& symbols);

}  // namespace fuselm::runtime
