#include "common/json_log.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "common/unique_fd.h"

namespace pando::log {

namespace {

std::shared_ptr<spdlog::logger> g_logger;
std::string g_prefix;

// Writes each formatted line with one write(2) on an fd opened by the caller.
// Write errors drop the line: logging must never disturb the session.
class FdSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  explicit FdSink(UniqueFd fd) : fd_(std::move(fd)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* data = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_.get(), data, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      data += n;
      left -= static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  UniqueFd fd_;
};

// "<N>" before each line, N the syslog priority of its level: what journald
// reads from a stream it is connected to (sd-daemon(3)), so that
// `journalctl -p err` finds the daemon's errors.
class SyslogPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string_view prefix = syslog_prefix(msg.level);
    dest.append(prefix.data(), prefix.data() + prefix.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriority>();
  }
};

void install(std::string_view event_prefix, spdlog::sink_ptr sink, spdlog::level::level_enum level,
             bool syslog_priorities) {
  g_prefix = std::string(event_prefix);
  g_logger = std::make_shared<spdlog::logger>("pando", std::move(sink));
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<SyslogPriority>('*');
  formatter->set_pattern(std::string(syslog_priorities ? "%*" : "") +
                         R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l",%v})");
  g_logger->set_formatter(std::move(formatter));
  g_logger->set_level(level);
  g_logger->flush_on(spdlog::level::trace);
}

}  // namespace

std::string_view syslog_prefix(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical:
      return "<2>";
    case spdlog::level::err:
      return "<3>";
    case spdlog::level::warn:
      return "<4>";
    case spdlog::level::info:
      return "<6>";
    default:
      return "<7>";
  }
}

bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return std::string_view(stream) ==
         fmt::format("{}:{}", static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
}

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
  if (path.empty()) {
    install(event_prefix, std::make_shared<spdlog::sinks::stderr_sink_st>(), level,
            stderr_is_journal());
  } else {
    install(event_prefix, std::make_shared<spdlog::sinks::basic_file_sink_st>(path, false), level,
            false);
  }
}

bool init_file_once(std::string_view event_prefix, const std::string& path,
                    spdlog::level::level_enum level) {
  g_logger.reset();
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return false;
  install(event_prefix, std::make_shared<FdSink>(std::move(fd)), level, false);
  return true;
}

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
