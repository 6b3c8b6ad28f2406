#!/usr/bin/env bash
# Build the systemd base images molecule runs the roles in.
#
#   local/gpurig-debian:12        Debian 12 (bookworm) minbase rootfs from debootstrap
#   local/gpurig-debian:13        Debian 13 (trixie), built the same way (its g++ 14 is the
#                                   newest compiler the suite builds with)
#   local/gpurig-ubuntu2004-standin  the same rootfs posing as Ubuntu 20.04 "focal":
#                                   /etc/os-release and /etc/lsb-release say Ubuntu 20.04, and a
#                                   CPython 3.8 (the interpreter Ubuntu 20.04 ships) is copied in
#                                   for Ansible to manage it through. Its packages, libc, apt and
#                                   systemd are still Debian 12's: it exercises fact-driven var
#                                   selection, the ubuntu2004 repo path and Python 3.8 module
#                                   execution, not Ubuntu's archive. See README "What the tests cover".
#   local/gpurig-ubuntu2604-standin  the Debian 13 rootfs posing as Ubuntu 26.04 "resolute": its
#                                   os-release and lsb-release say so; Debian 13's apt 3 and Python
#                                   3.13 are the nearest to 26.04's own (apt 3, Python 3.14). It
#                                   exercises the ubuntu2604 repo directory, its key and defaults.
#
# Each debootstrapped rootfs is cached as a zstd tarball (~90 MB) in $GPURIG_CACHE so a second
# run on the same machine imports it in seconds; a fresh machine builds it (~2-3 min per suite).
set -euo pipefail
cache=${GPURIG_CACHE:-$HOME/.cache/gpurig}
py38=${GPURIG_PY38:-/root/.pyenv/versions/3.8.18}
mkdir -p "$cache"
# Debian suites to build, as "codename:major"; the Ubuntu 20.04 stand-in derives from the first.
suites=(bookworm:12 trixie:13)
debian_image=local/gpurig-debian:12
ubuntu_image=local/gpurig-ubuntu2004-standin:latest
resolute_image=local/gpurig-ubuntu2604-standin:latest

mirror() {
  # The mirror this host already uses, so the images work wherever the host's apt works.
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
  [ -n "$uri" ] || uri=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

need() { command -v "$1" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }

# build_rootfs SUITE TARBALL
build_rootfs() {
  local suite=$1 tarball=$2 root url
  need debootstrap debootstrap
  need zstd zstd
  root=$(mktemp -d /tmp/gpurig-rootfs.XXXXXX)
  url=$(mirror)
  echo "images: debootstrap $suite from $url (a few minutes on a fresh machine)"
  debootstrap --variant=minbase \
    --include=python3,python3-apt,systemd,systemd-sysv,dbus,sudo,ca-certificates,gnupg,iproute2,procps \
    "$suite" "$root" "$url" >"$cache/debootstrap-$suite.log" 2>&1 \
    || { tail -n 30 "$cache/debootstrap-$suite.log" >&2; exit 1; }
  cat >"$root/etc/apt/sources.list" <<SRC
deb $url $suite main
deb $url $suite-updates main
deb ${url%/debian}/debian-security $suite-security main
SRC
  # Extra CAs the host trusts (a TLS-terminating proxy, a corporate CA) must be trusted inside
  # the containers too, or HTTPS downloads made by the roles fail there but not on the host.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
  fi
  # Containers never run these units usefully; masking keeps boot quick and quiet.
  for unit in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
              getty.target console-getty.service systemd-logind.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
  done
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -C "$root" --numeric-owner -c . | zstd -q -T0 -o "$tarball.tmp"
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
}

# import_debian TARBALL IMAGE
import_debian() {
  echo "images: importing $2"
  zstd -dc "$1" | docker import -c 'CMD ["/lib/systemd/systemd"]' - "$2" >/dev/null
}

# ubuntu_release_files DIR VERSION_ID POINT_RELEASE CODENAME "Code Name": the os-release and
# lsb-release an Ubuntu LTS release ships, written into DIR for a stand-in image to copy.
ubuntu_release_files() {
  local dir=$1 id=$2 point=$3 codename=$4 name=$5
  cat >"$dir/os-release" <<OSR
NAME="Ubuntu"
VERSION="$point LTS ($name)"
ID=ubuntu
ID_LIKE=debian
PRETTY_NAME="Ubuntu $point LTS"
VERSION_ID="$id"
VERSION_CODENAME=$codename
UBUNTU_CODENAME=$codename
OSR
  cat >"$dir/lsb-release" <<LSB
DISTRIB_ID=Ubuntu
DISTRIB_RELEASE=$id
DISTRIB_CODENAME=$codename
DISTRIB_DESCRIPTION="Ubuntu $point LTS"
LSB
}

build_ubuntu_standin() {
  [ -x "$py38/bin/python3.8" ] || {
    echo "images: no CPython 3.8 at $py38 (set GPURIG_PY38); the Ubuntu 20.04 stand-in needs one" >&2
    exit 1
  }
  local ctx
  ctx=$(mktemp -d /tmp/gpurig-standin.XXXXXX)
  cp -a "$py38" "$ctx/py38"
  rm -f "$ctx"/py38/lib/python3.8/site-packages/_sandboxing*.pth
  ubuntu_release_files "$ctx" 20.04 20.04.6 focal "Focal Fossa"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $debian_image
COPY py38 $py38
COPY os-release /usr/lib/os-release
COPY lsb-release /etc/lsb-release
RUN echo "bullseye/sid" > /etc/debian_version && echo "TEST STAND-IN: Debian 12 rootfs that reports Ubuntu 20.04; python3.8 at $py38" > /etc/gpurig-standin
# Ubuntu 20.04's own python3 is 3.8 and imports the distro's pure-Python python3-* packages; the
# copied CPython would not. Link the ones Ansible modules import (python3-debian for
# deb822_repository, and its chardet) onto its path: they resolve once a role installs them.
RUN mkdir -p /usr/local/lib/gpurig-py38-distro \
 && ln -s /usr/lib/python3/dist-packages/debian /usr/lib/python3/dist-packages/chardet /usr/local/lib/gpurig-py38-distro/ \
 && echo /usr/local/lib/gpurig-py38-distro > $py38/lib/python3.8/site-packages/gpurig-py38-distro.pth
CMD ["/lib/systemd/systemd"]
DOCKERFILE
  echo "images: building $ubuntu_image"
  DOCKER_BUILDKIT=0 docker build -q -t "$ubuntu_image" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# Ubuntu 26.04 "resolute" (packages.ubuntu.com, "resolute (26.04LTS)", checked 2026-11-27).
build_resolute_standin() {
  local ctx
  ctx=$(mktemp -d /tmp/gpurig-standin.XXXXXX)
  ubuntu_release_files "$ctx" 26.04 26.04 resolute "Resolute Raccoon"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM local/gpurig-debian:13
COPY os-release /usr/lib/os-release
COPY lsb-release /etc/lsb-release
RUN echo "forky/sid" > /etc/debian_version && echo "TEST STAND-IN: Debian 13 rootfs that reports Ubuntu 26.04" > /etc/gpurig-standin
CMD ["/lib/systemd/systemd"]
DOCKERFILE
  echo "images: building $resolute_image"
  DOCKER_BUILDKIT=0 docker build -q -t "$resolute_image" "$ctx" >/dev/null
  rm -rf "$ctx"
}

built=()
for entry in "${suites[@]}"; do
  suite=${entry%%:*}
  image=local/gpurig-debian:${entry##*:}
  tarball=$cache/rootfs-debian-$suite.tar.zst
  [ -s "$tarball" ] || build_rootfs "$suite" "$tarball"
  docker image inspect "$image" >/dev/null 2>&1 || import_debian "$tarball" "$image"
  built+=("$image")
done
docker image inspect "$ubuntu_image" >/dev/null 2>&1 || build_ubuntu_standin
docker image inspect "$resolute_image" >/dev/null 2>&1 || build_resolute_standin
echo "images: ready (${built[*]}, $ubuntu_image, $resolute_image)"
