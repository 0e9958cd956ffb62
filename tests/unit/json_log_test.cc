// pando::log::init_file_once: the client's log open. One attempt, no retries,
// no directory creation, no symlink following; lines stay JSON.

#include "common/json_log.h"

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

}  // namespace
