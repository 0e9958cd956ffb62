// System calls newer than Debian 12's kernel headers (x86_64 numbers): the
// seccomp policy names them, and its tests and probe make them.
#pragma once

#include <sys/syscall.h>

#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467  // Linux 6.15
#endif
#ifndef __NR_setxattrat
#define __NR_setxattrat 463  // Linux 6.13
#endif
#ifndef __NR_removexattrat
#define __NR_removexattrat 466  // Linux 6.13
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452  // Linux 6.6
#endif
