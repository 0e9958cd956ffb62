#include "common/json_log.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace pando::log {

namespace {

std::shared_ptr<spdlog::logger> g_logger;
std::string g_prefix;

}  // namespace

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  for (const unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

void init(std::string_view event_prefix, const std::string& path, spdlog::level::level_enum level) {
  g_prefix = std::string(event_prefix);
  if (path.empty()) {
    g_logger = std::make_shared<spdlog::logger>("pando",
                                                std::make_shared<spdlog::sinks::stderr_sink_st>());
  } else {
    g_logger = std::make_shared<spdlog::logger>(
        "pando", std::make_shared<spdlog::sinks::basic_file_sink_st>(path, false));
  }
  g_logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l",%v})",
                        spdlog::pattern_time_type::utc);
  g_logger->set_level(level);
  g_logger->flush_on(spdlog::level::trace);
}

void disable() { g_logger.reset(); }

void event(spdlog::level::level_enum level, std::string_view name,
           std::initializer_list<Field> fields) {
  if (!g_logger || !g_logger->should_log(level)) return;
  std::string line = fmt::format(R"("event":"{}_{}")", g_prefix, name);
  for (const auto& [key, value] : fields) {
    line += fmt::format(R"(,"{}":)", key);
    std::visit(
        [&line](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            line += v ? "true" : "false";
          } else if constexpr (std::is_same_v<T, std::string> ||
                               std::is_same_v<T, std::string_view>) {
            line += '"' + json_escape(v) + '"';
          } else {
            line += fmt::format("{}", v);
          }
        },
        value);
  }
  g_logger->log(level, line);
}

}  // namespace pando::log
