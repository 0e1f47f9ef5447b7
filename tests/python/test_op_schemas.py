"""src/ir/op_schemas.inc is what tools/op_schemas.py writes from the installed
PyTorch's operator registry: every ATen op of ops.def with the schema PyTorch
declares for it (a new op in ops.def without its schema fails here)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_recorded_op_schemas_are_pytorchs():
    pytest.importorskip("torch")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "op_schemas.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "is current" in p.stdout
