#!/bin/sh
# A host's package and configuration state, line by line, for "nothing changed" comparisons: apt's
# configuration and state, the environment and linker files the roles write, and the directories
# they install into. Run inside the host (molecule's testinfra host, `docker exec`); POSIX sh.
set -e
find /etc/apt /etc/profile.d /etc/ld.so.conf.d /etc/modprobe.d /etc/alternatives \
     /usr/local /opt /var/lib/gpurig -xdev \( -type f -o -type l \) 2>/dev/null \
  | sort | while read -r f; do
      if [ -L "$f" ]; then echo "L $f -> $(readlink "$f")"; else echo "F $f $(sha256sum < "$f")"; fi
    done
dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Abbrev}\n' | sort
