#pragma once

#include <string>
#include <string_view>

namespace pando {

// Text another process chose, made safe to print on a terminal, as ls and git quote file
// names: the daemon's messages quote names the role made in the project, and an escape
// sequence among them would move the cursor, retitle the window or recolour what follows.
// Control characters (C0, DEL, and C1 written in UTF-8) and bytes that are not UTF-8 become
// \xHH (\n, \r, \t as such, C1 as \u0080..\u009f), and the backslash itself \\, so the
// output is unambiguous; everything else, other scripts included, passes unchanged.
std::string printable(std::string_view text);

}  // namespace pando
