// Issue 11: what a workspace session leaves in the project must not run as the
// caller later (git metadata, read-only paths, the other role's directory) and
// must not unmask secrets for a later session. End to end through the real
// daemon and client; the caller's own git runs on the host afterwards.

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

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

class PersistenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    start_daemon();
  }
  void start_daemon(const std::string& workspace_fields = "") {
    DaemonOptions options;
    options.workspace_argv_text = kDispatchArgv + workspace_fields;
    daemon_.reset();
    daemon_ = std::make_unique<Daemon>(options);
    project_ = daemon_->dir().make_dir("proj", caller());
    // Where a hook planted by the role would leave its mark when the caller's
    // git runs it: outside the project, writable by the caller only.
    marks_ = daemon_->dir().make_dir("marks", caller(), 0700);
  }
  RunResult sh(const std::string& script, const std::string& role = "workspace") {
    RunOptions options;
    options.stdin_data = "M=" + marks_ + "; " + script + "\n";
    return launch(*daemon_, caller(), role, project_, options);
  }
  // The caller's own git on the host, as a shell prompt or editor would run it.
  RunResult host_git(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/git",
                                     "-C",
                                     project_,
                                     "-c",
                                     "user.name=caller",
                                     "-c",
                                     "user.email=caller@example.invalid"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions options;
    options.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", marks_}, {"GIT_CONFIG_NOSYSTEM", "1"}};
    return run_as(caller(), argv, options);
  }
  void make_repository() {
    ASSERT_EQ(host_git({"init", "-q"}).exit_code, 0);
    daemon_->dir().write_file("proj/README", "hello\n", caller());
    ASSERT_EQ(host_git({"add", "README"}).exit_code, 0);
    const RunResult commit = host_git({"commit", "-q", "-m", "first"});
    ASSERT_EQ(commit.exit_code, 0) << commit.err;
  }
  void expect_no_marks() { EXPECT_TRUE(names_in(marks_).empty()) << "a planted command ran"; }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
  std::string marks_;
};

TEST_F(PersistenceTest, GitMetadataCannotBeChangedRenamedOrReplaced) {
  ASSERT_NO_FATAL_FAILURE(make_repository());
  fs::remove_all(project_ + "/.git/hooks");  // a missing hooks/ must not be creatable
  const RunResult r =
      sh(std::string(kCheck) +
         "t append-config sh -c 'printf \"[core]\\n\\tfsmonitor = touch $M/fsmonitor\\n\" >> "
         ".git/config'; "
         "t git-config git config core.fsmonitor \"touch $M/fsmonitor\"; "
         "t worktree-config sh -c 'echo \"[core] hooksPath = h\" >> .git/config.worktree'; "
         "t hook sh -c 'mkdir -p .git/hooks; printf \"#!/bin/sh\\ntouch $M/hook\\n\" > "
         ".git/hooks/post-checkout'; "
         "t info sh -c 'echo \"* diff=x\" > .git/info/attributes'; "
         "t replace-hooks sh -c 'mkdir h2 && mv -T h2 .git/hooks'; "
         "t replace-config sh -c 'echo x > c2 && mv c2 .git/config'; "
         "t rename-git mv .git .git-old; "
         "t replace-git sh -c 'mkdir g2 && mv -T g2 .git'; "
         "t remove-config rm -f .git/config");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "append-config no\ngit-config no\nworktree-config no\nhook no\ninfo no\n"
            "replace-hooks no\nreplace-config no\nrename-git no\nreplace-git no\n"
            "remove-config no\n");

  // The caller's git afterwards: status (what a shell prompt runs) and a checkout.
  EXPECT_EQ(host_git({"status", "--porcelain"}).exit_code, 0);
  EXPECT_EQ(host_git({"checkout", "-q", "-b", "feature"}).exit_code, 0);
  expect_no_marks();
  EXPECT_EQ(host_git({"config", "--get", "core.fsmonitor"}).out, "");
  // The placeholders the launcher made belong to the caller and are empty.
  struct stat st {};
  ASSERT_EQ(stat((project_ + "/.git/hooks").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, caller().uid);
  EXPECT_TRUE(names_in(project_ + "/.git/hooks").empty());
}

TEST_F(PersistenceTest, HooksPathsIncludesAndCommondirArePinned) {
  ASSERT_NO_FATAL_FAILURE(make_repository());
  // husky's layout (.husky/_ missing until its install step), an include that does not exist
  // yet, and a conditional include that does.
  ASSERT_EQ(host_git({"config", "core.hooksPath", ".husky/_"}).exit_code, 0);
  ASSERT_EQ(host_git({"config", "include.path", "../team.gitconfig"}).exit_code, 0);
  ASSERT_EQ(host_git({"config", "includeIf.onbranch:master.path", "../cfg/local.inc"}).exit_code,
            0);
  daemon_->dir().make_dir("proj/cfg", caller());
  daemon_->dir().write_file("proj/cfg/local.inc", "[user]\n\tname = caller\n", caller());
  const RunResult r =
      sh(std::string(kCheck) +
         "t husky sh -c 'mkdir -p .husky/_ && printf \"#!/bin/sh\\ntouch $M/husky\\n\" > "
         ".husky/_/pre-commit && chmod +x .husky/_/pre-commit'; "
         "t rename-husky mv .husky h2; "
         "t team sh -c 'printf \"[core]\\n\\tfsmonitor = touch $M/team\\n\" >> team.gitconfig'; "
         "t local-inc sh -c 'printf \"[core]\\n\\tfsmonitor = touch $M/inc\\n\" >> cfg/local.inc'; "
         "t commondir sh -c 'mkdir -p evil && echo ../evil > .git/commondir'; "
         "t commit git -c user.name=r -c user.email=r@r commit -q --allow-empty -m inside");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "husky no\nrename-husky no\nteam no\nlocal-inc no\ncommondir no\ncommit yes\n");
  EXPECT_EQ(host_git({"status", "--porcelain"}).exit_code, 0);
  const RunResult commit = host_git({"commit", "-q", "--allow-empty", "-m", "after"});
  EXPECT_EQ(commit.exit_code, 0) << commit.err;
  expect_no_marks();
  // What the launcher made so that the role could not: empty, and git's meaning unchanged.
  EXPECT_EQ(read_file(project_ + "/.git/commondir"), ".\n");
  EXPECT_EQ(read_file(project_ + "/team.gitconfig"), "");
  EXPECT_TRUE(fs::is_directory(project_ + "/.husky/_"));
  EXPECT_EQ(host_git({"log", "--format=%s"}).out, "after\ninside\nfirst\n");
}

TEST_F(PersistenceTest, OrdinaryGitWorkStillWorks) {
  ASSERT_NO_FATAL_FAILURE(make_repository());
  const RunResult r =
      sh("set -e; G='git -c user.name=role -c user.email=role@example.invalid'; "
         "echo change >> README; $G add README; $G commit -q -m from-sandbox; "
         "$G checkout -q -b topic; echo more >> README; $G stash -q; $G log --oneline | wc -l; "
         "$G stash list | wc -l; echo done");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "2\n1\ndone\n");
  const RunResult log = host_git({"log", "--format=%s", "topic"});
  EXPECT_EQ(log.out, "from-sandbox\nfirst\n") << log.err;
  EXPECT_EQ(host_git({"stash", "list"}).out.empty(), false);
}

TEST_F(PersistenceTest, GitFilesAreFollowedIntoTheProjectOnly) {
  const std::string outside = daemon_->dir().make_dir("outside-meta", caller());
  RunResult init = host_git({"init", "-q", "--separate-git-dir=" + project_ + "/meta"});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  const RunResult r = sh(std::string(kCheck) +
                         "t meta-config sh -c 'echo x >> meta/config'; "
                         "t meta-hook sh -c 'echo x > meta/hooks/post-checkout'; "
                         "t rewrite-gitfile sh -c 'echo \"gitdir: evil\" > .git'; "
                         "t rename-gitfile mv .git g; t rename-meta mv meta meta2; "
                         "t objects-writable sh -c 'echo x > meta/objects/probe && rm "
                         "meta/objects/probe'");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "meta-config no\nmeta-hook no\nrewrite-gitfile no\nrename-gitfile no\n"
            "rename-meta no\nobjects-writable yes\n");

  // A git dir outside the project is not in the view at all; its .git file stays.
  fs::remove_all(project_ + "/meta");
  fs::remove(project_ + "/.git");
  init = host_git({"init", "-q", "--separate-git-dir=" + outside});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  const RunResult away = sh(std::string(kCheck) + "t see-outside ls " + outside +
                            "; t rewrite-gitfile sh -c 'echo \"gitdir: evil\" > .git'");
  ASSERT_EQ(away.exit_code, 0) << away.err;
  EXPECT_EQ(away.out, "see-outside no\nrewrite-gitfile no\n");
}

TEST_F(PersistenceTest, SubmodulesWorktreesAndNestedRepositoriesArePinned) {
  ASSERT_NO_FATAL_FAILURE(make_repository());
  ASSERT_EQ(host_git({"init", "-q", "--bare", ".git/modules/lib/inner"}).exit_code, 0);
  ASSERT_EQ(host_git({"worktree", "add", "-q", "wt"}).exit_code, 0);
  daemon_->dir().make_dir("proj/vendor", caller());
  ASSERT_EQ(host_git({"init", "-q", "vendor/dep"}).exit_code, 0);
  const RunResult r = sh(std::string(kCheck) +
                         "t module-config sh -c 'echo x >> .git/modules/lib/inner/config'; "
                         "t rename-modules mv .git/modules .git/m2; "
                         "t rename-module-group mv .git/modules/lib .git/modules/lib2; "
                         "t worktree-config sh -c 'echo x >> .git/worktrees/wt/config.worktree'; "
                         "t rewrite-wt-gitfile sh -c 'echo \"gitdir: evil\" > wt/.git'; "
                         "t nested-config sh -c 'echo x >> vendor/dep/.git/config'; "
                         "t rename-vendor mv vendor vendor2; "
                         "t rename-dep mv vendor/dep vendor/dep2; "
                         "t worktree-edit sh -c 'echo x >> wt/README'");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "module-config no\nrename-modules no\nrename-module-group no\nworktree-config no\n"
            "rewrite-wt-gitfile no\nnested-config no\nrename-vendor no\nrename-dep no\n"
            "worktree-edit yes\n");
}

TEST_F(PersistenceTest, ProjectWithoutRepositoryGetsAnEmptyReadOnlyGitDirectory) {
  const RunResult r = sh(std::string(kCheck) +
                         "t init-root git init -q .; t fill-git mkdir .git/hooks; "
                         "t init-nested sh -c 'mkdir sub && git init -q sub'");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  // New nested repositories are the role's own work (SECURITY.md: not protected).
  EXPECT_EQ(r.out, "init-root no\nfill-git no\ninit-nested yes\n");
  EXPECT_TRUE(fs::is_directory(project_ + "/.git"));
  EXPECT_TRUE(names_in(project_ + "/.git").empty());
  struct stat st {};
  ASSERT_EQ(stat((project_ + "/.git").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, caller().uid);
  // Git does not take an empty .git for a repository.
  EXPECT_NE(host_git({"rev-parse", "--git-dir"}).exit_code, 0);
}

TEST_F(PersistenceTest, ReadOnlyPathsAndTheOtherRolesDirectory) {
  start_daemon(
      "  read_only_paths: \".vscode\"\n  read_only_paths: \".github/workflows\"\n"
      "  read_only_paths: \".envrc\"\n");
  daemon_->dir().make_dir("proj/.vscode", caller());
  daemon_->dir().write_file("proj/.vscode/tasks.json", "{}", caller());
  daemon_->dir().make_dir("proj/.github", caller());
  daemon_->dir().make_dir("proj/.github/workflows", caller());
  daemon_->dir().write_file("proj/.github/workflows/ci.yml", "on: push", caller());
  ASSERT_EQ(sh("echo core-ran", "core").out, "core-ran\n");
  const RunResult r = sh(std::string(kCheck) +
                         "t tasks sh -c 'echo evil > .vscode/tasks.json'; "
                         "t rename-vscode mv .vscode v2; t rename-github mv .github g2; "
                         "t remove-ci rm -f .github/workflows/ci.yml; "
                         "t new-workflow sh -c 'echo x > .github/workflows/evil.yml'; "
                         "t core-home sh -c 'echo x > .pando-sandbox/core/home/.bashrc'; "
                         "t rename-core mv .pando-sandbox/core .pando-sandbox/c2; "
                         "t own-home sh -c 'echo x > \"$HOME/note\"'; "
                         "t other-file sh -c 'echo x > notes.txt'");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "tasks no\nrename-vscode no\nrename-github no\nremove-ci no\nnew-workflow no\n"
            "core-home no\nrename-core no\nown-home yes\nother-file yes\n");
  EXPECT_EQ(read_file(project_ + "/.vscode/tasks.json"), "{}");
  // The core role cannot write the workspace's directory either (its project is read-only).
  const RunResult core =
      sh(std::string(kCheck) + "t ws-home sh -c 'echo x > .pando-sandbox/workspace/home/.profile'",
         "core");
  EXPECT_EQ(core.out, "ws-home no\n") << core.err;
}

TEST_F(PersistenceTest, HiddenFilesStayHiddenWhateverTheRoleDidBefore) {
  daemon_->dir().make_dir("proj/secrets", caller());
  daemon_->dir().write_file("proj/secrets/.env", "TOKEN=chmod", caller(), 0600);
  daemon_->dir().make_dir("proj/deep", caller());
  daemon_->dir().write_file("proj/deep/.env", "TOKEN=moved", caller(), 0600);
  ASSERT_NO_FATAL_FAILURE(make_repository());
  // Once skipped by the walk: a directory the role made unreadable, node_modules, .git and
  // anything deeper than 8 levels.
  const RunResult hide =
      sh("chmod 000 secrets && mkdir -p node_modules/a/b/c/d/e/f/g/h/i && "
         "mv deep node_modules/a/b/c/d/e/f/g/h/i/deep && echo hidden-away");
  ASSERT_EQ(hide.out, "hidden-away\n") << hide.err;
  const RunResult read =
      sh("chmod 755 secrets; cat secrets/.env; cat node_modules/a/b/c/d/e/f/g/h/i/deep/.env; "
         "echo end");
  ASSERT_EQ(read.exit_code, 0) << read.err << daemon_->log();
  EXPECT_EQ(read.out, "end\n");
}

// Issue 24, finding 5: `.env` masking went by name and file type. A `.env` that is a symbolic
// link to config/local.env was read through, and an editor's backup `.env~` was readable too.
// The file a hidden link leads to in the project is hidden as well; a link out of the project
// leads to nothing the view holds. The default patterns cover common backups.
TEST_F(PersistenceTest, SecretsAreHiddenThroughSymlinksAndInEditorBackups) {
  daemon_->dir().make_dir("proj/config", caller());
  daemon_->dir().write_file("proj/config/local.env", "API_KEY=linked", caller(), 0600);
  ASSERT_EQ(symlink("config/local.env", (project_ + "/.env").c_str()), 0);
  daemon_->dir().make_dir("proj/deep", caller());
  daemon_->dir().make_dir("proj/deep/er", caller());
  // A chain: deep/er/.env -> ../.env.prod -> ../config/prod.secret.
  daemon_->dir().write_file("proj/config/prod.secret", "API_KEY=chained", caller(), 0600);
  ASSERT_EQ(symlink("../config/prod.secret", (project_ + "/deep/.env.prod").c_str()), 0);
  ASSERT_EQ(symlink("../.env.prod", (project_ + "/deep/er/.env").c_str()), 0);
  const std::string outside = daemon_->dir().write_file("outside.env", "API_KEY=out", caller());
  daemon_->dir().make_dir("proj/out", caller());
  ASSERT_EQ(symlink(outside.c_str(), (project_ + "/out/.env").c_str()), 0);
  // A directory of secrets named like one (found by the fresh review).
  daemon_->dir().make_dir("proj/.env.d", caller());
  daemon_->dir().write_file("proj/.env.d/prod", "API_KEY=directory", caller(), 0600);
  for (const char* backup : {".env~", ".env.swp", ".env.bak"}) {
    daemon_->dir().write_file(std::string("proj/") + backup, "API_KEY=backup", caller(), 0600);
  }
  for (const char* link : {".env", "deep/.env.prod", "deep/er/.env", "out/.env"}) {
    ASSERT_EQ(lchown((project_ + "/" + link).c_str(), caller().uid, caller().gid), 0);
  }
  for (const std::string role : {"workspace", "core"}) {
    const RunResult r =
        sh("cat .env config/local.env deep/er/.env config/prod.secret out/.env .env~ .env.swp "
           ".env.bak .env.d/prod 2>/dev/null; echo end",
           role);
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.out, "end\n") << role;
  }
}

// Issue 23: no project is refused for its size or depth (project_scan_max_entries and
// project_scan_max_depth are no longer read), and the daemon reads what the session sees as
// root, another user's directories included: a secret there that the role could reach by
// search permission alone is masked, not a reason to refuse.
TEST_F(PersistenceTest, NoProjectIsTooLargeDeepOrForeignToLaunch) {
  start_daemon("  project_scan_max_entries: 20\n  project_scan_max_depth: 4\n");
  for (int i = 0; i < 30; ++i) {
    daemon_->dir().write_file("proj/f" + std::to_string(i), "x", caller());
  }
  std::string deep = "proj";
  for (int level = 0; level < 80; ++level) {
    deep += "/d";
    daemon_->dir().make_dir(deep, caller());
  }
  daemon_->dir().write_file(deep + "/.env", "TOKEN=deep", caller(), 0600);
  daemon_->dir().make_dir("proj/theirs", other_user(), 0700);
  daemon_->dir().make_dir("proj/searchable", other_user(), 0711);
  daemon_->dir().write_file("proj/searchable/.env", "TOKEN=reachable", other_user(), 0644);
  const std::string deep_env = deep.substr(std::string("proj/").size()) + "/.env";
  const RunResult r = sh(std::string(kCheck) + "t list ls theirs; t chmod chmod 755 theirs; " +
                         "cat searchable/.env " + deep_env + "; echo launched");
  EXPECT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "list no\nchmod no\nlaunched\n") << r.err;
}

TEST_F(PersistenceTest, MetadataTheRoleCouldCreateButTheLauncherCannotRefusesTheLaunch) {
  // The role owns the project root (as the caller's), so it could chmod it and create .git.
  ASSERT_EQ(sh("true").exit_code, 0);  // the daemon makes .pando-sandbox in the project
  ASSERT_EQ(rmdir((project_ + "/.git").c_str()), 0);
  ASSERT_EQ(chmod(project_.c_str(), 0555), 0);
  RunResult r = sh("echo launched");
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_NE(r.err.find("ERROR_PROTECTED_PATH_UNSUPPORTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(project_ + "/.git"), std::string::npos) << r.err;
  ASSERT_EQ(chmod(project_.c_str(), 0755), 0);
  EXPECT_FALSE(fs::exists(project_ + "/.git"));

  // A git dir of another user's (root's) that the role cannot change: nothing is created
  // there, and the role cannot create anything there either.
  daemon_->dir().make_dir("proj/.git", TestUser{"root", 0, 0});
  r = sh(std::string(kCheck) + "t hooks mkdir .git/hooks; t config sh -c 'echo x > .git/config'");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out, "hooks no\nconfig no\n");
  EXPECT_TRUE(names_in(project_ + "/.git").empty());
}

// With systemd as PID 1 every mount is shared. The caller trees are copies of host mounts: a
// copy that kept its peer group would carry the session's pins, masks and home onto the host,
// where they outlive the session (found booting the package under systemd: the caller's .git
// turned read-only on the host and the next launch was refused).
TEST_F(PersistenceTest, NothingOfTheSessionPropagatesToASharedHost) {
  DaemonOptions options;
  options.workspace_argv_text = kDispatchArgv;
  options.shared_mounts = true;
  daemon_.reset();
  daemon_ = std::make_unique<Daemon>(options);
  project_ = daemon_->dir().make_dir("proj", caller());
  marks_ = daemon_->dir().make_dir("marks", caller(), 0700);
  ASSERT_NO_FATAL_FAILURE(make_repository());
  daemon_->dir().write_file("proj/.env", "TOKEN=x", caller(), 0600);
  const std::string mountinfo = "/proc/" + std::to_string(daemon_->pid()) + "/mountinfo";
  ASSERT_NE(read_file(mountinfo).find(" shared:"), std::string::npos)
      << "the daemon's mounts are not shared: the test proves nothing";
  for (int i = 0; i < 2; ++i) {
    const RunResult r = sh("cat .env; echo launched");
    ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
    EXPECT_EQ(r.out, "launched\n");
    EXPECT_EQ(read_file(mountinfo).find(project_), std::string::npos) << read_file(mountinfo);
  }
}

TEST_F(PersistenceTest, SymlinkedGitMetadataRefusesTheLaunch) {
  daemon_->dir().make_dir("real-git", caller());
  ASSERT_EQ(symlink((daemon_->dir().path() + "/real-git").c_str(), (project_ + "/.git").c_str()),
            0);
  ASSERT_EQ(lchown((project_ + "/.git").c_str(), caller().uid, caller().gid), 0);
  const RunResult r = sh("echo launched");
  EXPECT_EQ(r.exit_code, 77) << r.out << r.err;
  EXPECT_NE(r.err.find("ERROR_PROTECTED_PATH_UNSUPPORTED"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pando::itest
