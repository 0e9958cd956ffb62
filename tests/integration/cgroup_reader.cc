#include "tests/integration/cgroup_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace pando::itest {
namespace {

// v1 shows an unlimited memory.limit_in_bytes as LONG_MAX rounded down to a page.
constexpr uint64_t kV1MemoryUnlimited = 0x7FFFFFFFFFFFF000;

bool has_file(const std::string& dir, const std::string& file) {
  return access((dir + "/" + file).c_str(), F_OK) == 0;
}

const char* name_of(CgroupController controller) {
  switch (controller) {
    case CgroupController::kMemory:
      return "memory";
    case CgroupController::kPids:
      return "pids";
    case CgroupController::kCpu:
      return "cpu";
    case CgroupController::kCpuAccounting:
      return "cpuacct";
  }
  return "?";
}

// A file only the v1 hierarchy of `controller` has.
const char* v1_marker(CgroupController controller) {
  switch (controller) {
    case CgroupController::kMemory:
      return "memory.limit_in_bytes";
    case CgroupController::kPids:
      return "pids.max";
    case CgroupController::kCpu:
      return "cpu.cfs_quota_us";
    case CgroupController::kCpuAccounting:
      return "cpuacct.usage";
  }
  return "";
}

// "max" or "-1": no limit; otherwise a decimal number filling the first word.
std::optional<uint64_t> parse_limit(const std::string& word) {
  if (word == "max" || word == "-1") return kNoLimit;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (ec != std::errc() || end != word.data() + word.size() || word.empty()) return std::nullopt;
  return value;
}

std::string join(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : " ") + d;
  return out.empty() ? "(no directories)" : out;
}

}  // namespace

CgroupReader::CgroupReader(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {
  for (const auto& d : dirs_) unified_ = unified_ || has_file(d, "cgroup.controllers");
}

std::string CgroupReader::dir_of(CgroupController controller) const {
  for (const auto& d : dirs_) {
    if (!unified_ && has_file(d, v1_marker(controller))) return d;
    if (!unified_ || !has_file(d, "cgroup.controllers")) continue;
    if (controller == CgroupController::kCpuAccounting) return has_file(d, "cpu.stat") ? d : "";
    std::ifstream in(d + "/cgroup.controllers");
    for (std::string c; in >> c;) {
      if (c == name_of(controller)) return d;
    }
  }
  return "";
}

std::string CgroupReader::missing(std::initializer_list<CgroupController> wanted) const {
  // Every session and caller has a cgroup: none found is the harness's or the daemon's fault,
  // not something this host lacks.
  if (dirs_.empty()) {
    ADD_FAILURE() << "no cgroup directories to look in: the harness found none";
    return "no cgroup directories to look in";
  }
  for (CgroupController c : wanted) {
    if (dir_of(c).empty()) {
      return std::string("no ") + name_of(c) + " controller (cgroup " + (unified_ ? "v2" : "v1") +
             ") in " + join(dirs_);
    }
  }
  return "";
}

std::optional<std::string> CgroupReader::read(CgroupController controller,
                                              const std::string& file) const {
  const std::string dir = dir_of(controller);
  std::ifstream in(dir + "/" + file);
  if (dir.empty() || !in) {
    ADD_FAILURE() << "cannot read " << file << " of the " << name_of(controller)
                  << " controller in " << join(dirs_);
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<uint64_t> CgroupReader::number(CgroupController controller,
                                             const std::string& file) const {
  const auto text = read(controller, file);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string word;
  in >> word;
  const auto value = parse_limit(word);
  if (!value) ADD_FAILURE() << file << " holds no number: '" << *text << "'";
  return value;
}

std::optional<uint64_t> CgroupReader::keyed(CgroupController controller, const std::string& file,
                                            const std::string& key) const {
  const auto text = read(controller, file);
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  for (std::string k, v; in >> k >> v;) {
    if (k == key) return parse_limit(v);
  }
  ADD_FAILURE() << file << " has no '" << key << "': '" << *text << "'";
  return std::nullopt;
}

std::optional<uint64_t> CgroupReader::pids_max() const {
  return number(CgroupController::kPids, "pids.max");
}

std::optional<uint64_t> CgroupReader::pids_current() const {
  return number(CgroupController::kPids, "pids.current");
}

std::optional<uint64_t> CgroupReader::pids_limit_events() const {
  return keyed(CgroupController::kPids, "pids.events", "max");
}

std::optional<uint64_t> CgroupReader::memory_max() const {
  if (unified_) return number(CgroupController::kMemory, "memory.max");
  const auto limit = number(CgroupController::kMemory, "memory.limit_in_bytes");
  if (limit && *limit >= kV1MemoryUnlimited) return kNoLimit;
  return limit;
}

std::optional<uint64_t> CgroupReader::memory_current() const {
  return number(CgroupController::kMemory, unified_ ? "memory.current" : "memory.usage_in_bytes");
}

std::optional<CpuMax> CgroupReader::cpu_max() const {
  std::optional<uint64_t> quota;
  std::optional<uint64_t> period;
  if (unified_) {
    const auto text = read(CgroupController::kCpu, "cpu.max");
    if (!text) return std::nullopt;
    std::istringstream in(*text);
    std::string quota_word, period_word;
    in >> quota_word >> period_word;
    quota = parse_limit(quota_word);
    period = parse_limit(period_word);
    if (!quota || !period) ADD_FAILURE() << "cpu.max is not '<quota> <period>': '" << *text << "'";
  } else {
    quota = number(CgroupController::kCpu, "cpu.cfs_quota_us");
    period = number(CgroupController::kCpu, "cpu.cfs_period_us");
  }
  if (!quota || !period) return std::nullopt;
  return CpuMax{*quota, *period};
}

std::optional<uint64_t> CgroupReader::cpu_usage_usec() const {
  if (unified_) return keyed(CgroupController::kCpuAccounting, "cpu.stat", "usage_usec");
  const auto nsec = number(CgroupController::kCpuAccounting, "cpuacct.usage");
  if (!nsec) return std::nullopt;
  return *nsec / 1000;
}

std::optional<uint64_t> CgroupReader::cpu_throttled() const {
  return keyed(CgroupController::kCpu, "cpu.stat", "nr_throttled");
}

}  // namespace pando::itest
