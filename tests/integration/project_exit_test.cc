// Issue 11: what a workspace session leaves in the project on the host. The project is mounted
// idmapped, so whatever the role makes there is the caller's on disk: a set-id file would run
// as the caller for any local user.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace fs = std::filesystem;

// "t NAME CMD...": prints "NAME yes" when CMD succeeds and "NAME no" when it fails.
constexpr const char* kCheck =
    "t() { n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n yes\"; else echo \"$n no\"; fi; "
    "}; ";

// Every entry below `root` (itself included), with its lstat mode.
std::vector<std::pair<std::string, mode_t>> tree_modes(const std::string& root) {
  std::vector<std::pair<std::string, mode_t>> modes;
  const auto add = [&modes](const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
    modes.emplace_back(path.string(), st.st_mode);
  };
  add(root);
  for (const auto& entry : fs::recursive_directory_iterator(root)) add(entry.path());
  return modes;
}

class ProjectExitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "integration tests run as root";
    daemon_ = std::make_unique<Daemon>();
    project_ = daemon_->dir().make_dir("proj", caller());
  }
  RunResult sh(const std::string& script) {
    RunOptions options;
    options.stdin_data = script + "\n";
    return launch(*daemon_, caller(), "workspace", project_, options);
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
};

// seccomp (step 18): no call the role makes can set S_ISUID or S_ISGID, in the project or in
// its home (which is inside the project on disk); plain modes still work.
TEST_F(ProjectExitTest, NoSetIdFileOrDirectoryReachesTheHost) {
  const RunResult r =
      sh(std::string(kCheck) +
         "t cp-chmod-6755 sh -c 'cp /usr/bin/id x && chmod 6755 x'; "
         "t chmod-u+s chmod u+s x; "
         "t chmod-g+s chmod g+s x; "
         "t chmod-4755 chmod 4755 x; "
         "t install-4755 install -m 4755 /usr/bin/id y; "
         "t install-2755 install -m 2755 /usr/bin/id z; "
         "t mkdir-2755 mkdir -m 2755 d; "
         "t setgid-dir sh -c 'mkdir e && chmod g+s e'; "
         "t home-u+s sh -c 'cp /usr/bin/id \"$HOME/id\" && chmod u+s \"$HOME/id\"'; "
         "t plain-chmod chmod 0700 x; "
         "t plain-install install -m 0755 /usr/bin/id w; "
         "t plain-mkdir mkdir -m 0750 f; "
         "t plain-run ./w -u");
  ASSERT_EQ(r.exit_code, 0) << r.err << daemon_->log();
  EXPECT_EQ(r.out,
            "cp-chmod-6755 no\nchmod-u+s no\nchmod-g+s no\nchmod-4755 no\ninstall-4755 no\n"
            "install-2755 no\nmkdir-2755 no\nsetgid-dir no\nhome-u+s no\n"
            "plain-chmod yes\nplain-install yes\nplain-mkdir yes\nplain-run yes\n");

  for (const auto& [path, mode] : tree_modes(project_)) {
    EXPECT_EQ(mode & (S_ISUID | S_ISGID), 0u) << path << " mode " << std::oct << mode;
  }
  // The calls really ran: their files are the caller's with the plain modes.
  for (const auto& [name, want] :
       std::vector<std::pair<std::string, mode_t>>{{"x", S_IFREG | 0700},
                                                   {"w", S_IFREG | 0755},
                                                   {"f", S_IFDIR | 0750},
                                                   {"e", S_IFDIR | 0755}}) {
    struct stat st {};
    ASSERT_EQ(lstat((project_ + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode, want) << name << " mode " << std::oct << st.st_mode;
    EXPECT_EQ(st.st_uid, caller().uid) << name;
  }
}

}  // namespace
}  // namespace pando::itest
