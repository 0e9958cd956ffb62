// Issue 24: the git exits two fresh reviewers found, each reproduced as they ran it. The
// workspace role writes the project as the caller, and the caller's own git runs what a
// repository's config names (hooks, core.fsmonitor): whatever git would read as config or run
// as hooks must stay out of the role's reach, for every working tree and git dir of the
// project, however the config is written. The daemon asks the caller's own git (as the caller,
// confined) and pins what it names; these tests then run the caller's git on the host after the
// session and check that nothing the role planted ran.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace fs = std::filesystem;

class GitExitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    start_daemon();
  }
  void start_daemon(DaemonOptions options = {}, const std::string& workspace_fields = "") {
    options.workspace_argv_text = kDispatchArgv + workspace_fields;
    daemon_.reset();
    daemon_ = std::make_unique<Daemon>(options);
    project_ = daemon_->dir().make_dir("proj", caller());
    // Where a command planted by the role would leave its mark if the caller's git ran it:
    // outside the project, the caller's only.
    marks_ = daemon_->dir().make_dir("marks", caller(), 0700);
    home_ = marks_;
  }
  // `script` in a workspace session, with $M naming the marks directory.
  RunResult sh(const std::string& script) {
    RunOptions options;
    options.stdin_data = "M=" + marks_ + "; " + script + "\n";
    return launch(*daemon_, caller(), "workspace", project_, options);
  }
  // The caller's own git on the host, as a shell prompt or an editor runs it.
  RunResult git(const std::string& dir, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/git",
                                     "-C",
                                     dir,
                                     "-c",
                                     "user.name=caller",
                                     "-c",
                                     "user.email=caller@example.invalid",
                                     "-c",
                                     "protocol.file.allow=always"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions options;
    options.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", home_}, {"GIT_CONFIG_NOSYSTEM", "1"}};
    return run_as(caller(), argv, options);
  }
  void ok(const std::string& dir, const std::vector<std::string>& args) {
    const RunResult r = git(dir, args);
    ASSERT_EQ(r.exit_code, 0) << args.front() << ": " << r.err;
  }
  void make_repository(const std::string& dir) {
    ASSERT_NO_FATAL_FAILURE(ok(dir, {"init", "-q", "-b", "main"}));
    std::ofstream(dir + "/README") << "hello\n";
    ASSERT_EQ(chown((dir + "/README").c_str(), caller().uid, caller().gid), 0);
    ASSERT_NO_FATAL_FAILURE(ok(dir, {"add", "README"}));
    ASSERT_NO_FATAL_FAILURE(ok(dir, {"commit", "-q", "-m", "first"}));
  }
  // `text` as the caller's file `relative` (in the project unless absolute).
  void write(const std::string& relative, const std::string& text) {
    const std::string path = relative.front() == '/' ? relative : project_ + "/" + relative;
    std::ofstream(path, std::ios::binary) << text;
    ASSERT_EQ(chown(path.c_str(), caller().uid, caller().gid), 0) << path;
  }
  std::vector<std::string> marks() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(marks_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }
  // A shell check `t NAME ...` that plants a hook at `path` (made executable), which leaves
  // the mark NAME when git runs it.
  static std::string plant_hook(const std::string& name, const std::string& path) {
    const std::string dir = path.substr(0, path.rfind('/'));
    return "t " + name + " sh -c 'mkdir -p \"" + dir + "\" && printf \"#!/bin/sh\\ntouch $M/" +
           name + "\\n\" > \"" + path + "\" && chmod +x \"" + path + "\"'; ";
  }
  // ... and one that appends a core.fsmonitor to the config file `path`.
  static std::string plant_fsmonitor(const std::string& name, const std::string& path) {
    return "t " + name + " sh -c 'printf \"[core]\\n\\tfsmonitor = touch $M/" + name +
           "\\n\" >> \"" + path + "\"'; ";
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
  std::string marks_;
  std::string home_;
};

// Finding 2: with core.hooksPath = .husky/_ in a submodule and in a repository with a linked
// worktree, the role wrote sub/.husky/_/pre-commit and wt/.husky/_/pre-commit, and the
// caller's next commit in each ran them (the walk had resolved the relative path against the
// git dir under .git/modules and .git/worktrees). Git resolves it against the working tree
// that runs the hook; asked there, it names the right one.
TEST_F(GitExitsTest, HooksOfSubmodulesAndLinkedWorktreesCannotBePlanted) {
  const std::string source = daemon_->dir().make_dir("source", caller());
  ASSERT_NO_FATAL_FAILURE(make_repository(source));
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"submodule", "add", "-q", source, "sub"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"commit", "-q", "-m", "sub"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_ + "/sub", {"config", "core.hooksPath", ".husky/_"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "core.hooksPath", ".husky/_"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"worktree", "add", "-q", "wt"}));
  const RunResult r = sh(std::string(kCheck) + plant_hook("sub", "sub/.husky/_/pre-commit") +
                         plant_hook("wt", "wt/.husky/_/pre-commit") +
                         plant_hook("main", ".husky/_/pre-commit") + "echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "sub no\nwt no\nmain no\ndone\n");
  for (const std::string& dir : {project_ + "/sub", project_ + "/wt", project_}) {
    ASSERT_NO_FATAL_FAILURE(ok(dir, {"commit", "-q", "--allow-empty", "-m", "after"}));
  }
  EXPECT_TRUE(marks().empty()) << marks().front();
}

// Finding 2, variants: an absolute core.hooksPath written through a symbolic link to the
// project ($PWD/.githooks from a shell whose $PWD runs through a link) is where git runs
// hooks from all the same.
TEST_F(GitExitsTest, AnAbsoluteHooksPathThroughALinkToTheProjectCannotBePlanted) {
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  const std::string link = daemon_->dir().path() + "/linked";
  ASSERT_EQ(symlink(project_.c_str(), link.c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "core.hooksPath", link + "/.githooks"}));
  const RunResult r =
      sh(std::string(kCheck) + plant_hook("linked", ".githooks/pre-commit") + "echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "linked no\ndone\n");
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"commit", "-q", "--allow-empty", "-m", "after"}));
  EXPECT_TRUE(marks().empty());
}

// Finding 2, variant: include.path = ~/proj/x.cfg (paths starting with ~ were skipped). The
// caller's home holds the project; git expands ~ to it.
TEST(GitExitsHomeTest, AnIncludeWrittenWithTheHomeTildeCannotBeWritten) {
  TempDir files;
  const std::string home = files.make_dir("home", caller());
  const std::string project = files.make_dir("home/proj", caller());
  const std::string marks = files.make_dir("marks", caller(), 0700);
  std::ifstream passwd_in("/etc/passwd");
  std::ostringstream passwd;
  for (std::string line; std::getline(passwd_in, line);) {
    if (line.rfind(caller().name + ":", 0) == 0) {
      std::vector<std::string> fields;
      std::istringstream split(line);
      for (std::string field; std::getline(split, field, ':');) fields.push_back(field);
      ASSERT_EQ(fields.size(), 7u);
      fields[5] = home;
      line = fields[0];
      for (std::size_t i = 1; i < fields.size(); ++i) line += ":" + fields[i];
    }
    passwd << line << "\n";
  }
  std::ofstream(files.path() + "/passwd") << passwd.str();
  DaemonOptions options;
  options.files_over = {{files.path() + "/passwd", "/etc/passwd"}};
  options.workspace_argv_text = kDispatchArgv;
  const Daemon daemon(options);
  const auto host_git = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/git", "-C", project};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions run;
    run.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", home}, {"GIT_CONFIG_NOSYSTEM", "1"}};
    return run_as(caller(), argv, run);
  };
  ASSERT_EQ(host_git({"init", "-q"}).exit_code, 0);
  ASSERT_EQ(host_git({"config", "include.path", "~/proj/x.cfg"}).exit_code, 0);
  RunOptions run;
  run.stdin_data = "printf '[core]\\n\\tfsmonitor = touch " + marks +
                   "/tilde\\n' >> x.cfg 2>/dev/null; echo done\n";
  const RunResult r = launch(daemon, caller(), "workspace", project, run);
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon.log();
  EXPECT_EQ(r.out, "done\n");
  EXPECT_EQ(host_git({"status", "--porcelain"}).exit_code, 0);
  EXPECT_FALSE(fs::exists(marks + "/tilde"));
  EXPECT_EQ(read_file(project + "/x.cfg"), "");
}

// Finding 4: a local remote inside the project (a bare repository, not named .git) kept its
// hooks/ and config writable; the role wrote hooks/post-receive, which the caller's
// `git push origin main` ran. A git dir is whatever git takes for one.
TEST_F(GitExitsTest, ABareRepositoryInTheProjectIsPinnedLikeAnyOther) {
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"init", "-q", "--bare", "-b", "main", "remote.git"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"remote", "add", "origin", project_ + "/remote.git"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"push", "-q", "origin", "main"}));
  const RunResult r =
      sh(std::string(kCheck) + plant_hook("post-receive", "remote.git/hooks/post-receive") +
         plant_fsmonitor("bare-config", "remote.git/config") +
         "t rename-bare mv remote.git other.git; echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "post-receive no\nbare-config no\nrename-bare no\ndone\n");
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"commit", "-q", "--allow-empty", "-m", "after"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"push", "-q", "origin", "main"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_ + "/remote.git", {"log", "-q", "-1"}));
  EXPECT_TRUE(marks().empty());
}

// Finding 7: with .git/config including c1 through c7, c5 and c6 stayed writable (the walk
// followed 4 levels; git follows 10), and git read the whole chain.
TEST_F(GitExitsTest, EveryIncludeGitFollowsCannotBeWritten) {
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "include.path", "../c1.cfg"}));
  std::string script = std::string(kCheck);
  for (int level = 1; level <= 9; ++level) {
    const std::string name = "c" + std::to_string(level) + ".cfg";
    write(name, level < 9 ? "[include]\n\tpath = c" + std::to_string(level + 1) + ".cfg\n"
                          : "[user]\n\tname = deep\n");
    script += plant_fsmonitor("c" + std::to_string(level), name);
  }
  // Git reads the whole chain.
  EXPECT_EQ(git(project_, {"config", "--get", "user.name"}).out, "caller\n");
  const RunResult r = sh(script + "echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "c1 no\nc2 no\nc3 no\nc4 no\nc5 no\nc6 no\nc7 no\nc8 no\nc9 no\ndone\n");
  EXPECT_EQ(git(project_, {"status", "--porcelain"}).exit_code, 0);
  EXPECT_TRUE(marks().empty());
}

// Finding 8: a path pinned writable first (as the parent of another pin) stayed writable when
// it was to be read-only too: core.hooksPath = tools with read_only_paths [tools/ci] left
// tools/pre-commit writable.
TEST_F(GitExitsTest, AHooksPathThatHoldsAReadOnlyPathStaysReadOnly) {
  start_daemon({}, "  read_only_paths: \"tools/ci\"\n");
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  daemon_->dir().make_dir("proj/tools", caller());
  daemon_->dir().make_dir("proj/tools/ci", caller());
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "core.hooksPath", "tools"}));
  const RunResult r =
      sh(std::string(kCheck) + plant_hook("tools", "tools/pre-commit") + "echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "tools no\ndone\n");
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"commit", "-q", "--allow-empty", "-m", "after"}));
  EXPECT_TRUE(marks().empty());
}

// Finding 9: a 710-byte file of 100 `path = x` lines, included from .git/config, cost cubic
// CPU as root (9.1 s a launch), with the caller's other sessions frozen meanwhile. Git stops at
// once (maximum include depth): the launch is refused with git's own message.
TEST_F(GitExitsTest, AnIncludeLoopIsRefusedWithGitsOwnMessage) {
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  std::string loop;
  for (int i = 0; i < 100; ++i) loop += "[include]\n\tpath = x\n";
  write(".git/x", loop);
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "include.path", "x"}));
  EXPECT_NE(git(project_, {"status"}).err.find("exceeded maximum include depth"),
            std::string::npos);
  const RunResult r = sh("echo launched");
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("ERROR_GIT_REFUSED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exceeded maximum include depth"), std::string::npos) << r.err;
}

// Finding 10: the launcher's own parser read config otherwise than git (a BOM, CRLF
// continuations, a backslash at the end of the file, tabs, CRs and quotes in values, a NUL,
// `..` above the including directory, `//` and non-canonical absolute paths): the real target
// stayed writable. Git reads each file now; the test first makes git prove it reads every
// target (each sets pando.case), then the role tries to add a core.fsmonitor to each.
TEST_F(GitExitsTest, WhatGitReadsIsPinnedHoweverItsConfigIsWritten) {
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  daemon_->dir().make_dir("proj/sub", caller());
  struct Case {
    std::string name;
    std::string including;  // included from .git/config, holds the construct
    std::string target;     // what git reads through it, relative to the project
  };
  const std::string dots = "../../" + fs::path(project_).filename().string();
  const std::vector<Case> cases = {
      {"bom", "\xef\xbb\xbf[include]\n\tpath = t-bom.cfg\n", ".git/t-bom.cfg"},
      {"crlf", "[include]\r\n\tpath = t-\\\r\ncrlf.cfg\r\n", ".git/t-crlf.cfg"},
      {"eof", "[include]\n\tpath = t-eof.cfg\\", ".git/t-eof.cfg"},
      {"tab", "[include]\n\tpath = t\ttab.cfg\n", ".git/t tab.cfg"},
      {"cr", "[include]\n\tpath = t\rcr.cfg\n", ".git/t cr.cfg"},
      {"quote", "[include]\n\tpath = \"\" t-quote.cfg\n", ".git/t-quote.cfg"},
      {"nul", "[include]\n\tpath = t-nul.cfg" + std::string(1, '\0') + ".ignored\n",
       ".git/t-nul.cfg"},
      {"dotdot", "[include]\n\tpath = " + dots + "/t-dotdot.cfg\n", "t-dotdot.cfg"},
      {"slashes", "[include]\n\tpath = /" + project_ + "/t-slashes.cfg\n", "t-slashes.cfg"},
      {"noncanonical", "[include]\n\tpath = " + project_ + "/./sub/../t-canon.cfg\n",
       "t-canon.cfg"},
  };
  std::string script = std::string(kCheck);
  for (const Case& c : cases) {
    write(".git/" + c.name + ".inc", c.including);
    write(c.target, "[pando]\n\tcase = " + c.name + "\n");
    ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "--add", "include.path", c.name + ".inc"}));
    script += plant_fsmonitor(c.name, c.target);
  }
  const RunResult read = git(project_, {"config", "--get-all", "pando.case"});
  for (const Case& c : cases) {
    EXPECT_NE(read.out.find(c.name + "\n"), std::string::npos) << "git does not read " << c.name;
  }
  const RunResult r = sh(script + "echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  std::string expected;
  for (const Case& c : cases) expected += c.name + " no\n";
  EXPECT_EQ(r.out, expected + "done\n");
  EXPECT_EQ(git(project_, {"status", "--porcelain"}).exit_code, 0);
  EXPECT_TRUE(marks().empty());
}

// Finding 6: a directory named with escape sequences came back raw in the client's rejection on
// the caller's terminal, and a symbolic link planted as somedir/.git made every later launch
// fail without saying what to delete. The refusal names the link, escaped, and what to do.
TEST_F(GitExitsTest, APlantedGitLinkIsNamedEscapedWithWhatToDo) {
  const std::string name = "\x1b]0;owned\x07\x1b[31m";
  daemon_->dir().make_dir("proj/" + name, caller());
  ASSERT_EQ(symlink("../elsewhere", (project_ + "/" + name + "/.git").c_str()), 0);
  const RunResult r = sh("echo launched");
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_NE(r.err.find("ERROR_PROTECTED_PATH_UNSUPPORTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(project_ + "/\\x1b]0;owned\\x07\\x1b[31m/.git is a symbolic link"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("remove it"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "a raw escape reached the terminal";
  EXPECT_EQ(r.err.find('\x07'), std::string::npos) << "a raw BEL reached the terminal";
}

// The caller's git is asked as the caller, never as root, and confined like a session: no
// network, nothing writable. A stand-in git (root's, as git_path must be) reports what it sees
// in the message the launch is refused with.
TEST_F(GitExitsTest, TheCallersGitIsAskedAsTheCallerConfined) {
  const TempDir files;
  const std::string fake = files.write_file(
      "fake-git",
      "#!/bin/sh\n"
      "w=no; touch /tmp/pando-git-probe-$$ 2>/dev/null && w=yes && rm -f /tmp/pando-git-probe-$$\n"
      "echo \"fatal: probe uid=$(id -u) gid=$(id -g) write=$w interfaces=$(tail -n +3 "
      "/proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,) home=$HOME\" >&2\n"
      "exit 128\n",
      TestUser{"root", 0, 0}, 0755);
  DaemonOptions options;
  options.extra_config = "git_path: \"" + fake + "\"\n";
  start_daemon(options);
  const RunResult r = sh("echo launched");
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_NE(r.err.find("ERROR_GIT_REFUSED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("probe uid=" + std::to_string(caller().uid) + " gid=" +
                       std::to_string(caller().gid) + " write=no interfaces=lo, home=/nonexistent"),
            std::string::npos)
      << r.err;
}

// Found by the fresh review of this design: a git dir the role makes below .git/modules before
// the caller's `git submodule update --init` is adopted by git as the submodule's, with its
// core.fsmonitor and hooks. modules/ and worktrees/ of every git dir are read-only (the git
// dirs already there stay writable for commits).
TEST_F(GitExitsTest, ARoleMadeSubmoduleGitDirIsNotAdopted) {
  const std::string source = daemon_->dir().make_dir("source", caller());
  ASSERT_NO_FATAL_FAILURE(make_repository(source));
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"submodule", "add", "-q", source, "lib"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"commit", "-q", "-m", "lib"}));
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"submodule", "deinit", "-q", "-f", "lib"}));
  fs::remove_all(project_ + "/.git/modules/lib");
  const RunResult r = sh(std::string(kCheck) +
                         "t premade git init -q --bare .git/modules/lib; "
                         "t worktree-dir mkdir .git/worktrees/evil; "
                         "t commit-in-existing sh -c 'cd sub-none 2>/dev/null; true'; echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "premade no\nworktree-dir no\ncommit-in-existing yes\ndone\n");
  EXPECT_FALSE(fs::exists(project_ + "/.git/modules/lib"));
}

// Found by the fresh review: a hook the role wrote and hard-linked under another name stayed
// writable through that name once the caller pointed core.hooksPath at its directory. A file
// git reads or runs, or a hidden one, with more than one name refuses the launch, naming it.
TEST_F(GitExitsTest, AHardLinkToWhatGitRunsRefusesTheLaunch) {
  ASSERT_NO_FATAL_FAILURE(make_repository(project_));
  const RunResult plant =
      sh("mkdir .githooks docs && printf '#!/bin/sh\\nexit 0\\n' > .githooks/pre-commit && "
         "chmod +x .githooks/pre-commit && ln .githooks/pre-commit docs/lint-notes.txt && "
         "echo planted");
  ASSERT_EQ(plant.out, "planted\n") << plant.err;
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"config", "core.hooksPath", ".githooks"}));
  const RunResult r = sh("printf 'touch $M/linked\\n' >> docs/lint-notes.txt; echo launched");
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_NE(r.err.find(project_ + "/.githooks/pre-commit has 2 hard links"), std::string::npos)
      << r.err;
  ASSERT_NO_FATAL_FAILURE(ok(project_, {"commit", "-q", "--allow-empty", "-m", "after"}));
  EXPECT_TRUE(marks().empty());
}

// Found by the fresh review: a name that is not UTF-8 (made by either role, in its home) made
// every later launch fail ("the daemon sent no valid plan"): names travel as bytes.
TEST_F(GitExitsTest, ANameThatIsNotUtf8BlocksNoLaunch) {
  const RunResult plant =
      sh("mkdir \"$(printf 'z\\377')\" && echo S=1 > \"$(printf 'z\\377')/.env\" && echo made");
  ASSERT_EQ(plant.out, "made\n") << plant.err;
  const RunResult r = sh("cat \"$(printf 'z\\377')/.env\"; echo launched");
  EXPECT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "launched\n");
}

// Found by the fresh review: the daemon reads the project as root, so a repository inside
// another user's private directory (in a drop directory the caller shares) was asked of the
// caller's git, and its name came back in the refusal. Git runs nothing where the caller cannot
// go: such a place is passed over, unnamed, and blocks nothing.
TEST_F(GitExitsTest, ARepositoryTheCallerCannotReachIsNeitherNamedNorABlock) {
  daemon_->dir().make_dir("proj/drop", caller(), 01777);
  daemon_->dir().make_dir("proj/drop/theirs", other_user(), 0700);
  daemon_->dir().make_dir("proj/drop/theirs/acquisition", other_user());
  daemon_->dir().make_dir("proj/drop/theirs/acquisition/.git", other_user());
  daemon_->dir().make_dir("proj/drop/theirs/acquisition/.git/objects", other_user());
  daemon_->dir().make_dir("proj/drop/theirs/acquisition/.git/refs", other_user());
  daemon_->dir().write_file("proj/drop/theirs/acquisition/.git/HEAD", "ref: refs/heads/main\n",
                            other_user());
  const RunResult r = sh("echo launched");
  EXPECT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "launched\n");
  EXPECT_EQ(r.err.find("acquisition"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pando::itest
