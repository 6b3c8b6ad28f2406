#!/usr/bin/env bash
# Build NVIDIA nvbandwidth v0.8 offline, with Boost.ProgramOptions taken from the
# Debian bookworm .debs beside this script (extracted into a private prefix; no
# root install, no apt, no network).
#
# usage: build.sh WORKDIR
# env:   CUDA_HOME (default /usr/local/cuda)
#        CMAKE     (default: `cmake` on PATH, else /opt/torch/.venv/bin/cmake)
#        JOBS      (default: nproc)
#        ARCH      (default: 90)  -> CMAKE_CUDA_ARCHITECTURES (skips GPU arch detection)
#        CXX       (optional host C++ compiler; default: CMake's choice, i.e. c++/g++)
# On success the last line on stdout is the absolute path of the nvbandwidth binary.
#
# Needs at link time libcuda (driver API) and libnvidia-ml (NVML). Looked up, in
# order: the real driver (ldconfig, /usr/local/nvidia, /usr/lib/x86_64-linux-gnu,
# ...), then $CUDA_HOME's stubs; if neither exists (build host with no driver),
# link stubs with the right SONAMEs are generated from the objects' undefined
# symbols. Either way the binary records NEEDED libcuda.so.1 / libnvidia-ml.so.1
# and binds to the real driver at run time.
# nvml.h: from the CUDA toolkit if it has it, else from a pip nvidia-nvml-dev
# install, else from the nvidia_nvml_dev-*.whl bundled beside this script.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NVB_VERSION=0.8
T0=$(date +%s)

log() { echo "[nvb-build] $*" >&2; }
die() { echo "[nvb-build] ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 WORKDIR"
mkdir -p "$1" || die "cannot create WORKDIR '$1'"
WORKDIR="$(cd "$1" && pwd)"

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
ARCH="${ARCH:-90}"
if [ -z "${CMAKE:-}" ]; then
  if command -v cmake >/dev/null 2>&1; then CMAKE="$(command -v cmake)"
  elif [ -x /opt/torch/.venv/bin/cmake ]; then CMAKE=/opt/torch/.venv/bin/cmake
  else die "no cmake: not on PATH and not at /opt/torch/.venv/bin/cmake (set CMAKE=...)"; fi
fi

NVCC="$CUDA_HOME/bin/nvcc"
[ -x "$NVCC" ] || die "nvcc not found at $NVCC (set CUDA_HOME)"
"$CMAKE" --version >/dev/null 2>&1 || die "cmake at '$CMAKE' does not run"
TARBALL="$HERE/nvbandwidth-$NVB_VERSION.tar.gz"
[ -f "$TARBALL" ] || die "missing $TARBALL"
shopt -s nullglob
DEBS=("$HERE"/libboost1.74-dev_*.deb "$HERE"/libboost-program-options1.74-dev_*.deb "$HERE"/libboost-program-options1.74.0_*.deb)
shopt -u nullglob
[ ${#DEBS[@]} -eq 3 ] || die "expected the 3 Boost 1.74 .debs in $HERE, found ${#DEBS[@]}"

# Generator: make if present, else ninja (pip's ninja sits beside pip's cmake).
CMAKE_DIR="$(dirname "$CMAKE")"
if command -v make >/dev/null 2>&1; then
  GEN="Unix Makefiles"; KEEP_GOING=(-k)
elif command -v ninja >/dev/null 2>&1 || [ -x "$CMAKE_DIR/ninja" ]; then
  GEN="Ninja"; KEEP_GOING=(-k 0)
  command -v ninja >/dev/null 2>&1 || export PATH="$CMAKE_DIR:$PATH"
else
  die "neither make nor ninja found"
fi

log "WORKDIR=$WORKDIR CUDA_HOME=$CUDA_HOME CMAKE=$CMAKE ($("$CMAKE" --version | head -1)) JOBS=$JOBS ARCH=$ARCH generator=$GEN"
log "nvcc: $("$NVCC" --version | tail -1)"

# ---------------------------------------------------------------- Boost prefix
BOOST_PREFIX="$WORKDIR/boost"
rm -rf "$BOOST_PREFIX"; mkdir -p "$BOOST_PREFIX"
for deb in "${DEBS[@]}"; do
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$deb" "$BOOST_PREFIX" || die "dpkg-deb -x failed on $deb"
  else  # fallback: a .deb is an ar archive holding data.tar.*
    tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$deb") || die "ar x failed on $deb (no dpkg-deb)"
    tar -xf "$tmp"/data.tar.* -C "$BOOST_PREFIX" || die "cannot unpack data.tar of $deb"
    rm -rf "$tmp"
  fi
done
BOOST_LIBDIR="$BOOST_PREFIX/usr/lib/x86_64-linux-gnu"
BOOST_CFG="$BOOST_LIBDIR/cmake/Boost-1.74.0"
[ -f "$BOOST_CFG/BoostConfig.cmake" ] || die "BoostConfig.cmake missing after extraction ($BOOST_CFG)"
[ -f "$BOOST_LIBDIR/libboost_program_options.a" ] || die "libboost_program_options.a missing after extraction"
[ -f "$BOOST_PREFIX/usr/include/boost/program_options.hpp" ] || die "boost headers missing after extraction"

# ---------------------------------------------------------------- sources
SRC="$WORKDIR/nvbandwidth-$NVB_VERSION"
rm -rf "$SRC"
tar -xzf "$TARBALL" -C "$WORKDIR" || die "cannot extract $TARBALL"
[ -f "$SRC/CMakeLists.txt" ] || die "unexpected tarball layout: no $SRC/CMakeLists.txt"
# The upstream CMakeLists runs `git describe`; outside a git checkout that prints
# an error and yields "" (not fatal). Give it a sane fallback version instead.
if grep -q '^set(CMAKE_CXX_FLAGS.*GIT_VERSION' "$SRC/CMakeLists.txt"; then
  sed -i "/^set(CMAKE_CXX_FLAGS.*GIT_VERSION/i if(NOT GIT_VERSION)\n    set(GIT_VERSION \"v$NVB_VERSION\")\nendif()" "$SRC/CMakeLists.txt"
else
  log "warning: GIT_VERSION line not found in CMakeLists.txt; version string may be empty"
fi

# ---------------------------------------------------------------- nvml.h
# Order: the toolkit's own header (matches nvcc), else the bundled 13.0 wheel
# (matches driver 580 / CUDA 13.0), else a system or pip copy. A newer nvml.h
# than the driver could map nvml* calls to versioned symbols the driver lacks.
NVML_INC=""
for d in "$CUDA_HOME/include" "$CUDA_HOME"/targets/*/include; do
  if [ -f "$d/nvml.h" ]; then NVML_INC="$d"; break; fi
done
shopt -s nullglob; whl=("$HERE"/nvidia_nvml_dev-*.whl); shopt -u nullglob
if [ -z "$NVML_INC" ] && [ ${#whl[@]} -ge 1 ]; then
  rm -rf "$WORKDIR/nvml"; mkdir -p "$WORKDIR/nvml"
  if command -v python3 >/dev/null 2>&1; then
    python3 - "${whl[0]}" "$WORKDIR/nvml" <<'EOF2' || die "cannot extract nvml.h from ${whl[0]}"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
n = [m for m in z.namelist() if m.endswith('/nvml.h')][0]
open(sys.argv[2] + '/nvml.h', 'wb').write(z.read(n))
EOF2
  elif command -v unzip >/dev/null 2>&1; then
    unzip -j -o -q "${whl[0]}" '*/nvml.h' -d "$WORKDIR/nvml" || die "cannot extract nvml.h from ${whl[0]}"
  else
    die "need python3 or unzip to extract nvml.h from ${whl[0]}"
  fi
  NVML_INC="$WORKDIR/nvml"
fi
if [ -z "$NVML_INC" ]; then
  for d in /usr/include /usr/local/cuda/include /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/include \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/nvml/include; do
    if [ -f "$d/nvml.h" ]; then NVML_INC="$d"; break; fi
  done
fi
[ -n "$NVML_INC" ] || die "nvml.h not found in CUDA_HOME or system, and no nvidia_nvml_dev-*.whl beside $0"
log "nvml.h from $NVML_INC"

# ---------------------------------------------------------------- libcuda / libnvidia-ml for the linker
LINKDIR="$WORKDIR/linklibs"
rm -rf "$LINKDIR"; mkdir -p "$LINKDIR"
find_lib() {  # $1 = base name (libcuda): print a path to a real or stub library, or nothing
  local base="$1" p d
  p="$( (/sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null) | awk -v b="$base.so.1" '$1==b && /x86-64/ {print $NF; exit}')"
  [ -n "$p" ] && [ -e "$p" ] && { echo "$p"; return; }
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu /usr/lib/wsl/lib \
           ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
    for p in "$d/$base.so.1" "$d/$base.so"; do [ -e "$p" ] && { echo "$p"; return; }; done
  done
  for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/lib/stubs" "$CUDA_HOME"/targets/*/lib/stubs; do
    [ -e "$d/$base.so" ] && { echo "$d/$base.so"; return; }
  done
}
MISSING=()
for base in libcuda libnvidia-ml; do
  p="$(find_lib "$base" || true)"
  if [ -n "$p" ]; then
    ln -sf "$p" "$LINKDIR/$base.so"; log "link $base against $p"
  else
    MISSING+=("$base"); log "no $base found (no driver here?): will generate a link stub"
  fi
done

gen_stub() {  # $1 = base name, $2 = symbol regex; stubs from the objects' undefined symbols
  local base="$1" re="$2" objdir="$BUILD/CMakeFiles/nvbandwidth.dir" c="$LINKDIR/$1.stub.c" cc
  find "$objdir" -name '*.o' -print0 | xargs -0 nm -u --format=posix 2>/dev/null \
    | awk '{print $1}' | grep -E "$re" | sort -u | sed 's/.*/void &(void) {}/' > "$c"
  [ -s "$c" ] || die "no undefined $base symbols found in $objdir (did the compile step fail?)"
  if command -v "${CC:-cc}" >/dev/null 2>&1; then cc="${CC:-cc}"; else cc="${CXX:-g++} -x c"; fi
  $cc -shared -fPIC -Wl,-soname,"$base.so.1" -o "$LINKDIR/$base.so" "$c" || die "cannot build $base stub"
  log "generated $LINKDIR/$base.so stub ($(wc -l < "$c") symbols, SONAME $base.so.1)"
}

# ---------------------------------------------------------------- configure
BUILD="$WORKDIR/build"
rm -rf "$BUILD"
CFG=(-S "$SRC" -B "$BUILD" -G "$GEN"
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_CUDA_COMPILER="$NVCC"
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH"
  -DCMAKE_POLICY_DEFAULT_CMP0167=NEW   # CMake>=3.30: use BoostConfig directly, not FindBoost
  -DCMAKE_POLICY_DEFAULT_CMP0144=NEW   # honour BOOST_ROOT without a policy warning
  -DBoost_DIR="$BOOST_CFG"
  -DBOOST_ROOT="$BOOST_PREFIX/usr"
  -DBoost_INCLUDE_DIR="$BOOST_PREFIX/usr/include"
  -DBoost_LIBRARY_DIR="$BOOST_LIBDIR"
  -DBoost_NO_SYSTEM_PATHS=ON
  -DCMAKE_PREFIX_PATH="$BOOST_PREFIX/usr"
  -DCMAKE_CXX_FLAGS="-I$NVML_INC"
  -DCMAKE_CUDA_FLAGS="-I$NVML_INC"
  -DCMAKE_EXE_LINKER_FLAGS="-L$LINKDIR"
)
[ -n "${CXX:-}" ] && CFG+=(-DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_CUDA_HOST_COMPILER="$CXX")
log "configuring ..."
# GIT_CEILING_DIRECTORIES: keep `git describe` from picking up an enclosing repo.
GIT_CEILING_DIRECTORIES="$WORKDIR" "$CMAKE" "${CFG[@]}" > "$WORKDIR/configure.log" 2>&1 \
  || { tail -40 "$WORKDIR/configure.log" >&2; die "cmake configure failed (full log: $WORKDIR/configure.log)"; }
grep -E 'compiler identification|Found Boost' "$WORKDIR/configure.log" | sed 's/^/[nvb-build]   /' >&2 || true

# ---------------------------------------------------------------- build
log "building with -j$JOBS ..."
if [ ${#MISSING[@]} -gt 0 ]; then
  # compile everything; the link is expected to fail until the stubs exist
  "$CMAKE" --build "$BUILD" -j "$JOBS" -- "${KEEP_GOING[@]}" > "$WORKDIR/build.log" 2>&1 || true
  for base in "${MISSING[@]}"; do
    case "$base" in
      libcuda) gen_stub libcuda '^cu[A-Z]' ;;
      libnvidia-ml) gen_stub libnvidia-ml '^nvml' ;;
    esac
  done
fi
"$CMAKE" --build "$BUILD" -j "$JOBS" >> "$WORKDIR/build.log" 2>&1 \
  || { grep -E -B2 -A8 'error|Error' "$WORKDIR/build.log" | tail -60 >&2; die "build failed (full log: $WORKDIR/build.log)"; }

BIN="$BUILD/nvbandwidth"
[ -x "$BIN" ] || die "build reported success but $BIN is missing"
log "NEEDED: $(readelf -d "$BIN" 2>/dev/null | awk '/NEEDED/ {gsub(/[][]/,"",$NF); printf "%s ", $NF}')"
[ ${#MISSING[@]} -gt 0 ] && log "note: linked against generated stubs for: ${MISSING[*]} (fine: the real driver libs are used at run time)"
log "done in $(( $(date +%s) - T0 ))s"
echo "$BIN"
