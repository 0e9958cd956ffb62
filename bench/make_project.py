#!/usr/bin/env python3
"""Makes a project of about ENTRIES entries shaped like node_modules: packages of 26 entries
(lib/ and dist/ with 10 files each, package.json, README.md, LICENSE, index.js), 1,000 to a
scope directory, and one .env at the root. Usage: make_project.py ROOT ENTRIES

A package is 3 directories and 23 files: a 1M-entry project has about 115,000 directories
(8.7 entries each), more directories per entry than the 1.15M-entry tree of 92,000 the issue
describes, so no kinder to a reading that costs per directory."""
import os
import sys


def main():
    root, entries = sys.argv[1], int(sys.argv[2])
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".env"), "w") as f:
        f.write("API_KEY=bench\n")
    made, package = 1, 0
    while made < entries:
        scope = os.path.join(root, "node_modules", "s%03d" % (package // 1000))
        if package % 1000 == 0:
            os.makedirs(scope, exist_ok=True)
            made += 1 + (package == 0)
        directory = os.path.join(scope, "p%d" % package)
        os.mkdir(directory)
        for sub in ("lib", "dist"):
            os.mkdir(os.path.join(directory, sub))
            for i in range(10):
                open(os.path.join(directory, sub, "f%d.js" % i), "w").close()
        for name in ("package.json", "README.md", "LICENSE", "index.js"):
            open(os.path.join(directory, name), "w").close()
        made += 26
        package += 1


if __name__ == "__main__":
    main()
