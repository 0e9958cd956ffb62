#pragma once

// The host-wide entries of a session's /proc that the launcher covers
// (mounts.cc) and the selftest probe checks (probe/view.cc). Header-only: the
// probe links nothing of the project. SECURITY.md (step 12) says why each.

namespace pando::sandbox {

// Read-only: nothing in a session changes them (runc's readonly paths).
inline constexpr const char* kProcReadOnly[] = {"sys", "sysrq-trigger", "irq", "bus",
                                                "fs",  "asound"};

// Covered by an empty read-only file or directory: runc's masked paths (kernel
// memory, keyrings, timer and scheduler internals, ACPI and SCSI devices), the
// kernel's symbols, and what fingerprints the host or shows its activity: the
// boot command line, the physical memory map, interrupt counts per device (an
// interrupt timing side channel; newer runc masks it too) and the memory
// zones' page counters, and what repeats them (softirqs, buddyinfo, pagetypeinfo,
// vmstat). What ordinary programs read (cpuinfo, meminfo, stat, uptime, loadavg,
// self/) stays: /proc/stat's intr and softirq lines still give the host's
// interrupt totals per number.
inline constexpr const char* kProcMasked[] = {
    "kcore",      "keys",          "key-users", "timer_list", "timer_stats",  "sched_debug",
    "kallsyms",   "latency_stats", "acpi",      "scsi",       "cmdline",      "iomem",
    "interrupts", "zoneinfo",      "softirqs",  "buddyinfo",  "pagetypeinfo", "vmstat"};

}  // namespace pando::sandbox
