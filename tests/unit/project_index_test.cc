// The project index (issue 23): what a launch must find in the project (hidden files, git
// dirs whatever their names, .git entries), read whole once and then only where the kernel
// reported a change. Every incremental answer must equal a fresh reading of the whole tree.

#include "daemon/project_index.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/project_watch.h"
#include "proto/error.h"

namespace pando::daemon {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kPatterns = {".env", ".env.*", ".env~"};

std::uint64_t inode_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

class ProjectIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/pandotest-index-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    root_ = templ;
  }
  void TearDown() override { fs::remove_all(root_); }

  void dir(const std::string& path) { fs::create_directories(root_ + "/" + path); }
  void file(const std::string& path) { std::ofstream(root_ + "/" + path) << "x"; }
  void link(const std::string& target, const std::string& path) {
    fs::create_symlink(target, root_ + "/" + path);
  }
  UniqueFd open_root() const { return UniqueFd(open(root_.c_str(), O_RDONLY | O_DIRECTORY)); }

  // What a whole fresh reading finds.
  ProjectFindings fresh() const {
    ProjectIndex index(kPatterns, inode_of);
    const UniqueFd fd = open_root();
    index.update(fd.get());
    return index.findings();
  }

  std::string root_;
};

void expect_same(const ProjectFindings& got, const ProjectFindings& want) {
  EXPECT_EQ(got.hidden, want.hidden);
  EXPECT_EQ(got.git_dirs, want.git_dirs);
  EXPECT_EQ(got.dot_git_dirs, want.dot_git_dirs);
  EXPECT_EQ(got.dot_git_files, want.dot_git_files);
  EXPECT_EQ(got.dot_git_links, want.dot_git_links);
}

TEST_F(ProjectIndexTest, FindsSecretsAndGitDirsWhateverTheirNames) {
  file(".env");
  dir("a/b");
  file("a/.env.local");
  file("a/b/.env~");
  file("a/notes.txt");
  dir("a/.env.d");  // a directory of secrets is hidden too
  dir("links");
  link("../a/.env.local", "links/.env");
  // A repository, a bare one under another name, a linked worktree's git dir (HEAD and
  // commondir), a .git file and a .git link, and a directory that only looks half like one.
  for (const std::string git : {".git", "remote.git"}) {
    dir(git + "/objects");
    dir(git + "/refs");
    file(git + "/HEAD");
  }
  dir(".git/worktrees/wt");
  file(".git/worktrees/wt/HEAD");
  file(".git/worktrees/wt/commondir");
  dir("wt");
  file("wt/.git");
  dir("sub");
  link("../remote.git", "sub/.git");
  dir("half/objects");
  file("half/HEAD");

  const ProjectFindings found = fresh();
  EXPECT_EQ(found.hidden, (std::vector<std::string>{".env", "a/.env.d", "a/.env.local", "a/b/.env~",
                                                    "links/.env"}));
  EXPECT_EQ(found.git_dirs, (std::vector<std::string>{".git", ".git/worktrees/wt", "remote.git"}));
  EXPECT_EQ(found.dot_git_dirs, std::vector<std::string>{".git"});
  EXPECT_EQ(found.dot_git_files, std::vector<std::string>{"wt/.git"});
  EXPECT_EQ(found.dot_git_links, (std::vector<std::string>{"sub/.git"}));
}

// However deep the tree, a reading holds a bounded number of fds: here 600 levels under a
// limit of 120 open files.
TEST_F(ProjectIndexTest, ADeepTreeIsReadWholeWithFewFds) {
  std::string path;
  std::vector<std::string> expected;
  for (int level = 0; level < 600; ++level) {
    path += (path.empty() ? "" : "/") + std::string("d");
    if (level % 97 == 0) expected.push_back(path + "/.env");
  }
  // Made one level at a time below an open fd: the whole path is longer than PATH_MAX.
  {
    UniqueFd at = open_root();
    for (int level = 0; level < 600; ++level) {
      ASSERT_EQ(mkdirat(at.get(), "d", 0755), 0) << level;
      at.reset(openat(at.get(), "d", O_RDONLY | O_DIRECTORY));
      ASSERT_TRUE(at.valid());
      // Siblings whose turn comes after the deep part: their parents are opened again.
      ASSERT_EQ(mkdirat(at.get(), "z", 0755), 0);
      if ((level + 1) % 97 == 1) {
        UniqueFd env(openat(at.get(), ".env", O_CREAT | O_WRONLY, 0600));
        ASSERT_TRUE(env.valid());
      }
    }
  }
  std::sort(expected.begin(), expected.end());
  const pid_t child = fork();
  if (child == 0) {
    const rlimit few{120, 120};
    if (setrlimit(RLIMIT_NOFILE, &few) != 0) _exit(2);
    try {
      const ProjectFindings found = fresh();
      _exit(found.hidden == expected ? 0 : 1);
    } catch (const std::exception&) {
      _exit(3);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::error_code ignored;
  fs::remove_all(root_ + "/d", ignored);
  if (fs::exists(root_ + "/d")) {
    // Too deep for remove_all's paths: removed from the bottom through fds.
    ASSERT_EQ(system(("cd " + root_ + " && rm -rf d").c_str()), 0);
  }
}

// Two chains deeper than the fds a reading keeps open, side by side below the root: whichever
// comes first, the root's other one is read after it, from the root's own fd.
TEST_F(ProjectIndexTest, TheRootsOtherDirectoriesAreReadAfterADeepOne) {
  std::vector<std::string> expected;
  for (const std::string top : {"a", "b"}) {
    std::string path = top;
    for (int level = 1; level < 80; ++level) path += "/d";
    dir(path);
    file(path + "/.env");
    expected.push_back(path + "/.env");
  }
  EXPECT_EQ(fresh().hidden, expected);
}

// One random change to the tree below `root`: the kinds of change that move, replace, hide
// or reveal what an index holds.
void mutate(const std::string& root, std::mt19937& random) {
  std::vector<fs::path> dirs{root};
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_directory() && !entry.is_symlink()) dirs.push_back(entry.path());
  }
  const auto any_dir = [&] { return dirs[random() % dirs.size()]; };
  const auto name = [&] { return "n" + std::to_string(random() % 1000); };
  const fs::path at = any_dir();
  std::error_code ignored;
  switch (random() % 9) {
    case 0:
      fs::create_directories(at / name() / name(), ignored);
      break;
    case 1: {
      static const char* kNames[] = {".env", ".env.bak", "x.txt", "HEAD", "commondir"};
      std::ofstream(at / kNames[random() % 5]) << "x";
      break;
    }
    case 2:
      fs::create_directory(at / "objects", ignored);
      fs::create_directory(at / "refs", ignored);
      break;
    case 3: {
      const fs::path to = any_dir();
      if (at != root && to.string().rfind(at.string() + "/", 0) != 0 && to != at) {
        fs::rename(at, to / name(), ignored);
      }
      break;
    }
    case 4:
      if (at != root) fs::remove_all(at, ignored);
      break;
    case 5:
      // Replaced by another directory of the same name, holding a secret.
      if (at != root) {
        fs::remove_all(at, ignored);
        fs::create_directory(at, ignored);
        std::ofstream(at / ".env") << "x";
      }
      break;
    case 6:
      fs::create_symlink("elsewhere", at / (random() % 2 ? ".env" : ".git"), ignored);
      break;
    case 7:
      if (random() % 2) {
        std::ofstream(at / ".git") << "gitdir: x";
      } else {
        fs::create_directory(at / ".git", ignored);
      }
      break;
    case 8:
      fs::remove(at / ".env", ignored);
      break;
  }
}

TEST_F(ProjectIndexTest, AnIncrementalScanFindsWhatAFreshReadingFinds) {
  ProjectWatch watch;
  std::string why;
  ASSERT_TRUE(ProjectWatch::watchable(open_root().get(), &why)) << why;
  ASSERT_GE(watch.fanotify_fd(), 0) << watch.mode(-1);
  for (int i = 0; i < 30; ++i) dir("p" + std::to_string(i % 5) + "/q" + std::to_string(i));
  const UniqueFd fd = open_root();
  ProjectScan scan = watch.scan(1000, fd.get(), fd.get(), kPatterns);
  EXPECT_FALSE(scan.incremental);
  EXPECT_EQ(scan.read, scan.directories);
  // Nothing changed: nothing is read.
  scan = watch.scan(1000, fd.get(), fd.get(), kPatterns);
  EXPECT_TRUE(scan.incremental);
  EXPECT_EQ(scan.read, 0u);

  std::mt19937 random(20261127);
  std::size_t read = 0;
  std::size_t directories = 0;
  for (int round = 0; round < 300; ++round) {
    const int changes = 1 + static_cast<int>(random() % 3);
    for (int i = 0; i < changes; ++i) mutate(root_, random);
    scan = watch.scan(1000, fd.get(), fd.get(), kPatterns);
    SCOPED_TRACE("round " + std::to_string(round));
    ASSERT_TRUE(scan.incremental);
    expect_same(scan.findings, fresh());
    read += scan.read;
    directories += scan.directories;
    if (HasFailure()) break;
  }
  // A few directories a round, not the tree.
  EXPECT_LT(read * 4, directories) << read << " of " << directories;
}

// A full queue loses events: the kernel queues an overflow, and nothing read before is trusted.
TEST_F(ProjectIndexTest, AnOverflowMakesTheNextScanReadEverything) {
  ProjectWatch watch(false);  // events stay queued until a scan
  ASSERT_GE(watch.fanotify_fd(), 0) << watch.mode(-1);
  dir("a/b");
  dir("many");
  const UniqueFd fd = open_root();
  ASSERT_FALSE(watch.scan(1000, fd.get(), fd.get(), kPatterns).incremental);
  ASSERT_TRUE(watch.scan(1000, fd.get(), fd.get(), kPatterns).incremental);
  for (int i = 0; i < 20000; ++i) file("many/f" + std::to_string(i));
  file("a/b/.env");
  const ProjectScan scan = watch.scan(1000, fd.get(), fd.get(), kPatterns);
  EXPECT_FALSE(scan.incremental);
  EXPECT_EQ(scan.read, scan.directories);
  EXPECT_EQ(scan.findings.hidden, std::vector<std::string>{"a/b/.env"});
}

// A filesystem whose changes the kernel may not all see (here ramfs, outside the allowed
// list) is read whole at every scan.
TEST_F(ProjectIndexTest, AFilesystemNotOnTheListIsReadWholeEveryTime) {
  const pid_t child = fork();
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount("", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("ramfs", root_.c_str(), "ramfs", 0, nullptr) != 0 ||
        mkdir((root_ + "/x").c_str(), 0755) != 0) {
      _exit(2);
    }
    ProjectWatch watch;
    const UniqueFd fd = open_root();
    const ProjectScan first = watch.scan(1000, fd.get(), fd.get(), kPatterns);
    if (open((root_ + "/x/.env").c_str(), O_CREAT | O_WRONLY, 0600) < 0) _exit(2);
    const ProjectScan second = watch.scan(1000, fd.get(), fd.get(), kPatterns);
    const bool ok = !first.incremental && !second.incremental && second.read == 2 &&
                    second.findings.hidden == std::vector<std::string>{"x/.env"} &&
                    watch.mode(fd.get()).find("every launch reads the whole project") == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace pando::daemon
