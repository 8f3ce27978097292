#!/usr/bin/env bash
# Build llama-cpp-python (a benchmark-only dependency of as_stored.py) from source into its own folder.
# It compiles llama.cpp: minutes on 2 cores. AMX is switched off: its kernel crashed on the first forward
# pass on the AMX machine this project was first measured on (issue 28).
#   benchmarks/realmodels/setup_llamacpp.sh /tmp/i28-llamacpp
#   POSENC_LLAMACPP_PATH=/tmp/i28-llamacpp python benchmarks/realmodels/as_stored.py ...
set -euo pipefail
target=${1:-/tmp/posenc-llamacpp}
export CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
export CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
python -m pip install --no-cache-dir --target "$target" "llama-cpp-python==${LLAMACPP_VERSION:-0.3.16}"
