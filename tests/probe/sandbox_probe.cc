// pando-sandbox-probe: runs inside a sandbox and reports what it can do, one line per check,
// "<check> <result>" where result is "ok" (returned 0), "ret=<n>" (returned n > 0) or
// "errno=<NAME>".
//
//   denied-syscalls   tries every syscall the seccomp policy denies
//   int80             a 32-bit int $0x80 getpid; prints "int80 survived" if it returns
//   x32               an x32 getpid; prints "x32 survived" if it returns
//   status            the credential and confinement lines of /proc/self/status, verbatim
//   fds               "<fd> <target>" for every open fd
//   env               the environment, one variable per line
//   setuid-exec PATH [ARGS...]   execs PATH (e.g. a setuid binary)
//   connect-tcp PORT             connects to 127.0.0.1:PORT
//   connect-unix PATH            connects to the Unix stream socket at PATH
//   connect-abstract NAME        connects to the abstract Unix stream socket NAME
//   interfaces                   "<name> up|down" for every network interface
//   set-id DIR                   makes files and directories in DIR with set-user-ID,
//                                set-group-ID and plain modes through every call that takes
//                                a mode: "<call>-<setuid|setgid|plain> <result>", the target
//                                being DIR/<call>-<variant>; then openat2 on DIR
//   mkfifo PATH                  makes a FIFO at PATH
//   bind-unix PATH               binds a Unix stream socket to PATH
//
// denied-syscalls passes arguments the kernel itself rejects (EINVAL, EFAULT, EBADF...), so
// without the filter nothing happens to the host even when run as root, and a test can tell
// the filter's EPERM from the kernel's own answer wherever no capability check comes first.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "daemon/sandbox/syscall_numbers.h"

extern char** environ;

namespace {

constexpr long kBad = -1;  // an invalid fd, pointer, flags word and length all at once

void report(const char* check, long ret, int error) {
  if (ret < 0) {
    std::printf("%s errno=%s\n", check, strerrorname_np(error));
  } else if (ret == 0) {
    std::printf("%s ok\n", check);
  } else {
    std::printf("%s ret=%ld\n", check, ret);
  }
  std::fflush(stdout);
}

void try_syscall(const char* check, long nr, long a0 = kBad, long a1 = kBad, long a2 = kBad,
                 long a3 = kBad, long a4 = kBad, long a5 = kBad) {
  errno = 0;
  const long ret = syscall(nr, a0, a1, a2, a3, a4, a5);
  report(check, ret, errno);
}

// vhangup() takes no argument to make invalid: it runs in a child that left its terminal first.
void try_vhangup() {
  const pid_t pid = fork();
  if (pid < 0) {
    report("vhangup", -1, errno);
    return;
  }
  if (pid == 0) {
    if (setsid() < 0) {
      report("vhangup-setsid", -1, errno);
      _exit(1);
    }
    try_syscall("vhangup", __NR_vhangup);
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) report("vhangup-wait", -1, errno);
}

void* thread_main(void*) { return nullptr; }

int denied_syscalls() {
  try_syscall("ptrace", __NR_ptrace);
  try_syscall("process_vm_readv", __NR_process_vm_readv);
  try_syscall("process_vm_writev", __NR_process_vm_writev);
  try_syscall("pidfd_getfd", __NR_pidfd_getfd);
  try_syscall("mount", __NR_mount);
  try_syscall("umount2", __NR_umount2);
  try_syscall("pivot_root", __NR_pivot_root);
  try_syscall("chroot", __NR_chroot);
  try_syscall("open_tree", __NR_open_tree);
  try_syscall("open_tree_attr", __NR_open_tree_attr);
  try_syscall("move_mount", __NR_move_mount);
  try_syscall("fsopen", __NR_fsopen);
  try_syscall("fsconfig", __NR_fsconfig);
  try_syscall("fsmount", __NR_fsmount);
  try_syscall("fspick", __NR_fspick);
  try_syscall("mount_setattr", __NR_mount_setattr);
  try_syscall("clone3", __NR_clone3);
  try_syscall("unshare", __NR_unshare);
  try_syscall("setns", __NR_setns);
  try_syscall("keyctl", __NR_keyctl);
  try_syscall("add_key", __NR_add_key);
  try_syscall("request_key", __NR_request_key);
  try_syscall("bpf", __NR_bpf);
  try_syscall("perf_event_open", __NR_perf_event_open);
  try_syscall("userfaultfd", __NR_userfaultfd);
  try_syscall("io_uring_setup", __NR_io_uring_setup);
  try_syscall("io_uring_enter", __NR_io_uring_enter);
  try_syscall("io_uring_register", __NR_io_uring_register);
  try_syscall("kexec_load", __NR_kexec_load);
  try_syscall("kexec_file_load", __NR_kexec_file_load);
  try_syscall("init_module", __NR_init_module);
  try_syscall("finit_module", __NR_finit_module);
  try_syscall("delete_module", __NR_delete_module);
  try_syscall("iopl", __NR_iopl);
  try_syscall("ioperm", __NR_ioperm);
  try_syscall("reboot", __NR_reboot);
  try_syscall("swapon", __NR_swapon);
  try_syscall("swapoff", __NR_swapoff);
  try_syscall("acct", __NR_acct);
  try_syscall("quotactl", __NR_quotactl);
  try_syscall("quotactl_fd", __NR_quotactl_fd);
  try_syscall("open_by_handle_at", __NR_open_by_handle_at);
  try_syscall("name_to_handle_at", __NR_name_to_handle_at);
  try_syscall("lookup_dcookie", __NR_lookup_dcookie);
  try_syscall("syslog", __NR_syslog);
  try_vhangup();

  // Set-id modes: paths and fds are invalid, so without the filter the kernel answers EFAULT or
  // EBADF and makes nothing. The kernel reads 16 bits of a mode; the high half must not matter.
  const struct {
    std::string suffix;
    long mode;
  } set_id_modes[] = {
      {"setuid", S_ISUID | 0755},
      {"setgid", S_ISGID | 0755},
      {"setuid-high", (long{1} << 32) | S_ISUID | 0755},
  };
  for (const auto& item : set_id_modes) {
    const long mode = item.mode;
    const auto check = [&item](const char* call) { return std::string(call) + "-" + item.suffix; };
    try_syscall(check("chmod").c_str(), __NR_chmod, kBad, mode);
    try_syscall(check("fchmod").c_str(), __NR_fchmod, kBad, mode);
    try_syscall(check("fchmodat").c_str(), __NR_fchmodat, kBad, kBad, mode, 0);
    try_syscall(check("fchmodat2").c_str(), __NR_fchmodat2, kBad, kBad, mode, 0);
    try_syscall(check("open").c_str(), __NR_open, kBad, O_CREAT | O_WRONLY, mode);
    try_syscall(check("openat").c_str(), __NR_openat, kBad, kBad, O_CREAT | O_WRONLY, mode);
    try_syscall(check("creat").c_str(), __NR_creat, kBad, mode);
    try_syscall(check("mkdir").c_str(), __NR_mkdir, kBad, mode);
    try_syscall(check("mkdirat").c_str(), __NR_mkdirat, kBad, kBad, mode);
    try_syscall(check("mknod").c_str(), __NR_mknod, kBad, S_IFREG | mode, 0);
    try_syscall(check("mknodat").c_str(), __NR_mknodat, kBad, kBad, S_IFREG | mode, 0);
  }
  try_syscall("openat2", __NR_openat2);

  // Write for others: the chmod calls only (a mode given when a file is made passes the umask).
  for (const long mode : {long{0757}, (long{1} << 32) | S_IWOTH}) {
    const std::string suffix = mode > 0777 ? "-other-write-high" : "-other-write";
    try_syscall(("chmod" + suffix).c_str(), __NR_chmod, kBad, mode);
    try_syscall(("fchmod" + suffix).c_str(), __NR_fchmod, kBad, mode);
    try_syscall(("fchmodat" + suffix).c_str(), __NR_fchmodat, kBad, kBad, mode, 0);
    try_syscall(("fchmodat2" + suffix).c_str(), __NR_fchmodat2, kBad, kBad, mode, 0);
  }
  try_syscall("setxattr", __NR_setxattr);
  try_syscall("lsetxattr", __NR_lsetxattr);
  try_syscall("fsetxattr", __NR_fsetxattr);
  try_syscall("setxattrat", __NR_setxattrat);
  try_syscall("removexattr", __NR_removexattr);
  try_syscall("lremovexattr", __NR_lremovexattr);
  try_syscall("fremovexattr", __NR_fremovexattr);
  try_syscall("removexattrat", __NR_removexattrat);

  // A thread without CLONE_SIGHAND is invalid, so an unfiltered clone fails before forking.
  const struct {
    const char* check;
    long flag;
  } namespaces[] = {
      {"clone-newns", CLONE_NEWNS},     {"clone-newcgroup", CLONE_NEWCGROUP},
      {"clone-newuts", CLONE_NEWUTS},   {"clone-newipc", CLONE_NEWIPC},
      {"clone-newuser", CLONE_NEWUSER}, {"clone-newpid", CLONE_NEWPID},
      {"clone-newnet", CLONE_NEWNET},   {"clone-newtime", CLONE_NEWTIME},
  };
  for (const auto& ns : namespaces)
    try_syscall(ns.check, __NR_clone, ns.flag | CLONE_THREAD, 0, 0, 0, 0);

  // fd -1: without the filter the request reaches no terminal.
  constexpr long kHigh = long{1} << 32;
  try_syscall("ioctl-tiocsti", __NR_ioctl, -1, TIOCSTI, 0);
  try_syscall("ioctl-tiocsti-high", __NR_ioctl, -1, TIOCSTI | kHigh, 0);
  try_syscall("ioctl-tioclinux", __NR_ioctl, -1, TIOCLINUX, 0);
  try_syscall("ioctl-tioclinux-high", __NR_ioctl, -1, TIOCLINUX | kHigh, 0);

  // PER_LINUX32 (0x0008) only changes uname's machine; restored right after if it got through.
  try_syscall("personality-linux32", __NR_personality, 0x0008);
  try_syscall("personality-high", __NR_personality, kHigh | 0x0008);
  syscall(__NR_personality, 0);

  // Last: without the filter this moves the probe into a new user namespace.
  try_syscall("unshare-newuser", __NR_unshare, CLONE_NEWUSER);

  try_syscall("allow-personality-query", __NR_personality, 0xffffffff);
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) {
    report("allow-fork", -1, errno);
  } else {
    report("allow-fork", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : status, 0);
  }
  pthread_t thread;
  int error = pthread_create(&thread, nullptr, thread_main, nullptr);
  if (error == 0) error = pthread_join(thread, nullptr);
  report("allow-thread", error == 0 ? 0 : -1, error);
  return 0;
}

int int80() {
  long ret = 20;  // getpid in the i386 table
  // The kernel clobbers r8-r11 on int $0x80 from 64-bit code.
  asm volatile("int $0x80" : "+a"(ret) : : "r8", "r9", "r10", "r11", "memory", "cc");
  std::printf("int80 survived ret=%ld\n", ret);
  return 0;
}

int x32() {
  constexpr long kX32SyscallBit = 0x40000000;
  const long ret = syscall(kX32SyscallBit | __NR_getpid);
  std::printf("x32 survived ret=%ld\n", ret);
  return 0;
}

int status() {
  std::ifstream in("/proc/self/status");
  if (!in) {
    report("status", -1, errno);
    return 1;
  }
  static const char* const kKeys[] = {"Uid:",    "Gid:",    "Groups:", "CapInh:",     "CapPrm:",
                                      "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:", "Seccomp:"};
  std::string line;
  while (std::getline(in, line)) {
    for (const char* key : kKeys) {
      if (line.rfind(key, 0) == 0) std::printf("%s\n", line.c_str());
    }
  }
  return 0;
}

int fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    report("fds", -1, errno);
    return 1;
  }
  const std::string own = std::to_string(dirfd(dir));
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || name == own) continue;
    char target[4096];
    const ssize_t n = readlink(("/proc/self/fd/" + name).c_str(), target, sizeof(target) - 1);
    target[n < 0 ? 0 : n] = '\0';
    std::printf("%s %s\n", name.c_str(), target);
  }
  closedir(dir);
  return 0;
}

int env() {
  for (char** var = environ; *var != nullptr; ++var) std::printf("%s\n", *var);
  return 0;
}

int setuid_exec(char** argv) {
  execv(argv[0], argv);
  report("setuid-exec", -1, errno);
  return 1;
}

int connect_to(const char* check, int domain, const sockaddr* addr, socklen_t length) {
  const int fd = socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    report(check, -1, errno);
    return 1;
  }
  errno = 0;
  const int ret = connect(fd, addr, length);
  report(check, ret, errno);
  close(fd);
  return 0;
}

int connect_tcp(const char* port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect_to("connect-tcp", AF_INET, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
}

// `abstract`: the name goes after a leading NUL and the length counts no terminator.
int connect_unix(const char* check, const std::string& name, bool abstract) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t offset = abstract ? 1 : 0;
  if (name.size() + offset >= sizeof(addr.sun_path)) {
    report(check, -1, ENAMETOOLONG);
    return 1;
  }
  std::memcpy(addr.sun_path + offset, name.data(), name.size());
  const auto length =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + name.size() + !abstract);
  return connect_to(check, AF_UNIX, reinterpret_cast<const sockaddr*>(&addr), length);
}

// Reports a call that may return a new fd, which it closes.
void report_call(const std::string& check, long ret, int error) {
  if (ret > 0) {
    close(static_cast<int>(ret));
    ret = 0;
  }
  report(check.c_str(), ret, error);
}

// Exit status 1 when the file to act on could not be made.
int set_id(const std::string& dir) {
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    report("set-id-dir", -1, errno);
    return 1;
  }
  const struct {
    const char* suffix;
    long bits;
  } variants[] = {{"setuid", S_ISUID}, {"setgid", S_ISGID}, {"plain", 0}};
  for (const auto& variant : variants) {
    const long mode = variant.bits | 0755;
    const auto name = [&variant](const char* call) {
      return std::string(call) + "-" + variant.suffix;
    };
    const auto path = [&](const char* call) { return dir + "/" + name(call); };
    const auto existing_file = [&](const char* call) {
      const int fd = open(path(call).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) report(("make-" + name(call)).c_str(), -1, errno);
      return fd;
    };
    const auto call = [&](const char* check, auto... args) {
      errno = 0;
      const long ret = syscall(args...);
      report_call(name(check), ret, errno);
    };

    // Calls that change the mode of a file that exists.
    int fd = existing_file("chmod");
    if (fd < 0) return 1;
    close(fd);
    call("chmod", __NR_chmod, path("chmod").c_str(), mode);
    fd = existing_file("fchmod");
    if (fd < 0) return 1;
    call("fchmod", __NR_fchmod, fd, mode);
    close(fd);
    fd = existing_file("fchmodat");
    if (fd < 0) return 1;
    close(fd);
    call("fchmodat", __NR_fchmodat, dir_fd, name("fchmodat").c_str(), mode, 0);
    fd = existing_file("fchmodat2");
    if (fd < 0) return 1;
    close(fd);
    call("fchmodat2", __NR_fchmodat2, dir_fd, name("fchmodat2").c_str(), mode, 0);
    if (mkdir(path("chmod-dir").c_str(), 0755) != 0) {
      report(("make-" + name("chmod-dir")).c_str(), -1, errno);
      return 1;
    }
    call("chmod-dir", __NR_chmod, path("chmod-dir").c_str(), mode);

    // Calls that make a new file or directory with the mode.
    call("open", __NR_open, path("open").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    call("openat", __NR_openat, dir_fd, name("openat").c_str(),
         O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    call("creat", __NR_creat, path("creat").c_str(), mode);
    call("mkdir", __NR_mkdir, path("mkdir").c_str(), mode);
    call("mkdirat", __NR_mkdirat, dir_fd, name("mkdirat").c_str(), mode);
    call("mknod", __NR_mknod, path("mknod").c_str(), S_IFREG | mode, 0);
    call("mknodat", __NR_mknodat, dir_fd, name("mknodat").c_str(), S_IFREG | mode, 0);
  }
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  errno = 0;
  const long ret = syscall(__NR_openat2, dir_fd, ".", &how, sizeof(how));
  report_call("openat2", ret, errno);
  close(dir_fd);
  return 0;
}

int make_fifo(const char* path) {
  errno = 0;
  const int ret = mkfifo(path, 0644);
  report("mkfifo", ret, errno);
  return ret == 0 ? 0 : 1;
}

int bind_unix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    report("bind-unix", -1, ENAMETOOLONG);
    return 1;
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    report("bind-unix", -1, errno);
    return 1;
  }
  errno = 0;
  const int ret = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  report("bind-unix", ret, errno);
  close(fd);
  return ret == 0 ? 0 : 1;
}

int interfaces() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    report("interfaces", -1, errno);
    return 1;
  }
  struct if_nameindex* names = if_nameindex();
  if (names == nullptr) {
    report("interfaces", -1, errno);
    close(fd);
    return 1;
  }
  for (const struct if_nameindex* item = names; item->if_index != 0; ++item) {
    ifreq request{};
    std::strncpy(request.ifr_name, item->if_name, IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFFLAGS, &request) != 0) {
      report(item->if_name, -1, errno);
    } else {
      std::printf("%s %s\n", item->if_name, (request.ifr_flags & IFF_UP) != 0 ? "up" : "down");
    }
  }
  if_freenameindex(names);
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "denied-syscalls") return denied_syscalls();
  if (command == "int80") return int80();
  if (command == "x32") return x32();
  if (command == "status") return status();
  if (command == "fds") return fds();
  if (command == "env") return env();
  if (command == "setuid-exec" && argc > 2) return setuid_exec(argv + 2);
  if (command == "connect-tcp" && argc == 3) return connect_tcp(argv[2]);
  if (command == "connect-unix" && argc == 3) return connect_unix("connect-unix", argv[2], false);
  if (command == "connect-abstract" && argc == 3) {
    return connect_unix("connect-abstract", argv[2], true);
  }
  if (command == "interfaces") return interfaces();
  if (command == "set-id" && argc == 3) return set_id(argv[2]);
  if (command == "mkfifo" && argc == 3) return make_fifo(argv[2]);
  if (command == "bind-unix" && argc == 3) return bind_unix(argv[2]);
  std::fprintf(stderr,
               "usage: %s denied-syscalls|int80|x32|status|fds|env|interfaces|"
               "setuid-exec PATH [ARGS...]|connect-tcp PORT|connect-unix PATH|"
               "connect-abstract NAME|set-id DIR|mkfifo PATH|bind-unix PATH\n",
               argv[0]);
  return 2;
}
