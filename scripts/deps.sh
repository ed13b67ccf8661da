#!/usr/bin/env bash
# Installs the Debian packages tide builds and tests with. Idempotent: does
# nothing when everything is present. Needs root (or sudo) on Debian 12.
set -euo pipefail
pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libjansson-dev libutf8proc-dev libonig-dev libcmocka-dev
      libmicrohttpd-dev libcurl4-openssl-dev
      python3 python3-numpy ca-certificates
      libisal-dev liburing-dev libxxhash-dev
      libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev python3-pil)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the test oracles. A machine may already have them from
# elsewhere (a newer Node with its own npm conflicts with Debian's npm
# package), so ask for the commands, not the packages.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  echo "tide: installing ${missing[*]}" >&2
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
