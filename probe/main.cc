// pando-helper-probe: the escape attempts of `pando-helper security selftest`.
//
// The daemon runs it AS A ROLE, in a session built exactly as a launch builds
// it, with arguments only the daemon chooses. Each check tries one thing the
// sandbox must forbid (or reads one property it must have) and prints one line:
// `PASS <check> <detail>`, `FAIL <check> <detail>` or `SKIP <check> <reason>`.
// Exit 0 when nothing failed, 1 otherwise, 64 for a bad command line.
//
// Uses nothing but the C and C++ runtimes (linked in statically in the
// packages): it runs inside the view, which has /usr but none of the project's
// libraries.

#include <cstdio>

#include "probe/probe.h"

int main(int argc, char** argv) {
  using namespace pando::probe;
  if (!parse_options(argc, argv)) {
    std::fprintf(stderr,
                 "usage: pando-helper-probe --role core|workspace --caller-uid N --caller-gid N "
                 "[--socket PATH] [--cgroups yes|no] [--pids-max N] "
                 "[--runtime-path PATH]...\n"
                 "Run by pando-helperd for `pando-helper security selftest`.\n");
    return 64;
  }
  const int abi = landlock_abi();
  identity_checks();
  seccomp_checks();
  landlock_checks(abi);
  view_checks();
  network_checks();
  environment_checks();
  cgroup_checks();
  project_checks(abi);
  return failures() == 0 ? 0 : 1;
}
