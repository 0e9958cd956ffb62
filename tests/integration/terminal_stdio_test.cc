// Direct stdio with a terminal or /dev/null (SECURITY.md, "The trust boundary"): the client
// hands the role its own pseudo-terminal slave, as an interactive shell would run it, and the
// role reads and writes that terminal itself, but cannot inject input into it, take it as its
// controlling terminal, reopen it, or leave its modes, line discipline or file flags changed
// once the session is over. A pseudo-terminal master is never taken.

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/harness.h"

namespace pando::itest {
namespace {

namespace v1 = pando::helper::v1;
using namespace std::chrono_literals;

// A new pseudo-terminal whose slave belongs to caller() (mode 0620, group tty), as a login's.
struct Pty {
  Pty() {
    master.reset(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!master.valid() || grantpt(master.get()) != 0 || unlockpt(master.get()) != 0) {
      throw std::runtime_error("no pseudo-terminal");
    }
    name = ptsname(master.get());
    slave.reset(open(name.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!slave.valid() || fchown(slave.get(), caller().uid, static_cast<gid_t>(-1)) != 0 ||
        fchmod(slave.get(), 0620) != 0) {
      throw std::runtime_error("cannot open " + name);
    }
  }

  bool write(const std::string& bytes) const {
    return ::write(master.get(), bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  }

  // Reads what the terminal showed until `needle` appears or the timeout passes.
  bool read_until(const std::string& needle, std::chrono::milliseconds timeout) {
    return read_fd_until(master.get(), shown, needle, timeout);
  }

  UniqueFd master;
  UniqueFd slave;
  std::string name;
  std::string shown;
};

// How the client runs on a terminal: alone in a session whose controlling terminal it is, or
// as a job of a session whose leader (the shell) waits for it, in the foreground or in the
// background (where SIGTTIN is ignored: a read of the terminal fails instead of stopping it).
// A job's group is not orphaned, so the kernel would stop it for ^Z.
enum class Job { kLeader, kForeground, kBackground };

// The child's part of Job, before it becomes caller(): false when a call failed.
bool enter_job(int terminal, Job job) {
  if (setsid() < 0 || ioctl(terminal, TIOCSCTTY, 0) != 0) return false;
  if (job == Job::kLeader) return true;
  const pid_t child = fork();
  if (child > 0) {
    int status = 0;
    waitpid(child, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 124);
  }
  if (child < 0 || setpgid(0, 0) != 0) return false;
  if (job == Job::kBackground) return signal(SIGTTIN, SIG_IGN) != SIG_ERR;
  // A shell gives its job the terminal with SIGTTOU ignored, as here.
  return signal(SIGTTOU, SIG_IGN) != SIG_ERR && tcsetpgrp(terminal, getpid()) == 0 &&
         signal(SIGTTOU, SIG_DFL) != SIG_ERR;
}

// `pando-helper security launch` as caller() with `in` and `out` as its stdin and stdout, on
// `terminal` (its controlling terminal, so ^C typed there is its SIGINT) as `job`.
class Client {
 public:
  Client(const Daemon& daemon, const std::string& project, int in, int out, int terminal = -1,
         Job job = Job::kLeader) {
    int err[2];
    if (pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    std::vector<std::string> args = {daemon.client(), "security",          "launch", "--role",
                                     "workspace",     "--project-root",    project,  "--stdio",
                                     "--socket",      daemon.socket_path()};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    char debug[] = "PANDO_DEBUG=0";
    char* envp[] = {debug, nullptr};
    const gid_t groups[] = {caller().gid};
    pid_ = fork();
    if (pid_ == 0) {
      if (terminal >= 0 && !enter_job(terminal, job)) _exit(125);
      if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err[1], 2) < 0 || chdir("/") != 0 ||
          setgroups(1, groups) != 0 || setresgid(caller().gid, caller().gid, caller().gid) != 0 ||
          setresuid(caller().uid, caller().uid, caller().uid) != 0) {
        _exit(126);
      }
      execve(argv[0], argv.data(), envp);
      _exit(127);
    }
    close(err[1]);
    err_.reset(err[0]);
  }

  ~Client() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The client's exit status (-1 when it did not exit in time: killed) and its stderr.
  int wait(std::chrono::milliseconds timeout = 30s) {
    int status = 0;
    const bool exited =
        eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
    char buffer[4096];
    ssize_t n;
    while ((n = read(err_.get(), buffer, sizeof(buffer))) > 0) err.append(buffer, n);
    return exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  void signal(int signo) const { kill(pid_, signo); }

  std::string err;

 private:
  pid_t pid_ = -1;
  UniqueFd err_;
};

// "<st_dev>:<st_ino>:<major>:<minor>" of an open file, as the role's `stat -c %d:%i:%t:%T -`
// prints it for its stdin.
std::string identity(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "unknown";
  char text[96];
  std::snprintf(text, sizeof(text), "%llu:%llu:%x:%x", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino), major(st.st_rdev), minor(st.st_rdev));
  return text;
}

class TerminalStdioTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(geteuid(), 0u) << "integration tests run as root"; }

  void start(DaemonOptions options = {}) {
    daemon_ = std::make_unique<Daemon>(std::move(options));
    project_ = daemon_->dir().make_dir("proj", caller());
  }

  bool nothing_of_the_session_left() {
    return eventually([] { return processes_of(workspace_user().uid).empty(); }, 20s);
  }

  // The slave's modes before a session: a login's, echo on and canonical.
  static termios modes_before(const Pty& pty) {
    termios modes{};
    EXPECT_EQ(tcgetattr(pty.slave.get(), &modes), 0);
    EXPECT_TRUE(modes.c_lflag & ECHO);
    EXPECT_TRUE(modes.c_lflag & ICANON);
    return modes;
  }

  // Whatever the session set, the slave has the modes of `before` again.
  static void expect_modes_put_back(const Pty& pty, const termios& before) {
    termios after{};
    ASSERT_EQ(tcgetattr(pty.slave.get(), &after), 0);
    EXPECT_EQ(after.c_lflag, before.c_lflag);
    EXPECT_EQ(after.c_iflag, before.c_iflag);
    EXPECT_EQ(after.c_oflag, before.c_oflag);
  }

  std::unique_ptr<Daemon> daemon_;
  std::string project_;
};

TEST_F(TerminalStdioTest, TheRoleReadsAndWritesTheCallersTerminalItself) {
  start();
  Pty pty;
  Client client(*daemon_, project_, pty.slave.get(), pty.slave.get(), pty.slave.get(),
                Job::kForeground);
  // The role's stdin is the very file the client was given (same device and inode on the
  // host's devpts): with the framed relay it would be the daemon's pipe and `test -t 0` fails.
  ASSERT_TRUE(
      pty.write("test -t 0 && test -t 1 && echo tty-$((6 * 7)) && "
                "echo \"id-$(stat -c %d:%i:%t:%T -)-end\" && "
                "IFS= read -r line && echo \"got-$line-$((1 + 1))\" && exec sleep 1000\n"));
  ASSERT_TRUE(pty.read_until("tty-42", 30s)) << pty.shown << daemon_->log();
  EXPECT_TRUE(pty.read_until("id-" + identity(pty.slave.get()) + "-end", 10s)) << pty.shown;
  ASSERT_TRUE(pty.write("ping\n"));
  EXPECT_TRUE(pty.read_until("got-ping-2", 10s)) << pty.shown;
  // ^Z does not stop the client (the role would go on reading the terminal while the shell has
  // it), so the ^C after it still ends the session: in cooked mode it is the client's SIGINT
  // (the role is in a session of its own), which the client forwards as a Signal frame.
  ASSERT_TRUE(pty.write("\x1a"));
  ASSERT_TRUE(pty.write("\x03"));
  EXPECT_EQ(client.wait(), 128 + SIGINT) << client.err;
  EXPECT_TRUE(nothing_of_the_session_left());
}

TEST_F(TerminalStdioTest, TheRoleCannotInjectTakeOrReopenTheTerminal) {
  start();
  Pty pty;
  Client client(*daemon_, project_, pty.slave.get(), pty.slave.get(), pty.slave.get());
  // TIOCSTI (0x5412) and TIOCSCTTY (0x540e) with perl's ioctl, which prints errno; TIOCSCTTY
  // from the leader of a new session without a controlling terminal (setsid), the only
  // process the kernel would let take one; the terminal reopened through /proc/self/fd (its
  // node is the caller's, 0620, group tty) and as /dev/tty (the role has no controlling
  // terminal).
  const std::string checks =
      std::string(kCheck) +
      "test -t 0 && echo tty-$((6 * 7)); "
      "perl -e 'my $c = \"X\"; ioctl(STDIN, 0x5412, $c) or print \"sti-errno-\", $!+0, \"\\n\"'; "
      "setsid -w perl -e 'my $a = 0; ioctl(STDIN, 0x540e, $a) or print \"sctty-errno-\", $!+0, "
      "\"\\n\"'; "
      "t reopen-proc sh -c 'exec 3</proc/self/fd/0'; "
      "t reopen-dev-tty sh -c 'exec 3</dev/tty'; "
      "echo checks-$((3 * 3)); IFS= read -r line; echo \"after-[$line]-$((2 + 2))\"\n";
  ASSERT_TRUE(pty.write(checks));
  ASSERT_TRUE(pty.read_until("tty-42", 30s)) << pty.shown << daemon_->log();
  ASSERT_TRUE(pty.read_until("checks-9", 10s)) << pty.shown;
  ASSERT_TRUE(pty.write("typed\n"));
  ASSERT_TRUE(pty.read_until("]-4", 10s)) << pty.shown;
  EXPECT_NE(pty.shown.find("sti-errno-1\r"), std::string::npos) << pty.shown;  // EPERM
  EXPECT_NE(pty.shown.find("sctty-errno-1\r"), std::string::npos) << pty.shown;
  EXPECT_NE(pty.shown.find("reopen-proc no"), std::string::npos) << pty.shown;
  EXPECT_NE(pty.shown.find("reopen-dev-tty no"), std::string::npos) << pty.shown;
  // Nothing was pushed into the terminal's input: the next line read is the one typed.
  EXPECT_NE(pty.shown.find("after-[typed]-4"), std::string::npos) << pty.shown;
  EXPECT_EQ(client.wait(), 0) << client.err;
  EXPECT_TRUE(nothing_of_the_session_left());
}

TEST_F(TerminalStdioTest, WhatTheRoleChangesOnTheTerminalIsPutBackWhenTheSessionEnds) {
  start();
  Pty pty;
  const termios before = modes_before(pty);
  Client client(*daemon_, project_, pty.slave.get(), pty.slave.get(), pty.slave.get());
  // Exclusive mode (TIOCEXCL, 0x540c: the caller could no longer open the terminal, /dev/tty
  // included) and the line discipline N_NULL (27: the terminal would swallow every byte both
  // ways; TIOCSETD is 0x5423) are refused by seccomp, since no client could put them back
  // after a SIGKILL; raw mode without echo and O_NONBLOCK (F_SETFL 4, 04000) on the open file
  // the caller shares go through and are put back by the client. Reported on stderr.
  ASSERT_TRUE(pty.write(
      "perl -e 'my $a = 0; ioctl(STDIN, 0x540c, $a) or print STDERR \"excl-errno-\", $!+0, "
      "\"\\n\"; "
      "my $d = pack(\"i\", 27); ioctl(STDIN, 0x5423, $d) or print STDERR \"setd-errno-\", $!+0, "
      "\"\\n\"' && stty raw -echo && perl -e 'fcntl(STDIN, 4, 2048) or exit 1' && "
      "echo changed-$((6 * 7)) >&2\n"));
  EXPECT_EQ(client.wait(), 0) << client.err;
  EXPECT_NE(client.err.find("changed-42"), std::string::npos) << client.err << daemon_->log();
  EXPECT_NE(client.err.find("excl-errno-1\n"), std::string::npos) << client.err;
  EXPECT_NE(client.err.find("setd-errno-1\n"), std::string::npos) << client.err;
  int line_discipline = -1;
  ASSERT_EQ(ioctl(pty.slave.get(), TIOCGETD, &line_discipline), 0);
  EXPECT_EQ(line_discipline, N_TTY);
  expect_modes_put_back(pty, before);
  int exclusive = -1;
  ASSERT_EQ(ioctl(pty.slave.get(), TIOCGEXCL, &exclusive), 0);
  EXPECT_EQ(exclusive, 0);
  EXPECT_EQ(fcntl(pty.slave.get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_TRUE(nothing_of_the_session_left());
}

// ^\ (SIGQUIT) would quit the client by its default action, leaving the terminal as the role
// set it: the client ends itself through its return path instead, so the modes are put
// back, and the daemon ends the session of a client that left.
TEST_F(TerminalStdioTest, QuittingTheClientPutsTheTerminalBack) {
  start();
  Pty pty;
  const termios before = modes_before(pty);
  Client client(*daemon_, project_, pty.slave.get(), pty.slave.get(), pty.slave.get());
  ASSERT_TRUE(pty.write("stty raw -echo && sleep 60\n"));
  ASSERT_TRUE(eventually(
      [&] {
        termios now{};
        return tcgetattr(pty.slave.get(), &now) == 0 && (now.c_lflag & ECHO) == 0;
      },
      30s))
      << daemon_->log();
  client.signal(SIGQUIT);
  EXPECT_EQ(client.wait(), 128 + SIGQUIT) << client.err;
  EXPECT_NE(client.err.find("quit (SIGQUIT)"), std::string::npos) << client.err;
  expect_modes_put_back(pty, before);
  EXPECT_TRUE(nothing_of_the_session_left());
}

// A role that prints what its stdin is, without reading it (the default role reads its
// command from stdin).
DaemonOptions stdin_kind_role() {
  DaemonOptions options;
  options.workspace_argv_text =
      "  argv: \"/bin/sh\"\n  argv: \"-c\"\n"
      "  argv: \"echo \\\"stdin-$(stat -c %F:%t:%T -)-$((6 * 7))\\\"\"";
  return options;
}

// The role's stdout with `in` as the client's stdin and a pipe as its stdout.
std::string role_output(const Daemon& daemon, const std::string& project, int in, int terminal = -1,
                        Job job = Job::kLeader) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return "pipe2 failed";
  UniqueFd out_read(out[0]);
  UniqueFd out_write(out[1]);
  Client client(daemon, project, in, out_write.get(), terminal, job);
  out_write.reset();
  std::string got;
  char buffer[256];
  ssize_t n;
  while ((n = read(out_read.get(), buffer, sizeof(buffer))) > 0) got.append(buffer, n);
  const int code = client.wait();
  return code == 0 ? got : got + "exit code " + std::to_string(code) + ": " + client.err;
}

TEST_F(TerminalStdioTest, DevNullAsStdinIsDirect) {
  start(stdin_kind_role());
  UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(null.valid());
  const std::string got = role_output(*daemon_, project_, null.get());
  // With the framed relay the role's stdin would be the daemon's pipe ("fifo").
  EXPECT_EQ(got, "stdin-character special file:1:3-42\n") << daemon_->log();
  EXPECT_TRUE(nothing_of_the_session_left());
}

// A named FIFO is a file the daemon refuses to hand over (ERROR_BAD_STDIO_FDS): the client
// relays it in frames instead of offering it.
TEST_F(TerminalStdioTest, ANamedFifoAsStdinIsRelayed) {
  start(stdin_kind_role());
  const std::string fifo = daemon_->dir().path() + "/stdin-fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  UniqueFd named(open(fifo.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(named.valid());
  const std::string got = role_output(*daemon_, project_, named.get());
  EXPECT_EQ(got, "stdin-fifo:0:0-42\n") << daemon_->log();
  EXPECT_TRUE(nothing_of_the_session_left());
}

TEST_F(TerminalStdioTest, ABackgroundJobKeepsTheTerminalToItself) {
  start(stdin_kind_role());
  Pty pty;
  // As the terminal's foreground job the client hands it over; as a background job it relays
  // stdin in frames (its read of the terminal fails here, so the role sees end-of-file), and
  // the role cannot read what is typed for the shell.
  const std::string direct =
      role_output(*daemon_, project_, pty.slave.get(), pty.slave.get(), Job::kForeground);
  EXPECT_EQ(direct.rfind("stdin-character special file:", 0), 0u) << direct << daemon_->log();
  const std::string background =
      role_output(*daemon_, project_, pty.slave.get(), pty.slave.get(), Job::kBackground);
  EXPECT_EQ(background, "stdin-fifo:0:0-42\n") << daemon_->log();
  EXPECT_TRUE(nothing_of_the_session_left());
}

// Issue 24, finding 1: sessions of one caller share their role's home on disk, and the other
// role reads it. A session bound a Unix socket there, a later session with the caller's
// terminal connected and sent its fds 0 and 1 (SCM_RIGHTS), then ended: the first kept
// reading what the caller typed in their shell afterwards. A path socket is reachable across
// network namespaces and Landlock does not scope path sockets, so no session may bind one
// anywhere another can reach; only its private /tmp and /dev/shm take them.
TEST_F(TerminalStdioTest, NoSessionGetsTheTerminalOfAnotherAfterItEnded) {
  start();
  const std::string listen_py = daemon_->dir().write_file(
      "proj/listen.py",
      "import array, os, select, socket, sys\n"
      "bound = []\n"
      "for path in sys.argv[1:]:\n"
      "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
      "    try:\n"
      "        s.bind(path); s.listen(1); bound.append(s); print('bound', path, flush=True)\n"
      "    except OSError as e:\n"
      "        print('refused', path, e.errno, flush=True)\n"
      "print('listening', flush=True)\n"
      "sys.stdin.readline()\n"
      "for s in bound:\n"
      "    s.setblocking(False)\n"
      "    try:\n"
      "        c, _ = s.accept()\n"
      "    except BlockingIOError:\n"
      "        continue\n"
      "    _, anc, _, _ = c.recvmsg(16, socket.CMSG_SPACE(8))\n"
      "    fds = array.array('i')\n"
      "    for _, _, data in anc:\n"
      "        fds.frombytes(data[:len(data) - len(data) % 4])\n"
      "    print('received', len(fds), flush=True)\n"
      "    if fds and select.select([fds[0]], [], [], 5)[0]:\n"
      "        print('read', os.read(fds[0], 100), flush=True)\n"
      "print('done', flush=True)\n",
      caller());
  const std::string send_py = daemon_->dir().write_file(
      "proj/send.py",
      "import array, socket, sys\n"
      "for path in sys.argv[1:]:\n"
      "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
      "    try:\n"
      "        s.connect(path)\n"
      "    except OSError:\n"
      "        continue\n"
      "    s.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [0, 1]))])\n"
      "    print('sent-via', path, flush=True)\n"
      "    break\n"
      "else:\n"
      "    print('no-peer', flush=True)\n",
      caller());
  const std::string homes = project_ + "/.pando-sandbox/";
  for (const std::string role : {"workspace", "core"}) {
    SCOPED_TRACE(role);
    const std::string home = homes + role + "/home";
    const std::string places = home + "/s " + project_ + "/s /tmp/s /dev/shm/s";
    RunningClient holder(caller(),
                         {daemon_->client(), "security", "launch", "--role", role, "--project-root",
                          project_, "--stdio", "--socket", daemon_->socket_path()});
    ASSERT_TRUE(holder.write_all("exec python3 " + listen_py + " " + places + "\n"));
    ASSERT_TRUE(holder.read_until("listening", 30s)) << holder.out() << daemon_->log();
    // Landlock refused the socket on disk (EACCES); the project is read-only for core.
    EXPECT_NE(holder.out().find("refused " + home + "/s 13\n"), std::string::npos) << holder.out();

    Pty pty;
    Client sender(*daemon_, project_, pty.slave.get(), pty.slave.get(), pty.slave.get(),
                  Job::kForeground);
    ASSERT_TRUE(pty.write("exec python3 " + send_py + " " + places + "\n"));
    EXPECT_EQ(sender.wait(), 0) << sender.err << daemon_->log();
    EXPECT_TRUE(pty.read_until("no-peer", 10s)) << pty.shown;
    // The caller's shell has its terminal again, and the caller types into it.
    ASSERT_TRUE(pty.write("typed-after-the-session\n"));
    ASSERT_TRUE(holder.write_all("go\n"));
    ASSERT_TRUE(holder.read_until("done", 30s)) << holder.out();
    EXPECT_EQ(holder.out().find("received"), std::string::npos) << holder.out();
    EXPECT_EQ(holder.out().find("typed-after"), std::string::npos) << holder.out();
    holder.close_stdin();
    EXPECT_EQ(holder.wait(), 0);
  }
}

}  // namespace
}  // namespace pando::itest
