"""posenc.malloc: with the mmap threshold pinned, freed large buffers leave the process (glibc only)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posenc.malloc import pin_mmap_threshold

# A 16-MiB buffer freed once raises glibc's threshold; each later one comes from the heap, and a small block
# allocated after it keeps the freed space resident. Prints how much resident memory 8 such freed buffers left.
SCRIPT = textwrap.dedent('''
    import sys
    import torch
    from posenc.malloc import pin_mmap_threshold

    def rss_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

    pinned = pin_mmap_threshold()
    n = int(sys.argv[1])
    a = torch.ones(n); del a
    keep, base = [], rss_mib()
    for _ in range(8):
        b = torch.ones(n)
        keep.append(torch.ones(16))
        del b
    print(pinned, rss_mib() - base)
''')


def _grown(threshold: str, floats: int) -> tuple[bool, float]:
    env = {**os.environ, "POSENC_MMAP_THRESHOLD": threshold,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(floats)], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    return out[0] == "True", float(out[1])


@pytest.mark.skipif(not Path("/proc/self/statm").exists() or sys.platform != "linux", reason="needs Linux /proc")
def test_freed_large_buffers_leave_the_process_once_pinned(seed):
    floats = (3 + seed % 5) << 20  # 12–28 MiB buffers: under glibc's 32-MiB cap on the raised threshold
    took, pinned = _grown(str(1 << 20), floats)
    if not took:
        pytest.skip("not glibc: mallopt's threshold is not available here")
    _, plain = _grown("0", floats)
    size = floats * 4 / 2**20
    if plain < 4 * size:
        pytest.skip(f"this allocator returned the freed buffers by itself ({plain:.0f} MiB kept of 8 × {size:.0f})")
    assert pinned < size, (pinned, plain)  # with the threshold pinned no freed buffer stays resident


def test_the_environment_sets_or_refuses_the_threshold(monkeypatch):
    monkeypatch.setenv("POSENC_MMAP_THRESHOLD", "0")
    assert pin_mmap_threshold() is False  # 0: glibc left as it is
    monkeypatch.setenv("POSENC_MMAP_THRESHOLD", "lots")
    with pytest.raises(ValueError, match="POSENC_MMAP_THRESHOLD must be a size in bytes"):
        pin_mmap_threshold()
    with pytest.raises(ValueError, match=">= 0 bytes"):
        pin_mmap_threshold(-1)
