// Coverage builds only (PANDO_COVERAGE, never a release build): linked into the
// launcher and the test executables with -Wl,--wrap=_exit,--wrap=syscall. gcov
// writes its counters from an exit() handler, which neither a launcher nor a
// test's child reaches: a launcher pivot_root()s away from the build tree and
// ends with _exit(), and so do the children the unit tests fork
// (tests/unit/child_process.h). So the counters are written
//   - just before pivot_root: all a launcher did until then, including the
//     template's work it inherited (prestarting, receiving the plan, every
//     mount, the project walk);
//   - at _exit(), where the build tree can still be written.
// What a launcher does after pivot_root (starting the role, init) is not
// counted. gcov writes a process's counters once: the second call is a no-op.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>

extern "C" {
void __gcov_dump(void);
[[noreturn]] void __real__exit(int status);
long __real_syscall(long number, ...);
}

namespace {

// A process under a role's identity or Landlock, or in a root without the build tree,
// cannot write them, and gcov would say so on its stderr.
void dump_if_writable() {
  const int fd = open(PANDO_COVERAGE_BUILD_DIR "/CMakeCache.txt", O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return;
  close(fd);
  if (access(PANDO_COVERAGE_BUILD_DIR, W_OK) == 0) __gcov_dump();
}

}  // namespace

extern "C" {

[[noreturn]] void __wrap__exit(int status) {
  dump_if_writable();
  __real__exit(status);
}

// Like glibc's syscall(): six arguments after the number, passed on whether used or not.
long __wrap_syscall(long number, ...) {
  va_list list;
  va_start(list, number);
  long args[6];
  for (long& arg : args) arg = va_arg(list, long);
  va_end(list);
  if (number == SYS_pivot_root) dump_if_writable();
  return __real_syscall(number, args[0], args[1], args[2], args[3], args[4], args[5]);
}
}
