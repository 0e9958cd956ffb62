// Issue 11: one unprivileged user must not lock other users out of the daemon.
// A hoarder of connections is refused beyond its own pending limit, fds count
// only when they come with the request header, passed stdio must be anonymous
// pipes, and a caller's hung filesystem stalls that caller alone.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/fd_passing.h"
#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace v1 = pando::helper::v1;
using namespace std::chrono_literals;

// A FUSE filesystem whose server answers FUSE_INIT and nothing after it, as a
// local user's hung (or hostile) FUSE server with allow_other would: every
// lookup in it blocks in the kernel until the test closes /dev/fuse, which
// aborts the connection and fails the waiting requests.
class HungFuse {
 public:
  explicit HungFuse(std::string mountpoint) : mountpoint_(std::move(mountpoint)) {
    dev_.reset(open("/dev/fuse", O_RDWR | O_CLOEXEC));
    if (!dev_.valid()) {
      why_ = std::string("/dev/fuse: ") + std::strerror(errno);
      return;
    }
    const std::string options =
        "fd=" + std::to_string(dev_.get()) + ",rootmode=40755,user_id=0,group_id=0,allow_other";
    if (mount("pandotest-hung", mountpoint_.c_str(), "fuse", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
      why_ = std::string("mount fuse: ") + std::strerror(errno);
      return;
    }
    mounted_ = true;
    const auto init = next_request(10s);
    if (!init || init->size() < sizeof(fuse_in_header) + sizeof(fuse_init_in)) {
      why_ = "no FUSE_INIT from the kernel";
      return;
    }
    fuse_in_header in{};
    fuse_init_in init_in{};
    std::memcpy(&in, init->data(), sizeof(in));
    std::memcpy(&init_in, init->data() + sizeof(in), sizeof(init_in));
    if (in.opcode != FUSE_INIT) {
      why_ = "the first request is not FUSE_INIT";
      return;
    }
    struct {
      fuse_out_header header;
      fuse_init_out body;
    } reply{};
    reply.header.len = sizeof(reply);
    reply.header.unique = in.unique;
    reply.body.major = FUSE_KERNEL_VERSION;
    reply.body.minor = FUSE_KERNEL_MINOR_VERSION;
    reply.body.max_readahead = init_in.max_readahead;
    reply.body.max_write = 4096;
    reply.body.max_background = 16;
    reply.body.congestion_threshold = 12;
    // Lookups in one directory run side by side, each reaching the server.
    reply.body.flags = FUSE_PARALLEL_DIROPS;
    if (write(dev_.get(), &reply, sizeof(reply)) != static_cast<ssize_t>(sizeof(reply))) {
      why_ = std::string("FUSE_INIT reply: ") + std::strerror(errno);
      return;
    }
    ready_ = true;
  }
  ~HungFuse() {
    if (mounted_) umount2(mountpoint_.c_str(), MNT_DETACH);
    dev_.reset();
  }
  HungFuse(const HungFuse&) = delete;
  HungFuse& operator=(const HungFuse&) = delete;

  bool ready() const { return ready_; }
  const std::string& why_not() const { return why_; }

  // Waits for a FUSE_LOOKUP of `name` (left unanswered: whoever looks it up is
  // now stuck in the kernel) and returns the fsuid it was made with.
  std::optional<uid_t> wait_for_lookup(const std::string& name, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      const auto request = next_request(left);
      if (!request || request->size() < sizeof(fuse_in_header)) continue;
      fuse_in_header in{};
      std::memcpy(&in, request->data(), sizeof(in));
      const char* looked_up = request->data() + sizeof(in);
      if (in.opcode == FUSE_LOOKUP &&
          std::string(looked_up, strnlen(looked_up, request->size() - sizeof(in))) == name) {
        return in.uid;
      }
    }
  }

 private:
  std::optional<std::vector<char>> next_request(std::chrono::milliseconds timeout) {
    pollfd pfd{dev_.get(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    std::vector<char> buffer(FUSE_MIN_READ_BUFFER + (128 << 10));
    const ssize_t n = read(dev_.get(), buffer.data(), buffer.size());
    if (n <= 0) return std::nullopt;
    buffer.resize(static_cast<size_t>(n));
    return buffer;
  }

  std::string mountpoint_;
  UniqueFd dev_;
  bool mounted_ = false;
  bool ready_ = false;
  std::string why_;
};

// The soft "Max open files" of a process, as /proc/<pid>/limits shows it.
std::string soft_open_file_limit(pid_t pid) {
  std::ifstream limits("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream fields(line.substr(std::strlen("Max open files")));
    std::string soft;
    fields >> soft;
    return soft;
  }
  return "";
}

class DaemonCapacityTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(geteuid(), 0u) << "integration tests run as root"; }

  void start(const DaemonOptions& options) {
    daemon_ = std::make_unique<Daemon>(options);
    project_ = daemon_->dir().make_dir("proj", caller());
    other_project_ = daemon_->dir().make_dir("other", other_user());
  }

  v1::Rejected expect_rejected(RawClient& client) {
    return pando::itest::expect_rejected(client, *daemon_);
  }

  // Starts the daemon with an /etc/passwd that lacks `user` and a getent that hangs, as a
  // directory server that does not answer: every lookup of that account waits on it. Returns
  // the file in `files` where the hanging getent writes its pid.
  std::string hang_lookups_of(const std::string& user, const TempDir& files) {
    std::ifstream passwd_in("/etc/passwd");
    std::ostringstream passwd;
    for (std::string line; std::getline(passwd_in, line);) {
      if (line.rfind(user + ":", 0) != 0) passwd << line << "\n";
    }
    std::ofstream(files.path() + "/passwd") << passwd.str();
    const std::string pid_file = files.path() + "/getent.pid";
    std::ofstream(files.path() + "/getent")
        << "#!/bin/sh\necho $$ > " << pid_file << ".new && mv " << pid_file << ".new " << pid_file
        << "\nexec sleep 60\n";
    EXPECT_EQ(chmod((files.path() + "/getent").c_str(), 0755), 0);
    DaemonOptions options;
    options.files_over = {{files.path() + "/passwd", "/etc/passwd"},
                          {files.path() + "/getent", "/usr/bin/getent"}};
    start(options);
    return pid_file;
  }

  // The pid of the getent that hang_lookups_of() planted, once the daemon runs it; not positive
  // when it was not run within 20 s.
  pid_t hanging_getent(const std::string& pid_file) {
    pid_t getent = -1;
    eventually(
        [&] {
          std::ifstream in(pid_file);
          return static_cast<bool>(in >> getent);
        },
        20s);
    return getent;
  }

  RunResult status_as(const TestUser& user, const std::string& project = "") {
    std::vector<std::string> argv = {daemon_->client(), "security", "status", "--socket",
                                     daemon_->socket_path()};
    if (!project.empty()) {
      argv.push_back("--project-root");
      argv.push_back(project);
    }
    RunOptions options;
    options.timeout = 30s;
    return run_as(user, argv, options);
  }

  // The other user is served in full: status with a project, a launch with
  // direct stdio (its own pipes passed to the role) and one relayed in frames.
  void expect_other_user_served() {
    const RunResult status = status_as(other_user(), other_project_);
    EXPECT_EQ(status.exit_code, 0) << status.err << daemon_->log();
    EXPECT_NE(status.out.find("layer idmapped_mounts: available"), std::string::npos) << status.out;
    RunOptions direct;
    direct.stdin_data = "echo direct-$((6 * 7))\n";
    direct.timeout = 30s;
    const RunResult piped = launch(*daemon_, other_user(), "workspace", other_project_, direct);
    EXPECT_EQ(piped.exit_code, 0) << piped.err << daemon_->log();
    EXPECT_EQ(piped.out, "direct-42\n");
    RunOptions frames = direct;
    frames.stdin_data = "echo frames-$((6 * 7))\n";
    frames.env = {{"PANDO_HELPER_STDIO", "frames"}};
    const RunResult relayed = launch(*daemon_, other_user(), "workspace", other_project_, frames);
    EXPECT_EQ(relayed.exit_code, 0) << relayed.err << daemon_->log();
    EXPECT_EQ(relayed.out, "frames-42\n");
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
  std::string other_project_;
};

TEST_F(DaemonCapacityTest, HoarderAtItsPendingLimitLocksOutOnlyItself) {
  DaemonOptions options;
  options.handshake_timeout_ms = 120000;  // the hoarder's connections stay for the whole test
  options.max_sessions = 64;
  options.max_pending_per_uid = 8;
  start(options);

  std::vector<std::unique_ptr<RawClient>> hoard;
  for (int i = 0; i < 8; ++i) {
    hoard.push_back(std::make_unique<RawClient>(daemon_->socket_path(), caller()));
    if (i % 3 >= 1) hoard.back()->send_preface();
    if (i % 3 == 2) hoard.back()->send_bytes(std::string("\x01\x00", 2));  // part of a header
  }
  {
    RawClient over(daemon_->socket_path(), caller());
    const v1::Rejected rejected = expect_rejected(over);
    EXPECT_EQ(rejected.code(), v1::ERROR_TOO_MANY_PENDING_FOR_USER) << rejected.message();
  }
  const RunResult refused = status_as(caller());
  EXPECT_EQ(refused.exit_code, 77) << refused.out;
  EXPECT_NE(refused.err.find("ERROR_TOO_MANY_PENDING_FOR_USER"), std::string::npos) << refused.err;

  // Far more connections than the old daemon-wide cap on handshakes.
  for (int i = 0; i < 130; ++i) {
    hoard.push_back(std::make_unique<RawClient>(daemon_->socket_path(), caller()));
  }
  expect_other_user_served();

  hoard.clear();
  EXPECT_TRUE(eventually([&] { return status_as(caller()).exit_code == 0; }, 20s))
      << daemon_->log();
}

TEST_F(DaemonCapacityTest, FdsComeOnlyWithTheRequestHeader) {
  DaemonOptions options;
  options.handshake_timeout_ms = 120000;  // nothing here may be cut short by the timeout
  // Started with the common soft limit of 1024 open files, the daemon raises
  // it to its hard limit.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 1024);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  start(options);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(soft_open_file_limit(daemon_->pid()), std::to_string(saved.rlim_max));
  int in[2], out[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  const std::vector<int> stdio = {in[0], out[1]};
  const std::string request =
      RawClient(daemon_->socket_path(), caller()).launch_request(v1::ROLE_WORKSPACE, project_);
  const auto header = wire::encode_header(v1::FRAME_LAUNCH_REQUEST, request.size());
  const auto preface = wire::make_preface();

  {  // attached to the preface
    RawClient client(daemon_->socket_path(), caller());
    ASSERT_EQ(send_with_fds(client.fd(), preface.data(), preface.size(), stdio),
              static_cast<ssize_t>(preface.size()));
    client.send_frame(v1::FRAME_LAUNCH_REQUEST, request);
    EXPECT_EQ(expect_rejected(client).code(), v1::ERROR_BAD_STDIO_FDS);
  }
  {  // attached to part of the header
    RawClient client(daemon_->socket_path(), caller());
    client.send_preface();
    ASSERT_EQ(send_with_fds(client.fd(), header.data(), 2, stdio), 2);
    client.send_bytes(std::string(header.begin() + 2, header.end()) + request);
    EXPECT_EQ(expect_rejected(client).code(), v1::ERROR_BAD_STDIO_FDS);
  }
  {  // attached to the payload
    RawClient client(daemon_->socket_path(), caller());
    client.send_preface();
    client.send_bytes(std::string(header.begin(), header.end()));
    ASSERT_EQ(send_with_fds(client.fd(), request.data(), request.size(), stdio),
              static_cast<ssize_t>(request.size()));
    EXPECT_EQ(expect_rejected(client).code(), v1::ERROR_BAD_STDIO_FDS);
  }
  {  // attached to a status request, which takes none
    RawClient client(daemon_->socket_path(), caller());
    client.send_preface();
    client.send_frame_with_fds(v1::FRAME_STATUS_REQUEST, "", stdio);
    EXPECT_EQ(expect_rejected(client).code(), v1::ERROR_BAD_STDIO_FDS);
  }

  // The flood that once took the daemon to its open-file limit: many
  // connections, each with four fds on every byte of a header never finished.
  const size_t baseline = open_fd_count(daemon_->pid());
  std::vector<std::unique_ptr<RawClient>> flood;
  const std::vector<int> four = {in[0], in[1], out[0], out[1]};
  for (int i = 0; i < 120; ++i) {
    flood.push_back(std::make_unique<RawClient>(daemon_->socket_path(), caller()));
    flood.back()->send_preface();
    for (int b = 0; b < 4; ++b) send_with_fds(flood.back()->fd(), header.data() + b, 1, four);
  }
  EXPECT_TRUE(eventually([&] { return open_fd_count(daemon_->pid()) <= baseline + 16; }, 20s))
      << open_fd_count(daemon_->pid()) << " open fds, " << baseline << " before the flood";
  expect_other_user_served();
  for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
}

// Only anonymous pipes, terminals that are not pseudo-terminal masters, and /dev/null
// (tests/integration/terminal_stdio_test.cc runs sessions with the last two).
TEST_F(DaemonCapacityTest, PassedStdioMustBePipesTerminalsOrDevNull) {
  start({});
  int in[2], out[2], pair[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  const std::string fifo = daemon_->dir().path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0666), 0);
  UniqueFd named(open(fifo.c_str(), O_RDWR | O_CLOEXEC));
  UniqueFd named_path(open(fifo.c_str(), O_PATH | O_CLOEXEC));
  const std::string anon_link = "/proc/self/fd/" + std::to_string(in[0]);
  UniqueFd anon_path(open(anon_link.c_str(), O_PATH | O_CLOEXEC));
  UniqueFd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  ASSERT_TRUE(master.valid() && grantpt(master.get()) == 0 && unlockpt(master.get()) == 0);
  UniqueFd slave_write_only(open(ptsname(master.get()), O_WRONLY | O_NOCTTY | O_CLOEXEC));
  UniqueFd slave_path(open(ptsname(master.get()), O_PATH | O_CLOEXEC));
  const std::string file = daemon_->dir().write_file("file", "", caller());
  UniqueFd regular(open(file.c_str(), O_RDWR | O_CLOEXEC));
  UniqueFd directory(open(daemon_->dir().path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd zero(open("/dev/zero", O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(named.valid() && named_path.valid() && anon_path.valid() &&
              slave_write_only.valid() && slave_path.valid() && regular.valid() &&
              directory.valid() && zero.valid());
  const std::string request =
      RawClient(daemon_->socket_path(), caller()).launch_request(v1::ROLE_WORKSPACE, project_);

  const std::vector<std::tuple<std::string, std::vector<int>, std::string>> bad = {
      {"O_PATH fd of a named FIFO as stdin", {named_path.get(), out[1]}, "O_PATH"},
      {"O_PATH fd of an anonymous pipe as stdin", {anon_path.get(), out[1]}, "O_PATH"},
      {"O_PATH fd of a terminal as stdin", {slave_path.get(), out[1]}, "O_PATH"},
      {"named FIFO as stdin", {named.get(), out[1]}, "named FIFO"},
      {"named FIFO as stdout", {in[0], named.get()}, "named FIFO"},
      {"socket as stdin", {pair[0], out[1]}, "socket"},
      {"pseudo-terminal master as stdout", {in[0], master.get()}, "pseudo-terminal master"},
      {"pseudo-terminal master as stdin", {master.get(), out[1]}, "pseudo-terminal master"},
      {"write-only terminal as stdin", {slave_write_only.get(), out[1]}, "not readable"},
      {"regular file as stdin", {regular.get(), out[1]}, "regular file"},
      {"directory as stdin", {directory.get(), out[1]}, "directory"},
      {"/dev/zero as stdout", {in[0], zero.get()}, "neither a terminal nor /dev/null"},
  };
  for (const auto& [what, fds, reason] : bad) {
    RawClient client(daemon_->socket_path(), caller());
    client.send_preface();
    client.send_frame_with_fds(v1::FRAME_LAUNCH_REQUEST, request, fds);
    const v1::Rejected rejected = expect_rejected(client);
    EXPECT_EQ(rejected.code(), v1::ERROR_BAD_STDIO_FDS) << what << ": " << rejected.message();
    EXPECT_NE(rejected.message().find(reason), std::string::npos)
        << what << ": " << rejected.message();
  }
  {  // two anonymous pipes are direct stdio
    RawClient client(daemon_->socket_path(), caller());
    client.send_preface();
    client.send_frame_with_fds(v1::FRAME_LAUNCH_REQUEST, request, {in[0], out[1]});
    auto accepted = client.read_frame(20s);
    ASSERT_TRUE(accepted.has_value()) << daemon_->log();
    EXPECT_EQ(accepted->type, v1::FRAME_ACCEPTED);
    const std::string line = "echo piped\n";
    ASSERT_EQ(write(in[1], line.data(), line.size()), static_cast<ssize_t>(line.size()));
    close(in[1]);
    in[1] = -1;
    close(out[1]);
    out[1] = -1;
    std::string got;
    char buffer[64];
    ssize_t n;
    while ((n = read(out[0], buffer, sizeof(buffer))) > 0) got.append(buffer, n);
    EXPECT_EQ(got, "piped\n");
    EXPECT_TRUE(client.read_until(v1::FRAME_EXIT, 20s).has_value());
  }
  for (int fd : {in[0], in[1], out[0], out[1], pair[0], pair[1]}) {
    if (fd >= 0) close(fd);
  }
}

// The daemon resolves a project with the caller's fs ids on a thread of its
// own: a lookup the caller's filesystem never answers holds that thread, not
// the event loop, and is refused after the handshake timeout.
TEST_F(DaemonCapacityTest, HungProjectFilesystemStallsOnlyItsCaller) {
  DaemonOptions options;
  options.max_pending_per_uid = 2;
  start(options);
  const std::string mountpoint = daemon_->dir().make_dir("hung", caller());
  std::optional<HungFuse> fuse(std::in_place, mountpoint);
  if (!fuse->ready()) GTEST_SKIP() << "no FUSE here: " << fuse->why_not();

  RawClient stuck(daemon_->socket_path(), caller());
  stuck.send_preface();
  stuck.send_frame(v1::FRAME_LAUNCH_REQUEST,
                   stuck.launch_request(v1::ROLE_WORKSPACE, mountpoint + "/p0"));
  const auto looked_up_as = fuse->wait_for_lookup("p0", 20s);
  ASSERT_TRUE(looked_up_as.has_value()) << daemon_->log();
  EXPECT_EQ(*looked_up_as, caller().uid) << "the project is resolved with the caller's fsuid";

  expect_other_user_served();
  const v1::Rejected timed_out = expect_rejected(stuck);
  EXPECT_EQ(timed_out.code(), v1::ERROR_PROJECT_TIMEOUT) << timed_out.message();
  EXPECT_NE(timed_out.message().find(mountpoint + "/p0"), std::string::npos) << timed_out.message();

  // A status request with a hung project answers, saying so. Sent raw: the real client
  // resolves the path itself first (realpath), and would hang on this filesystem on its own.
  RawClient status_client(daemon_->socket_path(), caller());
  status_client.send_preface();
  v1::StatusRequest status_request;
  status_request.set_project_root(mountpoint + "/p1");
  status_client.send_frame(v1::FRAME_STATUS_REQUEST, status_request.SerializeAsString());
  const auto status_frame = status_client.read_until(v1::FRAME_STATUS, 30s);
  ASSERT_TRUE(status_frame.has_value()) << daemon_->log();
  v1::Status status;
  ASSERT_TRUE(status.ParseFromArray(status_frame->payload.data(),
                                    static_cast<int>(status_frame->payload.size())));
  bool reported = false;
  for (const auto& layer : status.layers()) {
    if (layer.name() == "idmapped_mounts") {
      reported = !layer.available() && layer.detail().rfind(mountpoint + "/p1", 0) == 0;
    }
  }
  EXPECT_TRUE(reported) << status.DebugString();
  EXPECT_TRUE(fuse->wait_for_lookup("p1", 20s).has_value()) << status.DebugString();

  // Both threads are still stuck in the kernel and count against the caller's
  // pending limit (2): the caller is refused, nobody else.
  {
    RawClient over(daemon_->socket_path(), caller());
    EXPECT_EQ(expect_rejected(over).code(), v1::ERROR_TOO_MANY_PENDING_FOR_USER);
  }
  expect_other_user_served();

  // The filesystem gives up: the threads return and the caller is served again.
  fuse.reset();
  EXPECT_TRUE(eventually([&] { return status_as(caller()).exit_code == 0; }, 20s))
      << daemon_->log();
  // Every thread has returned: an ordinary stop (sanitizer builds check leaks).
  const int status_at_stop = daemon_->stop();
  EXPECT_TRUE(WIFEXITED(status_at_stop) && WEXITSTATUS(status_at_stop) == 0)
      << status_at_stop << daemon_->log();
  EXPECT_EQ(daemon_->log().find("exit_with_threads_stuck"), std::string::npos);
}

// An account that /etc/passwd does not list is asked of getent, which may take its whole
// timeout (a directory server that does not answer). A status request that needs one waits
// for it on its own thread: the daemon serves every other request meanwhile. (It used to look
// the workspace role up on the event loop, and everybody waited for getent.)
TEST_F(DaemonCapacityTest, ASlowAccountLookupHoldsUpNoOtherRequest) {
  TempDir files;
  const std::string pid_file = hang_lookups_of(workspace_user().name, files);

  // The status of a project asks for the workspace role's account: getent now hangs (the
  // daemon kills it after its timeout).
  RunningClient slow(caller(), {daemon_->client(), "security", "status", "--socket",
                                daemon_->socket_path(), "--project-root", project_});
  const pid_t getent = hanging_getent(pid_file);
  ASSERT_GT(getent, 0) << "getent was never asked\n" << daemon_->log();
  const RunResult other = status_as(other_user());
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(kill(getent, 0), 0) << "the other request was answered only after getent ended";
  // Ended here rather than by the daemon's timeout: the daemon reaps it, its thread returns,
  // and no getent outlives the test.
  kill(getent, SIGKILL);
  EXPECT_EQ(WEXITSTATUS(slow.wait()), 0) << slow.err();
  EXPECT_TRUE(eventually([&] { return kill(getent, 0) != 0; }, 10s)) << "getent left behind";
}

// A launch that needs an account only getent knows (the caller's, in LDAP or SSSD) waits for
// getent on its own thread: while the directory server does not answer, another caller's
// launch is served in full. (On the event loop, one such lookup would hold every launch and
// every other request until getent's timeout.)
TEST_F(DaemonCapacityTest, AHangingAccountLookupStallsNoOtherCallersLaunch) {
  TempDir files;
  const std::string pid_file = hang_lookups_of(caller().name, files);

  // The caller's launch asks getent for the caller's account, and getent hangs.
  RunningClient slow(
      caller(), {daemon_->client(), "security", "launch", "--role", "workspace", "--project-root",
                 project_, "--stdio", "--socket", daemon_->socket_path()});
  slow.close_stdin();
  const pid_t getent = hanging_getent(pid_file);
  ASSERT_GT(getent, 0) << "getent was never asked\n" << daemon_->log();
  RunOptions other;
  other.stdin_data = "echo served-$((6 * 7))\n";
  other.timeout = 30s;
  const RunResult served = launch(*daemon_, other_user(), "workspace", other_project_, other);
  EXPECT_EQ(served.exit_code, 0) << served.err << daemon_->log();
  EXPECT_EQ(served.out, "served-42\n");
  EXPECT_EQ(kill(getent, 0), 0) << "the other launch was served only after getent ended";
  // Ended here rather than by the daemon's timeout, so that no getent outlives the test; the
  // slow launch then goes on or was refused in the meantime (ERROR_PROJECT_TIMEOUT).
  kill(getent, SIGKILL);
  slow.wait();
  EXPECT_TRUE(eventually([&] { return kill(getent, 0) != 0; }, 10s)) << "getent left behind";
}

// The daemon stops while a resolution thread is stuck: the event loop answers
// SIGTERM and the client, and the process ends without waiting for the thread.
// (A request the FUSE server already read can only end with an answer or an
// aborted connection, so the kernel finishes the exit once the test aborts it.)
TEST_F(DaemonCapacityTest, StopsWhileAResolutionIsStuck) {
  start({});
  const std::string mountpoint = daemon_->dir().make_dir("hung", caller());
  std::optional<HungFuse> fuse(std::in_place, mountpoint);
  if (!fuse->ready()) GTEST_SKIP() << "no FUSE here: " << fuse->why_not();
  RawClient stuck(daemon_->socket_path(), caller());
  stuck.send_preface();
  stuck.send_frame(v1::FRAME_LAUNCH_REQUEST,
                   stuck.launch_request(v1::ROLE_WORKSPACE, mountpoint + "/p0"));
  ASSERT_TRUE(fuse->wait_for_lookup("p0", 20s).has_value()) << daemon_->log();

  ASSERT_EQ(kill(daemon_->pid(), SIGTERM), 0);
  EXPECT_EQ(expect_rejected(stuck).code(), v1::ERROR_SHUTTING_DOWN);
  EXPECT_TRUE(eventually(
      [&] { return daemon_->log().find("exit_with_threads_stuck") != std::string::npos; }, 20s))
      << daemon_->log();
  fuse.reset();
  const int status = daemon_->wait_exit(20s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << daemon_->log();
}

}  // namespace
}  // namespace pando::itest
