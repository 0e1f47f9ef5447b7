"""A fast subset of the OpInfo sweep (tools/opinfo_sweep.py): PyTorch's own
samples of common ops, exported in both dialects and checked with `kiln check`
against eager PyTorch. None may crash kiln or give a wrong answer; refusals
are counted, not failed (the full table is docs/opinfo.md)."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, cli

OPS = ["add", "mul", "sub", "div", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "relu",
       "nn.functional.gelu", "nn.functional.silu", "softmax", "log_softmax", "matmul", "mm", "bmm", "sum", "mean",
       "amax", "where", "cat", "stack", "transpose", "permute", "reshape", "view", "unsqueeze", "squeeze",
       "nn.functional.linear", "nn.functional.layer_norm", "nn.functional.embedding", "clamp", "pow",
       "nn.functional.pad", "logsumexp", "flip", "new_empty", "minimum", "maximum", "floor", "round", "sign", "log1p",
       "expm1", "isnan", "clamp_min", "clamp_max", "fmod", "remainder", "argmin", "nn.functional.leaky_relu",
       "nn.functional.elu", "mT", "broadcast_to", "true_divide", "masked.cumsum",
       "square", "linalg.vector_norm", "nn.functional.normalize", "atan2", "logaddexp", "fmax", "lgamma", "acosh",
       "logical_xor", "all", "prod", "signbit", "view_copy", "max", "round", "addcmul", "lerp",
       "nn.functional.softplus", "nn.functional.mish", "nn.functional.logsigmoid", "xlogy", "nan_to_num",
       "nn.functional.glu", "floor_divide", "view_as", "special.bessel_j0", "special.i0e", "special.ndtri",
       "polygamma.polygamma_n_2", "special.chebyshev_polynomial_t", "scatter_reduce.amax", "scatter_add",
       "index_add", "cumprod", "diagonal", "trace", "masked_select", "nn.functional.mse_loss",
       "nn.functional.cross_entropy", "nn.functional.interpolate.bilinear", "nn.functional.interpolate.nearest",
       "roll", "einsum", "sort", "topk", "searchsorted", "nn.functional.unfold", "cdist", "isclose",
       "tensordot", "kron", "block_diag", "diagonal_scatter", "put", "masked_scatter", "nn.functional.pdist",
       "cumulative_trapezoid", "nn.functional.max_pool1d", "linalg.inv", "linalg.solve", "linalg.det",
       "linalg.svdvals", "linalg.eigvalsh", "linalg.cholesky", "linalg.pinv", "matrix_exp",
       "nn.functional.batch_norm", "nn.functional.conv3d", "nn.functional.max_pool3d", "nn.functional.grid_sample",
       "nn.functional.embedding_bag", "_chunk_cat", "gradient", "_segment_reduce",
       "nn.functional.multilabel_margin_loss"]


def test_common_ops_never_crash_kiln_or_give_a_wrong_answer(tmp_path):
    pytest.importorskip("expecttest")
    out = tmp_path / "opinfo.md"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "opinfo_sweep.py"), "--kiln", cli(), "--out",
                        str(out), "--samples", "2", "--jobs", "2", "--ops", ",".join(OPS)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    table = out.read_text()
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^\| (training|aten) \| (\d+) of (\d+) \(\d+%\) \| (\d+) \| (\d+) \| (\d+) \|$", table, re.M)}
    assert set(rows) == {"training", "aten"}, table[:2000]
    for dialect, (passed, total, mismatch, refused, crash) in rows.items():
        assert int(mismatch) == 0 and int(crash) == 0, f"{dialect}:\n{table}"
        assert int(passed) > 0 and int(total) >= 40, f"{dialect}: {passed} of {total}"
    # Uninitialized outputs are not compared.
    assert "uninitialized or random outputs" in table
