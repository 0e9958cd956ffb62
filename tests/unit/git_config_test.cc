// The git config reader the launcher uses to find hooks directories and
// included files that must be pinned with the config (project_exits.cc).

#include "daemon/sandbox/git_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pando::sandbox {
namespace {

using Paths = std::vector<std::string>;

TEST(GitConfig, FindsHooksPathsInEverySpelling) {
  const GitConfigPaths paths = git_config_paths(
      "[core]\n\thooksPath = .husky/_\n"
      "[CORE]\n  HOOKSPATH=\"spaced dir\" # comment\n"
      "[core]\n\thookspath = tools/hooks ; comment\n"
      "[core]\n\thooksPath = \"quoted \\\"x\\\"\"\n"
      "[core]\n\thooksPath = split\\\n-line\n");
  EXPECT_EQ(paths.hooks_paths,
            (Paths{".husky/_", "spaced dir", "tools/hooks", "quoted \"x\"", "split-line"}));
  EXPECT_TRUE(paths.include_paths.empty());
}

TEST(GitConfig, FindsIncludesAndConditionalIncludes) {
  const GitConfigPaths paths = git_config_paths(
      "[include]\n  path = ../shared.gitconfig\n"
      "[includeIf \"gitdir:~/work/\"]\n  path = work.inc\n"
      "[IncludeIf \"onbranch:main\"]\n  Path = \"main.inc\"\n");
  EXPECT_EQ(paths.include_paths, (Paths{"../shared.gitconfig", "work.inc", "main.inc"}));
}

TEST(GitConfig, IgnoresLookAlikes) {
  const GitConfigPaths paths = git_config_paths(
      "# [core] hooksPath = commented\n"
      "; [include] path = commented\n"
      "[core \"sub\"]\n  hooksPath = subsection\n"
      "[include \"x\"]\n  path = subsection\n"
      "[includeIf]\n  path = no-condition\n"
      "[alias]\n  path = alias\n  hooksPath = alias\n"
      "[core]\n  hooksPathX = other-key\n  hooksPath\n"
      "[core]\n  hooksPath = \"unterminated\n"
      "[core]\n  hooksPath = bad\\qescape\n");
  EXPECT_TRUE(paths.hooks_paths.empty()) << paths.hooks_paths.front();
  EXPECT_TRUE(paths.include_paths.empty()) << paths.include_paths.front();
}

TEST(GitConfig, TruncatedInputIsSafe) {
  const std::string text = "[core]\n\thooksPath = \"a\\\\b\"\n[include]\n\tpath = c\\\n";
  for (size_t n = 0; n <= text.size(); ++n) git_config_paths(text.substr(0, n));
  EXPECT_EQ(git_config_paths(text).hooks_paths, (Paths{"a\\b"}));
}

}  // namespace
}  // namespace pando::sandbox
