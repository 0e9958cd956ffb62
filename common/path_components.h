#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pando {

// The names of a slash-separated path in order, without empty ones ("/a//b/" is a, b); "." and
// ".." are kept, for the caller to resolve as it walks.
std::vector<std::string> path_components(std::string_view path);

}  // namespace pando
