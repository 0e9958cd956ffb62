#include "client/caller_git.h"

#include <sys/wait.h>

#include <charconv>
#include <exception>
#include <optional>

#include "common/child_output.h"
#include "proto/error.h"

namespace pando::client {

namespace {

constexpr const char* kBareCheck = "git.safe_bare_repository";
constexpr const char* kSubmoduleCheck = "git.ignore_submodules";

// `git ARGS` as the caller from /: the first line of its output when it exits 0, an empty
// string when it exits 1 (`git config --get` of an unset key), nullopt when git cannot run.
// Throws pando::Error when git hangs, says too much or fails otherwise.
std::optional<std::string> run_git(std::vector<std::string> args) {
  ChildCommand command;
  command.argv = {"git"};
  command.argv.insert(command.argv.end(), args.begin(), args.end());
  command.search_path = true;
  command.inherit_environment = true;
  command.working_directory = "/";
  command.max_output = 4096;
  const std::optional<ChildOutput> ran = run_for_output(command);
  if (!ran) return std::nullopt;
  const int status = ran->wait_status;
  if (!ran->complete || !WIFEXITED(status) || WEXITSTATUS(status) > 1) {
    throw Error(helper::v1::ERROR_INTERNAL,
                "git " + args.front() + (ran->complete ? " failed" : " did not finish"));
  }
  if (WEXITSTATUS(status) == 1) return std::string();
  return ran->output.substr(0, ran->output.find('\n'));
}

// "git version 2.39.5" -> {2, 39}; nullopt when it does not read so.
std::optional<std::pair<int, int>> parse_version(const std::string& line) {
  constexpr std::string_view kPrefix = "git version ";
  if (line.rfind(kPrefix, 0) != 0) return std::nullopt;
  const char* begin = line.data() + kPrefix.size();
  const char* end = line.data() + line.size();
  int major = 0;
  int minor = 0;
  auto [after_major, error] = std::from_chars(begin, end, major);
  if (error != std::errc() || after_major == end || *after_major != '.') return std::nullopt;
  if (std::from_chars(after_major + 1, end, minor).ec != std::errc()) return std::nullopt;
  return std::make_pair(major, minor);
}

CallerGitCheck bare_repository_check(const std::pair<int, int>& version) {
  if (version < std::make_pair(2, 38)) {
    return {kBareCheck, "WARN",
            "git " + std::to_string(version.first) + "." + std::to_string(version.second) +
                " cannot refuse a bare repository (safe.bareRepository is git 2.38): the role "
                "can turn the project root into one whose config your next git log runs"};
  }
  const std::string value = run_git({"config", "--get", "safe.bareRepository"}).value_or("");
  if (value == "explicit") {
    return {kBareCheck, "PASS",
            "safe.bareRepository is explicit: git uses no bare repository it was not pointed at"};
  }
  return {kBareCheck, "WARN",
          "safe.bareRepository is " + (value.empty() ? std::string("not set") : value) +
              ": the role can turn the project root into a bare repository whose config your "
              "next git log runs; run: git config --global safe.bareRepository explicit"};
}

CallerGitCheck submodule_check() {
  const std::string value = run_git({"config", "--get", "diff.ignoreSubmodules"}).value_or("");
  if (value == "dirty" || value == "all") {
    return {kSubmoduleCheck, "PASS",
            "diff.ignoreSubmodules is " + value +
                ": git status runs nothing in a submodule that the project's .gitmodules gives "
                "no ignore= of its own (that one still wins)"};
  }
  return {kSubmoduleCheck, "WARN",
          "diff.ignoreSubmodules is " + (value.empty() ? std::string("not set") : value) +
              ": git status at the project root runs the config of a repository the role adds "
              "as a submodule; run: git config --global diff.ignoreSubmodules dirty"};
}

}  // namespace

std::vector<CallerGitCheck> check_caller_git() {
  try {
    const std::optional<std::string> version_line = run_git({"--version"});
    if (!version_line) {
      const std::string why = "git is not installed here (nothing of yours to harden)";
      return {{kBareCheck, "SKIP", why}, {kSubmoduleCheck, "SKIP", why}};
    }
    const auto version = parse_version(*version_line);
    if (!version) {
      const std::string why = "cannot read git's version from \"" + *version_line + "\"";
      return {{kBareCheck, "SKIP", why}, {kSubmoduleCheck, "SKIP", why}};
    }
    return {bare_repository_check(*version), submodule_check()};
  } catch (const std::exception& e) {
    const std::string why = std::string("cannot ask git: ") + e.what();
    return {{kBareCheck, "SKIP", why}, {kSubmoduleCheck, "SKIP", why}};
  }
}

}  // namespace pando::client
