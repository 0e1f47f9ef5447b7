#!/usr/bin/env python3
"""Runs PyTorch's own op samples through kiln: every float32 sample of
PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations
.op_db), up to --samples per op, exported as a one-op module with
torch.export.export (the default, non-strict) and again after
run_decompositions(), and checked with `kiln check` against the outputs eager
PyTorch computed. Writes a table by op: pass, mismatch, refused (with kiln's
reason), crash; samples that PyTorch itself cannot export or save are
counted apart (they are not kiln's).

    python3 tools/opinfo_sweep.py --kiln build/kiln --out tests/fixtures/OPINFO.md [--ops add,mul] [--samples 3]

Needs the installed PyTorch and `expecttest` (which torch's testing package
imports). Each sample's tensor inputs are the module's inputs; every other
argument is baked into the module (export specializes on it). kiln checks at
rtol 1e-4, atol 1e-5 (integers and bools exactly), its defaults.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


def one_op_module(op, sample):
    """A module running `op` on `sample`, its tensors as inputs; None when the sample has no tensor."""
    flat, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
    if not positions:
        return None, None

    class OneOp(torch.nn.Module):
        def forward(self, *tensors):
            args = list(flat)
            for p, t in zip(positions, tensors):
                args[p] = t
            inp, a, kw = tree_unflatten(args, spec)
            return op.op(inp, *a, **kw)

    return OneOp(), tuple(flat[p].detach().clone() for p in positions)


# Ops whose outputs are uninitialized memory or random draws (the low-rank
# factorizations project onto a random Gaussian basis): nothing to compare.
UNCOMPARABLE = re.compile(r"(^|\.)(new_)?empty(_like|_strided|_permuted)?$|^(bernoulli|normal|uniform|multinomial|"
                          r"exponential|cauchy|geometric|log_normal|rand.*|.*dropout.*|pca_lowrank|svd_lowrank)(\.|$)")

# Ops whose float32 result is the float64 computation with more rounding
# (no dtype-dependent threshold, unlike pinv or matrix_rank): where PyTorch's
# own float32 result is off its float64 result beyond kiln's tolerance (an
# ill-conditioned sample), the sample is checked against the float64 result,
# rounded to float32, and counted apart in the table.
FLOAT64_REFERENCE = re.compile(r"^(matrix_exp|det|logdet|cholesky|cholesky_solve|cholesky_inverse|lu_solve|ormqr|"
                               r"linalg\.(matrix_exp|inv|inv_ex|solve|solve_ex|det|slogdet|cond|tensorinv|tensorsolve|"
                               r"cholesky|cholesky_ex|svdvals|eigvalsh|matrix_power|multi_dot|lu_solve|"
                               r"solve_triangular|ldl_solve|householder_product|matrix_norm|norm))$")


def float64_reference(mod, inputs, outs):
    """PyTorch's float64 outputs rounded to the float32 ones' dtypes, where the float32 ones are off them beyond
    kiln's tolerance; None otherwise."""
    try:
        with torch.no_grad():
            wide, _ = tree_flatten(mod(*[t.double() if t.is_floating_point() else t.clone() for t in inputs]))
    except Exception:
        return None
    if len(wide) != len(outs) or any(a.shape != b.shape for a, b in zip(outs, wide)):
        return None
    off = any(a.is_floating_point() and not torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-5, equal_nan=True)
              for a, b in zip(outs, wide))
    return [b.to(a.dtype) if a.is_floating_point() else a for a, b in zip(outs, wide)] if off else None


SAVABLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
           torch.int8, torch.uint8, torch.bool}


def prepare(op, index, sample, workdir):
    """Exports one sample in both dialects and writes its io file; (paths, None) or (None, why PyTorch could not)."""
    from safetensors.torch import save_file

    if UNCOMPARABLE.search(op.name):
        return None, "uninitialized or random outputs (nothing to compare)"
    flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    if any(isinstance(a, torch.Tensor) and a.layout != torch.strided for a in flat):
        return None, "a sparse or otherwise non-strided input"
    mod, inputs = one_op_module(op, sample)
    if mod is None:
        return None, "no tensor input"
    if any(t.dtype not in SAVABLE for t in inputs):
        return None, "an input dtype safetensors or kiln does not hold"
    try:
        with torch.no_grad():
            out = mod(*[t.clone() for t in inputs])
        outs, _ = tree_flatten(out)
        if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            return None, "a non-tensor output"
        if any(o.dtype not in SAVABLE for o in outs):
            return None, "an output dtype safetensors or kiln does not hold"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(mod, inputs)
    except Exception as e:  # PyTorch's limit, not kiln's
        return None, f"torch.export: {type(e).__name__}"
    try:
        # The exported program itself must run on the sample (its run-time
        # assertions, drawn from PyTorch's meta functions, can be wrong).
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep.module()(*[t.clone() for t in inputs])
    except Exception as e:
        return None, f"running the export in PyTorch: {type(e).__name__}"
    wide = float64_reference(mod, inputs, outs) if FLOAT64_REFERENCE.match(op.name) else None
    if wide is not None:
        outs = wide
    base = os.path.join(workdir, f"{re.sub(r'[^A-Za-z0-9_]', '_', op.name)}_{op.variant_test_name}_{index}")
    paths = {"io": base + ".io.safetensors", "training": base + ".pt2", "float64": wide is not None}
    tensors = {f"input.{i}": t.contiguous() for i, t in enumerate(inputs)}
    tensors.update({f"output.{j}": o.detach().contiguous() for j, o in enumerate(outs)})
    try:
        save_file(tensors, paths["io"])
        torch.export.save(ep, paths["training"])
    except Exception as e:
        return None, f"saving: {type(e).__name__}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.save(ep.run_decompositions(), base + ".aten.pt2")
        paths["aten"] = base + ".aten.pt2"
    except Exception as e:
        paths["aten_error"] = f"run_decompositions: {type(e).__name__}"
    return paths, None


def check(kiln, model, io):
    """'pass', 'mismatch', 'crash' or 'refused', and kiln's last line."""
    try:
        p = subprocess.run([kiln, "check", model, io, "--device", "cpu", "--no-cache"], capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        return "crash", "timed out after 120 s"
    lines = (p.stdout + p.stderr).strip().splitlines()
    last = lines[-1] if lines else ""
    if p.returncode == 0:
        return "pass", last
    if p.returncode == 1:
        return "mismatch", last
    if p.returncode == 2:
        return "refused", last
    return "crash", f"exit {p.returncode}: {last}"


def reason_of(line: str) -> str:
    """A refusal's reason without the sample's file names and sizes, for grouping."""
    line = re.sub(r"^kiln: error: ", "", line)
    line = re.sub(r"\S+\.pt2: ", "", line)
    line = re.sub(r"\S+/models/model\.json: ", "", line)
    line = re.sub(r"\[[0-9, ]*\]", "[...]", line)
    return line[:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True, help="the markdown table to write")
    ap.add_argument("--samples", type=int, default=3, help="samples per op at most")
    ap.add_argument("--ops", help="comma-separated op names (default: every op with float32 samples)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--workdir", help="keep the exported samples here (default: a temporary folder)")
    args = ap.parse_args()

    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(args.ops.split(",")) if args.ops else None
    workdir = args.workdir or tempfile.mkdtemp(prefix="kiln_opinfo_")
    os.makedirs(workdir, exist_ok=True)
    torch.manual_seed(0)
    t0 = time.time()
    jobs = []  # (op name, dialect, model, io)
    not_kiln = collections.Counter()  # why PyTorch could not give a sample
    per_op = collections.defaultdict(lambda: collections.Counter())
    float64_refs = collections.Counter()  # samples checked against PyTorch's float64 result
    for op in op_db:
        if wanted and op.name not in wanted:
            continue
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[: args.samples]
        except Exception as e:
            not_kiln[f"sample_inputs: {type(e).__name__}"] += 1
            continue
        for i, sample in enumerate(samples):
            try:
                paths, why = prepare(op, i, sample, workdir)
            except Exception as e:  # anything else PyTorch raises while building the sample
                paths, why = None, f"preparing: {type(e).__name__}"
            if paths is None:
                not_kiln[why] += 1
                per_op[name]["not exported"] += 1
                continue
            if paths["float64"]:
                float64_refs[name] += 1
            jobs.append((name, "training", paths["training"], paths["io"]))
            if "aten" in paths:
                jobs.append((name, "aten", paths["aten"], paths["io"]))
            else:
                not_kiln[paths["aten_error"]] += 1
    print(f"{len(jobs)} exported samples in {time.time() - t0:.0f} s; checking with {args.jobs} jobs", flush=True)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda j: check(args.kiln, j[2], j[3]), jobs))
    totals = {d: collections.Counter() for d in ("training", "aten")}
    reasons = {d: collections.Counter() for d in ("training", "aten")}
    for (name, dialect, model, io), (outcome, line) in zip(jobs, results):
        totals[dialect][outcome] += 1
        per_op[name][f"{dialect} {outcome}"] += 1
        if outcome != "pass":
            reasons[dialect][(name, outcome, reason_of(line))] += 1

    def pct(c):
        n = sum(c.values())
        return f"{c['pass']} of {n} ({100.0 * c['pass'] / n:.0f}%)" if n else "none"

    lines = [
        "# PyTorch's OpInfo samples through kiln",
        "",
        f"Generated by `python3 tools/opinfo_sweep.py --kiln build/kiln --out {args.out} --samples {args.samples}` "
        f"with torch {torch.__version__} on the CPU backend; do not edit.",
        "",
        "| dialect | pass | mismatch | refused | crash |",
        "|---|---|---|---|---|",
    ]
    for d in ("training", "aten"):
        c = totals[d]
        lines.append(f"| {d} | {pct(c)} | {c['mismatch']} | {c['refused']} | {c['crash']} |")
    lines += ["", "Samples PyTorch itself could not export, save or decompose (not counted above):", ""]
    lines += [f"- {why}: {n}" for why, n in not_kiln.most_common()]
    if float64_refs:
        lines += ["", "Samples checked against PyTorch's float64 result, rounded to float32, because PyTorch's own "
                  "float32 result is off it beyond kiln's tolerance (ill-conditioned inputs; kiln computes these ops "
                  "in float64):", ""]
        lines += [f"- `{name}`: {n}" for name, n in sorted(float64_refs.items())]
    lines += ["", "## By op", "",
              "| op | training: pass / mismatch / refused / crash | aten: pass / mismatch / refused / crash | "
              "not exported by PyTorch |",
              "|---|---|---|---|"]
    for name in sorted(per_op):
        c = per_op[name]
        cells = [" / ".join(str(c[f"{d} {o}"]) for o in ("pass", "mismatch", "refused", "crash"))
                 for d in ("training", "aten")]
        lines.append(f"| `{name}` | {cells[0]} | {cells[1]} | {c['not exported']} |")
    for d in ("training", "aten"):
        lines += ["", f"## Not passing ({d} dialect): op, outcome, kiln's last line", ""]
        for (name, outcome, why), n in sorted(reasons[d].items()):
            lines.append(f"- `{name}` {outcome} x{n}: {why}")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 1 if totals["training"]["crash"] or totals["aten"]["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
