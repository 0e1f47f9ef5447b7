"""Shared helpers for the kiln Python tests.

KILN_TEST_DEVICES (default "cpu") lists the engine backends to test, e.g.
"cpu,cuda" on a GPU machine. KILN_CLI names the `kiln` CLI to check files
against (default: the one installed with the package, else build/kiln).
"""

import json
import os
import struct

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "torch2.11")
DEVICES = [d for d in os.environ.get("KILN_TEST_DEVICES", "cpu").split(",") if d]


def read_safetensors(path):
    """name -> (dtype string, shape, raw bytes), read with no library (an independent reader)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], entry["shape"], data[base + begin:base + end])
    return out


def cli():
    path = os.environ.get("KILN_CLI")
    if path:
        return path
    import kiln

    return kiln.cli_path() or os.path.join(ROOT, "build", "kiln")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
