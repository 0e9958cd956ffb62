// The tests' cgroup reader (tests/integration/cgroup_reader.h) on fake v1 and v2 trees in a
// temporary directory: both layouts give the same answers, and a missing controller or file is
// a skip reason or a test failure, never a silent zero.

#include "tests/integration/cgroup_reader.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace pando::itest {
namespace {

namespace fs = std::filesystem;

class CgroupReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cgroup-reader-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // <root>/<hierarchy>/session-x with `files` ({name, content}); returns the directory.
  std::string make(const std::string& hierarchy,
                   const std::vector<std::pair<std::string, std::string>>& files) {
    const std::string dir = root_ + "/" + hierarchy + "/session-x";
    fs::create_directories(dir);
    for (const auto& [name, content] : files) std::ofstream(dir + "/" + name) << content;
    return dir;
  }

  // What the daemon leaves in a session with pids_max 64, cpu_max_percent 20 and 64 MiB.
  std::vector<std::string> v2_session(const std::string& controllers = "memory pids cpu\n") {
    return {make("unified", {{"cgroup.controllers", controllers},
                             {"pids.max", "64\n"},
                             {"pids.current", "12\n"},
                             {"pids.events", "max 3\n"},
                             {"memory.max", "67108864\n"},
                             {"memory.current", "1048576\n"},
                             {"cpu.max", "20000 100000\n"},
                             {"cpu.stat",
                              "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\n"
                              "nr_periods 10\nnr_throttled 7\nthrottled_usec 900\n"}})};
  }

  std::vector<std::string> v1_session() {
    return {
        make("memory",
             {{"memory.limit_in_bytes", "67108864\n"}, {"memory.usage_in_bytes", "1048576\n"}}),
        make("pids", {{"pids.max", "64\n"}, {"pids.current", "12\n"}, {"pids.events", "max 3\n"}}),
        make("cpu", {{"cpu.cfs_quota_us", "20000\n"},
                     {"cpu.cfs_period_us", "100000\n"},
                     {"cpu.stat", "nr_periods 10\nnr_throttled 7\nthrottled_time 900000\n"}}),
        make("cpuacct", {{"cpuacct.usage", "5000123\n"}})};
  }

  std::string root_;
};

void expect_the_daemons_limits(const CgroupReader& r) {
  EXPECT_EQ(r.missing({CgroupController::kMemory, CgroupController::kPids, CgroupController::kCpu,
                       CgroupController::kCpuAccounting}),
            "");
  EXPECT_EQ(r.pids_max(), 64u);
  EXPECT_EQ(r.pids_current(), 12u);
  EXPECT_EQ(r.pids_limit_events(), 3u);
  EXPECT_EQ(r.memory_max(), 67108864u);
  EXPECT_EQ(r.memory_current(), 1048576u);
  const auto cpu = r.cpu_max();
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(cpu->quota_usec, 20000u);
  EXPECT_EQ(cpu->period_usec, 100000u);
  EXPECT_EQ(r.cpu_usage_usec(), 5000u);
  EXPECT_EQ(r.cpu_throttled(), 7u);
}

TEST_F(CgroupReaderTest, ReadsV2Files) {
  const CgroupReader r(v2_session());
  EXPECT_TRUE(r.unified());
  EXPECT_EQ(r.dir_of(CgroupController::kPids), root_ + "/unified/session-x");
  expect_the_daemons_limits(r);
}

TEST_F(CgroupReaderTest, ReadsV1Hierarchies) {
  const CgroupReader r(v1_session());
  EXPECT_FALSE(r.unified());
  EXPECT_EQ(r.dir_of(CgroupController::kPids), root_ + "/pids/session-x");
  EXPECT_EQ(r.dir_of(CgroupController::kCpu), root_ + "/cpu/session-x");
  EXPECT_EQ(r.dir_of(CgroupController::kCpuAccounting), root_ + "/cpuacct/session-x");
  EXPECT_EQ(r.dir_of(CgroupController::kMemory), root_ + "/memory/session-x");
  expect_the_daemons_limits(r);
}

TEST_F(CgroupReaderTest, ReadsNoLimitInBothLayouts) {
  const std::string v2 = make("unified", {{"cgroup.controllers", "memory cpu\n"},
                                          {"memory.max", "max\n"},
                                          {"cpu.max", "max 100000\n"}});
  const CgroupReader r2({v2});
  EXPECT_EQ(r2.memory_max(), kNoLimit);
  ASSERT_TRUE(r2.cpu_max().has_value());
  EXPECT_EQ(r2.cpu_max()->quota_usec, kNoLimit);
  EXPECT_EQ(r2.cpu_max()->period_usec, 100000u);
  const CgroupReader r1(
      {make("memory", {{"memory.limit_in_bytes", "9223372036854771712\n"}}),
       make("cpu", {{"cpu.cfs_quota_us", "-1\n"}, {"cpu.cfs_period_us", "100000\n"}})});
  EXPECT_EQ(r1.memory_max(), kNoLimit);
  ASSERT_TRUE(r1.cpu_max().has_value());
  EXPECT_EQ(r1.cpu_max()->quota_usec, kNoLimit);
}

TEST_F(CgroupReaderTest, NamesTheMissingController) {
  const CgroupReader v2(v2_session("memory\n"));
  EXPECT_EQ(v2.missing({CgroupController::kMemory}), "");
  EXPECT_TRUE(v2.missing({CgroupController::kMemory, CgroupController::kPids})
                  .starts_with("no pids controller (cgroup v2) in " + root_))
      << v2.missing({CgroupController::kPids});
  EXPECT_TRUE(v2.missing({CgroupController::kCpu}).starts_with("no cpu controller (cgroup v2)"));
  // v2 accounts cpu time without the cpu controller.
  EXPECT_EQ(v2.missing({CgroupController::kCpuAccounting}), "");

  auto dirs = v1_session();
  dirs.erase(dirs.begin() + 3);  // no cpuacct hierarchy
  const CgroupReader v1(dirs);
  EXPECT_TRUE(v1.missing({CgroupController::kCpuAccounting})
                  .starts_with("no cpuacct controller (cgroup v1) in " + root_))
      << v1.missing({CgroupController::kCpuAccounting});
  // No directory at all is no missing controller of this host but a failure.
  EXPECT_NONFATAL_FAILURE(CgroupReader({}).missing({CgroupController::kPids}),
                          "no cgroup directories to look in");
}

// A read that finds nothing fails the test instead of returning a zero that could pass it.
TEST_F(CgroupReaderTest, AMissingFileIsATestFailure) {
  const CgroupReader v2(v2_session("memory\n"));
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(v2.pids_max().has_value()), "pids controller");
  const CgroupReader v1({make("pids", {{"pids.max", "64\n"}})});
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(v1.pids_current().has_value()), "cannot read pids.current");
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(v1.pids_limit_events().has_value()), "pids.events");
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(v1.cpu_usage_usec().has_value()), "cpuacct");
  const CgroupReader garbled({make(
      "unified",
      {{"cgroup.controllers", "cpu\n"}, {"cpu.max", "lots\n"}, {"cpu.stat", "usage_usec 1\n"}})});
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(garbled.cpu_max().has_value()), "cpu.max is not");
  EXPECT_NONFATAL_FAILURE(EXPECT_FALSE(garbled.cpu_throttled().has_value()), "no 'nr_throttled'");
}

}  // namespace
}  // namespace pando::itest
