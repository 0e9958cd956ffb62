#pragma once

// JSON-lines event logging on top of spdlog, shared by daemon and client.
// Each line: {"ts":..., "level":..., "event":"<prefix>_<name>", <fields>}.
// Never pass environment values or stdio payloads as fields.

#include <spdlog/spdlog.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pando::log {

using FieldValue =
    std::variant<std::string_view, std::string, int64_t, uint64_t, int, unsigned, bool>;
using Field = std::pair<std::string_view, FieldValue>;

// Sets the process-wide logger. `path` empty: stderr, each line prefixed with
// its syslog priority ("<3>" for errors) when stderr is the journal (see
// stderr_is_journal()). Throws when the file cannot be opened (after spdlog's
// own retries).
void init(std::string_view event_prefix, const std::string& path, spdlog::level::level_enum level);
// Sets the process-wide logger to append to `path`, opened once (no retries, no
// directory creation, never through a final symlink, created 0600). On failure
// logging stays off and false is returned; nothing is printed.
bool init_file_once(std::string_view event_prefix, const std::string& path,
                    spdlog::level::level_enum level);

void event(spdlog::level::level_enum level, std::string_view name,
           std::initializer_list<Field> fields = {});

inline void info(std::string_view name, std::initializer_list<Field> fields = {}) {
  event(spdlog::level::info, name, fields);
}
inline void warn(std::string_view name, std::initializer_list<Field> fields = {}) {
  event(spdlog::level::warn, name, fields);
}
inline void error(std::string_view name, std::initializer_list<Field> fields = {}) {
  event(spdlog::level::err, name, fields);
}

std::string json_escape(std::string_view text);

// "<N>" for the syslog priority of a level (critical 2, err 3, warn 4, info 6, else 7).
std::string_view syslog_prefix(spdlog::level::level_enum level);
// Whether $JOURNAL_STREAM names stderr's device and inode, as systemd sets it
// for a service whose stderr is the journal.
bool stderr_is_journal();

}  // namespace pando::log
