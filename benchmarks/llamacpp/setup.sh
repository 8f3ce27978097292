#!/bin/sh
# Build llama.cpp's own programs (llama-bench, llama-completion, llama-perplexity) for bench.py.
# The source is the llama.cpp tree vendored in llama-cpp-python's sdist, taken from PyPI (a package registry;
# nothing is cloned and nothing of llama.cpp is kept in this repository). Needs cmake, ninja, g++.
#
#   sh benchmarks/llamacpp/setup.sh [WORK_DIR]          # default /tmp/posenc-llamacpp-bin; prints the bin folder
#   LLAMACPP_AMX=1 sh benchmarks/llamacpp/setup.sh DIR  # a second build with llama.cpp's AMX kernels (see README)
#
# LLAMACPP_VERSION (default 0.3.36) picks the sdist; PY (default the project's .venv python) runs pip.
# The build is what llama.cpp's own README gives for a CPU (Release, GGML_NATIVE=ON, OpenMP as found),
# static so the binaries need nothing from WORK_DIR but themselves. By default AMX is compiled out
# (-mno-amx-*): on a CPU without AMX this changes nothing; on one with AMX see README.md here.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-/tmp/posenc-llamacpp-bin}
VERSION=${LLAMACPP_VERSION:-0.3.36}
PY=${PY:-$HERE/../../.venv/bin/python}
AMX=${LLAMACPP_AMX:-0}
mkdir -p "$WORK" && cd "$WORK"
[ -f "llama_cpp_python-$VERSION.tar.gz" ] || "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION"
[ -d "llama_cpp_python-$VERSION" ] || tar xzf "llama_cpp_python-$VERSION.tar.gz"
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
if [ "$AMX" = 1 ]; then B=$SRC/build-amx; FLAGS=""; else B=$SRC/build; FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi
t0=$(date +%s)
CFLAGS="$FLAGS" CXXFLAGS="$FLAGS" cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON > "$B.cmake.log" 2>&1 || { tail -20 "$B.cmake.log"; exit 1; }
ninja -C "$B" llama-bench llama-completion llama-perplexity > "$B.build.log" 2>&1 || { tail -30 "$B.build.log"; exit 1; }
if [ "$AMX" = 1 ]; then
    # The preload shim that asks the kernel for AMX tile data before any thread starts (README.md, "AMX").
    gcc -O2 -shared -fPIC "$HERE/amx_perm.c" -o "$B/bin/amx_perm.so"
fi
echo "built in $(( $(date +%s) - t0 )) s: $B/bin" >&2
echo "$B/bin"
