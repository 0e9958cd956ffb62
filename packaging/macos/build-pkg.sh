#!/bin/bash
# Builds pando-helper-<version>.pkg on macOS (Xcode command line tools, cmake,
# ninja and the build dependencies from Homebrew or MacPorts):
#   packaging/macos/build-pkg.sh [OUT_DIR]          (default: ./out)
# Runs with the bash 3.2 that macOS ships. Set PANDO_SIGN_IDENTITY="Developer ID Installer: ..." to sign the product.
set -euo pipefail
umask 022

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(mkdir -p "${1:-out}" && cd "${1:-out}" && pwd)
build="$out/build-macos"
payload="$out/macos-payload"

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
	-DCMAKE_INSTALL_PREFIX=/usr/local -DPANDO_TESTS=OFF
cmake --build "$build" --target pando-helper pando-helperd pando-helper-sandbox
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")

rm -rf "$payload"
DESTDIR="$payload" cmake --install "$build" --strip
install -d -m 0755 "$payload/Library/LaunchDaemons" "$payload/usr/local/etc/pando"
install -m 0644 "$src/launchd/com.pando.helperd.plist" "$payload/Library/LaunchDaemons/"
install -m 0644 "$src/examples/pando-helperd.conf" \
	"$payload/usr/local/etc/pando/pando-helperd.conf.default"
install -d -m 0755 "$payload/usr/local/share/man/man1" "$payload/usr/local/share/man/man8"
install -m 0644 "$src/packaging/man/pando-helper.1" "$payload/usr/local/share/man/man1/"
install -m 0644 "$src/packaging/man/pando-helperd.8" "$payload/usr/local/share/man/man8/"

# Ownership comes from the installer (root:wheel), not from whoever built.
pkgbuild --root "$payload" \
	--identifier com.pando.helper \
	--version "$version" \
	--install-location / \
	--scripts "$src/packaging/macos/scripts" \
	--ownership recommended \
	"$out/pando-helper-component.pkg"

sign=()
if [ -n "${PANDO_SIGN_IDENTITY:-}" ]; then sign=(--sign "$PANDO_SIGN_IDENTITY"); fi
productbuild --package "$out/pando-helper-component.pkg" ${sign[@]+"${sign[@]}"} \
	"$out/pando-helper-$version.pkg"
echo "$out/pando-helper-$version.pkg"
