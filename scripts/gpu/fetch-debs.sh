#!/usr/bin/env bash
# Run on the development machine (Debian 12, which has network access): fetch
# the .deb files of the libraries tide links into .gpu-debs/ at the repository
# root, so that they can travel to the GPU machine (which reaches no package
# registry) with the device tool's `carry`. scripts/gpu/build.sh unpacks them
# there into a private prefix; nothing is installed on either machine.
#
# The set: the run-time and -dev packages of jansson, utf8proc, oniguruma and
# cmocka, ISA-L, liburing and xxHash (the KV store), libmicrohttpd (tide serve), libcurl (tide bench serve), plus pkgconf (the GPU image is not known to ship pkg-config; it is
# small, and build.sh prefers the machine's own when there is one). CMake and
# ninja come with the GPU image (pip), so they are not fetched.
#
# .gpu-debs/ must be git-ignored (`/.gpu-debs/` in .gitignore). Idempotent:
# files already present are kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.gpu-debs
pkgs=(
  libjansson4 libjansson-dev
  libutf8proc2 libutf8proc-dev
  libonig5 libonig-dev
  libcmocka0 libcmocka-dev
  libmicrohttpd12 libmicrohttpd-dev
  libcurl4 libcurl4-openssl-dev
  pkgconf-bin libpkgconf3
  libisal2 libisal-dev liburing2 liburing-dev libxxhash0 libxxhash-dev
)
mkdir -p "$dest"
cd "$dest"
for p in "${pkgs[@]}"; do
  if ls "${p}"_*.deb >/dev/null 2>&1; then continue; fi
  apt-get download "$p"
done
ls -l ./*.deb
du -sh .
