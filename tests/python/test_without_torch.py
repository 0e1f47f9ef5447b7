"""kiln.Program and kiln.Session work without PyTorch (DLPack arrays from numpy)."""

import os
import subprocess
import sys

import pytest

from conftest import FIXTURES

np = pytest.importorskip("numpy")

SCRIPT = r"""
import sys
sys.modules["torch"] = None  # any import of torch now fails
import numpy as np
sys.path.insert(0, {here!r})
from conftest import read_safetensors
import kiln

io = read_safetensors({io!r})
dtype, shape, raw = io["input.0"]
x = np.frombuffer(raw, dtype=np.float32).reshape(shape).copy()
program = kiln.Program.load({pt2!r}, cache_dir="")
session = kiln.Session(program)
(y,) = session.run([x])
y = np.from_dlpack(y)
_, oshape, oraw = io["output.0"]
want = np.frombuffer(oraw, dtype=np.float32).reshape(oshape)
assert y.shape == want.shape, (y.shape, want.shape)
err = float(np.max(np.abs(y - want)))
assert err < 1e-4, err
# Into memory the caller gives: written there, None returned; memory that does not fit is refused.
out = np.full(want.shape, np.nan, dtype=np.float32)
assert session.run([x], outputs=[out]) is None
assert float(np.max(np.abs(out - want))) < 1e-4
try:
    session.run([x], outputs=[np.zeros((1,), dtype=np.float32)])
except kiln.KilnError as e:
    assert e.code == "invalid_argument" and "memory for output 0" in str(e), str(e)
else:
    raise AssertionError("output memory of the wrong size was accepted")
try:
    session.run([x[:, :2]])
except kiln.KilnError as e:
    assert e.code == "invalid_argument", e.code
    assert "dimension 1 must be 3" in str(e), str(e)
else:
    raise AssertionError("a wrong shape was accepted")
print("ok", err)
"""


def test_program_and_session_without_torch():
    here = os.path.dirname(os.path.abspath(__file__))
    script = SCRIPT.format(here=here, io=os.path.join(FIXTURES, "resnet_basic.io.safetensors"),
                           pt2=os.path.join(FIXTURES, "resnet_basic.pt2"))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok")
