#!/usr/bin/env bash
# Build llama-cpp-python (a benchmark-only dependency of as_stored.py) from source into its own folder.
# It compiles llama.cpp: 0.3.36 took 30 min at nice 19 on this project's 2 shared AVX2 cores (load 6-7).
# AMX is switched off: its kernel crashed on the first forward pass on the AMX machine this project was first
# measured on (issue 28); on a CPU without AMX the flags change nothing. The wheel is ctypes-only (any CPython);
# its dependencies (numpy, jinja2, diskcache) land in the target too, which as_stored.py puts at the END of
# sys.path, so the environment's own numpy wins.
#   nice -n 19 benchmarks/realmodels/setup_llamacpp.sh /tmp/posenc-llamacpp
#   POSENC_LLAMACPP_PATH=/tmp/posenc-llamacpp python benchmarks/realmodels/as_stored.py ...
# PYTHON (default: python) is the interpreter whose pip builds it; LLAMACPP_VERSION (default 0.3.36).
set -euo pipefail
target=${1:-/tmp/posenc-llamacpp}
export CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
"${PYTHON:-python}" -m pip install --no-cache-dir --target "$target" "llama-cpp-python==${LLAMACPP_VERSION:-0.3.36}"
