// The cgroupfs file helpers (cgroup_fs, cgroup_version.h) and the parsing of the kernel's
// text (cgroup_text, cgroups.h) that v1, v2 and the detection share.

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "daemon/cgroup_version.h"
#include "daemon/cgroups.h"
#include "proto/error.h"

namespace pando::daemon {

using pando::helper::v1::ERROR_CGROUP_UNAVAILABLE;

// ---------------------------------------------------------------------------------------------
// cgroup_fs

namespace cgroup_fs {

void fail(const std::string& what, int err) {
  errno = err;
  pando::throw_errno(what, ERROR_CGROUP_UNAVAILABLE);
}

std::optional<std::string> read_if_exists(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    fail("open " + path, errno);
  }
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      fail("read " + path, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

std::string read_text(const std::string& path) {
  auto text = read_if_exists(path);
  if (!text) fail("open " + path, ENOENT);
  return *text;
}

void write_value(const std::string& path, std::string_view value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("open {} to write '{}'", path, value), errno);
  ssize_t n;
  do {
    n = write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  close(fd);
  if (n < 0) fail(fmt::format("write '{}' to {}", value, path), err);
  if (static_cast<size_t>(n) != value.size()) {
    throw pando::Error(ERROR_CGROUP_UNAVAILABLE,
                       fmt::format("short write of '{}' to {}", value, path));
  }
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

bool make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  fail("mkdir " + path, errno);
}

uint64_t parse_u64(std::string_view text, const std::string& what) {
  uint64_t value = 0;
  size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (digits == 0) {
    throw pando::Error(ERROR_CGROUP_UNAVAILABLE, fmt::format("{}: not a number: '{}'", what, text));
  }
  return value;
}

std::optional<uint64_t> read_u64(const std::string& path) {
  auto text = read_if_exists(path);
  if (!text) return std::nullopt;
  return parse_u64(*text, path);
}

std::optional<uint64_t> read_keyed(const std::string& path, std::string_view key) {
  auto text = read_if_exists(path);
  if (!text) return std::nullopt;
  return cgroup_text::keyed_value(*text, key);
}

std::vector<pid_t> read_pids(const std::string& procs_path) {
  std::vector<pid_t> pids;
  auto text = read_if_exists(procs_path);
  if (!text) return pids;
  for (const auto& line : split(*text, '\n')) {
    if (!line.empty()) pids.push_back(static_cast<pid_t>(parse_u64(line, procs_path)));
  }
  return pids;
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  for (;;) {
    size_t end = text.find(sep, pos);
    parts.emplace_back(text.substr(pos, end == std::string_view::npos ? end : end - pos));
    if (end == std::string_view::npos) return parts;
    pos = end + 1;
  }
}

bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string join(const std::vector<std::string>& list, std::string_view sep) {
  std::string out;
  for (const auto& item : list) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

}  // namespace cgroup_fs

// ---------------------------------------------------------------------------------------------
// cgroup_text (v2-only parsing is in cgroup_v2.cc)

namespace cgroup_text {

using cgroup_fs::parse_u64;
using cgroup_fs::split;

namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> fields(std::string_view line) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos >= line.size()) break;
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    out.emplace_back(line.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

constexpr std::array<std::string_view, 13> kV1Controllers = {
    "cpu",   "cpuacct",    "cpuset",   "memory",  "devices", "freezer", "net_cls",
    "blkio", "perf_event", "net_prio", "hugetlb", "pids",    "rdma"};

}  // namespace

std::vector<Mount> parse_mountinfo(std::string_view text) {
  std::vector<Mount> mounts;
  for (const auto& line : split(text, '\n')) {
    // id parent major:minor root mount_point options [optional...] - fstype source super_options
    auto f = fields(line);
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 6 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string& fstype = dash[1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    Mount m;
    m.root = unescape_octal(f[3]);
    m.mount_point = unescape_octal(f[4]);
    m.unified = fstype == "cgroup2";
    if (!m.unified) {
      for (const auto& opt : split(dash[3], ',')) {
        if (std::find(kV1Controllers.begin(), kV1Controllers.end(), opt) != kV1Controllers.end()) {
          m.controllers.push_back(opt);
        }
      }
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

std::vector<Membership> parse_proc_cgroup(std::string_view text) {
  std::vector<Membership> out;
  for (const auto& line : split(text, '\n')) {
    size_t c1 = line.find(':');
    if (c1 == std::string::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    Membership m;
    m.hierarchy_id = line.substr(0, c1);
    std::string list = line.substr(c1 + 1, c2 - c1 - 1);
    if (!list.empty()) m.controllers = split(list, ',');
    m.path = line.substr(c2 + 1);
    if (m.path.empty() || m.path[0] != '/') continue;
    out.push_back(std::move(m));
  }
  return out;
}

bool valid_parent(std::string_view parent) {
  if (parent.empty() || parent.size() > 256 || parent.front() == '/') return false;
  for (const auto& part : split(parent, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_' || c == '.';
      if (!ok) return false;
    }
  }
  return true;
}

bool valid_session_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

std::optional<uint64_t> keyed_value(std::string_view text, std::string_view key) {
  for (const auto& line : split(text, '\n')) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ') {
      return parse_u64(std::string_view(line).substr(key.size() + 1), std::string(key));
    }
  }
  return std::nullopt;
}

}  // namespace cgroup_text

}  // namespace pando::daemon
