// pando::log::init_file_once: the client's log open. One attempt, no retries,
// no directory creation, no symlink following; lines stay JSON.

#include "common/json_log.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/unit/child_process.h"

namespace {

namespace fs = std::filesystem;

constexpr uid_t kNobody = 65534;

class JsonLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pandotest-jsonlog-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  }

  std::string dir_;
};

TEST_F(JsonLogTest, AppendsJsonLinesToANewPrivateFile) {
  const std::string path = dir_ + "/log.jsonl";
  {
    std::ofstream existing(path);
    existing << "earlier\n";
  }
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ASSERT_TRUE(pando::log::init_file_once("unit", path, spdlog::level::info));
  pando::log::info("started", {{"name", std::string("a\"b")}, {"count", 3}, {"ok", true}});
  pando::log::event(spdlog::level::debug, "hidden");
  const std::string log = read(path);
  EXPECT_EQ(log.rfind("earlier\n{\"ts\":\"", 0), 0u) << log;
  EXPECT_NE(log.find(R"("level":"info","event":"unit_started","name":"a\"b","count":3,"ok":true})"
                     "\n"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("hidden"), std::string::npos) << log;

  const std::string fresh = dir_ + "/fresh.jsonl";
  ASSERT_TRUE(pando::log::init_file_once("unit", fresh, spdlog::level::info));
  struct stat st {};
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(JsonLogTest, MissingDirectoryIsNotCreated) {
  const std::string path = dir_ + "/missing/log.jsonl";
  EXPECT_FALSE(pando::log::init_file_once("unit", path, spdlog::level::info));
  pando::log::info("dropped");
  EXPECT_FALSE(fs::exists(dir_ + "/missing"));
}

TEST_F(JsonLogTest, FinalSymlinkIsNotFollowed) {
  const std::string target = dir_ + "/target";
  const std::string link = dir_ + "/log.jsonl";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(pando::log::init_file_once("unit", link, spdlog::level::info));
  pando::log::info("dropped");
  EXPECT_FALSE(fs::exists(target));
}

// The case that used to cost 50 ms per launch: a HOME the caller cannot write.
TEST_F(JsonLogTest, UnwritableDirectoryLeavesLoggingOff) {
  ASSERT_EQ(getuid(), 0u) << "needs root to switch to an unprivileged user";
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const std::string path = dir_ + "/log.jsonl";
  const auto result = pando::testing::RunInChild([&](const pando::testing::Child& child) {
    if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
        setresuid(kNobody, kNobody, kNobody) != 0) {
      return child.FailErrno("drop to nobody");
    }
    if (pando::log::init_file_once("unit", path, spdlog::level::info)) {
      return child.Fail("opened a file in a directory nobody cannot write");
    }
    pando::log::info("dropped");
    return 0;
  });
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_FALSE(fs::exists(path));
}

// Under systemd, stderr is the journal and $JOURNAL_STREAM names it: each line then
// starts with its syslog priority so that `journalctl -p err` finds errors.
TEST_F(JsonLogTest, StderrToTheJournalCarriesSyslogPriorities) {
  const std::string path = dir_ + "/stderr";
  auto log_through_stderr = [&](const std::string& journal_stream) {
    const auto result = pando::testing::RunInChild([&](const pando::testing::Child& child) {
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) return child.FailErrno("stderr to a file");
      struct stat st {};
      if (fstat(STDERR_FILENO, &st) != 0) return child.FailErrno("fstat stderr");
      const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
      const std::string value = journal_stream == "mine" ? mine : journal_stream;
      if (value.empty()) {
        unsetenv("JOURNAL_STREAM");
      } else {
        setenv("JOURNAL_STREAM", value.c_str(), 1);
      }
      pando::log::init("unit", "", spdlog::level::debug);
      pando::log::error("broke");
      pando::log::warn("odd");
      pando::log::info("fine");
      pando::log::event(spdlog::level::debug, "detail");
      return 0;
    });
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return read(path);
  };
  const std::string journal = log_through_stderr("mine");
  std::istringstream lines(journal);
  std::string line;
  for (const char* prefix : {"<3>{", "<4>{", "<6>{", "<7>{"}) {
    ASSERT_TRUE(std::getline(lines, line)) << journal;
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
  }
  EXPECT_EQ(log_through_stderr("").rfind("{\"ts\":", 0), 0u);
  // Another stream (stderr was redirected after systemd started us): plain JSON.
  EXPECT_EQ(log_through_stderr("1:2").rfind("{\"ts\":", 0), 0u);
}

}  // namespace
