// Coverage builds only (PANDO_COVERAGE, never a release build): linked into the
// launcher and the test executables with
// -Wl,--wrap=_exit,--wrap=syscall,--wrap=setresuid. gcov writes its counters
// from an exit() handler, which neither a launcher nor a test's child reaches:
// a launcher pivot_root()s away from the build tree and ends with _exit(), and
// the children the unit tests fork (tests/unit/child_process.h) end with
// _exit(), some after giving up root or under Landlock. So the counters are
// written, and started again from zero, at the last moment they still can be:
//   - just before pivot_root, setresuid and landlock_restrict_self: for a
//     launcher, all it did until it leaves the host's root, including the
//     template's work it inherited (prestarting, receiving the plan, every
//     mount, the project walk);
//   - at _exit(), where the build tree is still writable.
// Not counted: what a launcher does after pivot_root (starting the role, init),
// and what a test's child does after it gave up root or applied Landlock.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>

extern "C" {
void __gcov_dump(void);
void __gcov_reset(void);
[[noreturn]] void __real__exit(int status);
long __real_syscall(long number, ...);
int __real_setresuid(uid_t ruid, uid_t euid, uid_t suid);
}

namespace {

// A process under a role's identity or Landlock, or in a root without the build tree, cannot
// write them, and gcov would say so on its stderr.
void flush() {
  const int fd = open(PANDO_COVERAGE_BUILD_DIR "/CMakeCache.txt", O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return;
  close(fd);
  if (access(PANDO_COVERAGE_BUILD_DIR, W_OK) != 0) return;
  __gcov_dump();
  __gcov_reset();
}

}  // namespace

extern "C" {

[[noreturn]] void __wrap__exit(int status) {
  flush();
  __real__exit(status);
}

int __wrap_setresuid(uid_t ruid, uid_t euid, uid_t suid) {
  flush();
  return __real_setresuid(ruid, euid, suid);
}

// Like glibc's syscall(): six arguments after the number, passed on whether used or not.
long __wrap_syscall(long number, ...) {
  va_list list;
  va_start(list, number);
  long args[6];
  for (long& arg : args) arg = va_arg(list, long);
  va_end(list);
  if (number == SYS_pivot_root || number == SYS_landlock_restrict_self) flush();
  return __real_syscall(number, args[0], args[1], args[2], args[3], args[4], args[5]);
}
}
