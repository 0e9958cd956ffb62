#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including
// <utility>; include it first, in an order clang-format must not sort.
// clang-format off
#include <utility>
#include <boost/asio.hpp>
// clang-format on
