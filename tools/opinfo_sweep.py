#!/usr/bin/env python3
"""Runs PyTorch's own op samples through kiln: every float32 sample of
PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations
.op_db), up to --samples per op, exported as a one-op module with
torch.export.export (the default, non-strict) and again after
run_decompositions(), and checked with `kiln check` against the outputs eager
PyTorch computed. Writes a table by op: pass, mismatch, refused (with kiln's
reason), crash; samples that PyTorch itself cannot export or save are
counted apart (they are not kiln's).

    python3 tools/opinfo_sweep.py --kiln build/kiln --out docs/opinfo.md --workdir DIR [--ops add,mul] [--samples 3]
    python3 tools/opinfo_sweep.py --kiln build/kiln --out docs/opinfo.md --workdir DIR --device cuda

The second command (on a GPU machine, from the workdir the first one left:
nothing is exported again) adds the CUDA column: of the samples that pass on
the CPU backend, those whose ops all run in CUDA engines (`--min-block-size 1`;
ops with data-dependent output sizes run on the device between engines and
count as in) and match PyTorch there. `--partition-only` asks only the first
half, which needs no GPU. A later CPU run in the same workdir keeps the CUDA
results it finds there.

Needs the installed PyTorch and `expecttest` (which torch's testing package
imports). Each sample's tensor inputs are the module's inputs; every other
argument is baked into the module (export specializes on it). kiln checks at
rtol 1e-4, atol 1e-5 (integers and bools exactly), its defaults.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
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


def check(kiln, model, io, device="cpu"):
    """'pass', 'mismatch', 'crash' or 'refused', and kiln's last line. On CUDA every segment may be an engine
    (--min-block-size 1): a one-op module is what a model's segment of that op would be."""
    extra = ["--min-block-size", "1"] if device == "cuda" else []
    try:
        p = subprocess.run([kiln, "check", model, io, "--device", device, "--no-cache"] + extra, capture_output=True,
                           text=True, timeout=120)
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


# Fallback nodes that compute nothing on the host: Python scalar arithmetic
# on sizes and run-time checks of scalars.
NOT_COMPUTE = re.compile(r"^(_operator\.|aten\._assert|aten\.sym_|aten\._local_scalar_dense)")


def host_fallbacks(kiln, model):
    """The compute nodes that `kiln inspect --partition --device cuda --min-block-size 1` leaves on the host, as
    'op: reason' lines; ops the runtime runs on the device between engines (data-dependent output sizes) are
    not counted. None when inspect fails. Needs no GPU: the partition is the same on every machine."""
    try:
        p = subprocess.run([kiln, "inspect", model, "--partition", "--device", "cuda", "--min-block-size", "1",
                            "--no-cache"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    if p.returncode != 0:
        return None
    on_device = set(re.findall(r"from (\S+) '[^']*' \(segment \d+\), which runs on the device", p.stdout))
    found = []
    for m in re.finditer(r"^    \S+ \((\S+)\): (.*)$", p.stdout, re.M):
        op, why = m.groups()
        if op in on_device or NOT_COMPUTE.match(op) or why.startswith("engine segment of 0 compute nodes"):
            continue  # runs on the device, or computes nothing (a view of its input)
        found.append(f"{op}: {why}")
    return found


def check_cuda(kiln, model, io, partition_only):
    """The CUDA column's outcome: 'pass' (its ops in CUDA engines and matching), 'falls back' (a compute node on
    the host), or check's outcome; with kiln's line or the fallback reasons."""
    fallbacks = host_fallbacks(kiln, model)
    if fallbacks is None:
        return "crash", "kiln inspect --partition failed"
    if fallbacks:
        return "falls back", "; ".join(sorted(set(fallbacks)))
    if partition_only:
        return "pass", "in CUDA engines (partition only, not run)"
    return check(kiln, model, io, "cuda")


def reason_of(line: str) -> str:
    """A refusal's reason without the sample's file names and sizes, for grouping."""
    line = re.sub(r"^kiln: error: ", "", line)
    line = re.sub(r"\S+\.pt2: ", "", line)
    line = re.sub(r"\S+\.io\.safetensors: ", "", line)
    line = re.sub(r"\S+/models/model\.json: ", "", line)
    line = re.sub(r"\[[0-9, ]*\]", "[...]", line)
    return line[:160]


def export_samples(args):
    """Exports every wanted sample into args.workdir; the manifest: the jobs and what PyTorch could not give."""
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(args.ops.split(",")) if args.ops else None
    torch.manual_seed(0)
    t0 = time.time()
    jobs = []  # [op name, dialect, model, io]
    not_kiln = collections.Counter()  # why PyTorch could not give a sample
    not_exported = collections.Counter()  # per op
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
                paths, why = prepare(op, i, sample, args.workdir)
            except Exception as e:  # anything else PyTorch raises while building the sample
                paths, why = None, f"preparing: {type(e).__name__}"
            if paths is None:
                not_kiln[why] += 1
                not_exported[name] += 1
                continue
            if paths["float64"]:
                float64_refs[name] += 1
            rel = lambda f: os.path.relpath(f, args.workdir)
            jobs.append([name, "training", rel(paths["training"]), rel(paths["io"])])
            if "aten" in paths:
                jobs.append([name, "aten", rel(paths["aten"]), rel(paths["io"])])
            else:
                not_kiln[paths["aten_error"]] += 1
    print(f"{len(jobs)} exported samples in {time.time() - t0:.0f} s", flush=True)
    manifest = {"torch": torch.__version__, "samples": args.samples, "jobs": jobs, "not_kiln": dict(not_kiln),
                "not_exported": dict(not_exported), "float64_refs": dict(float64_refs)}
    with open(os.path.join(args.workdir, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return manifest


def run_checks(args, manifest):
    """Checks every job on args.device; writes and returns results-<device>.json: [outcome, line] per job."""
    at = lambda f: os.path.join(args.workdir, f)
    t0 = time.time()
    if args.device == "cuda":
        one = lambda j: check_cuda(args.kiln, at(j[2]), at(j[3]), args.partition_only)
    else:
        one = lambda j: check(args.kiln, at(j[2]), at(j[3]))
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = [list(r) for r in pool.map(one, manifest["jobs"])]
    print(f"checked {len(results)} samples on {args.device} in {time.time() - t0:.0f} s", flush=True)
    with open(at(f"results-{args.device}.json"), "w") as f:
        json.dump(results, f)
    return results


DIALECTS = ("training", "aten")
OUTCOMES = ("pass", "mismatch", "refused", "crash")
CUDA_OUTCOMES = ("pass", "falls back", "mismatch", "refused", "crash")


def report(args, manifest, cpu, cuda):
    """The markdown table: the CPU backend's outcomes and, where a CUDA run is in the workdir, the CUDA column
    (counted over the samples that pass on the CPU backend)."""
    jobs = manifest["jobs"]
    totals = {d: collections.Counter() for d in DIALECTS}
    cuda_totals = {d: collections.Counter() for d in DIALECTS}
    reasons = {d: collections.Counter() for d in DIALECTS}
    cuda_reasons = {d: collections.Counter() for d in DIALECTS}
    per_op = collections.defaultdict(collections.Counter)
    for name, n in manifest["not_exported"].items():
        per_op[name]["not exported"] += n
    for k, (name, dialect, _, _) in enumerate(jobs):
        outcome, line = cpu[k]
        totals[dialect][outcome] += 1
        per_op[name][f"{dialect} {outcome}"] += 1
        if outcome != "pass":
            reasons[dialect][(name, outcome, reason_of(line))] += 1
        if cuda is None or outcome != "pass":
            continue
        outcome, line = cuda[k]
        cuda_totals[dialect][outcome] += 1
        per_op[name][f"cuda {outcome}"] += 1
        if outcome != "pass":
            cuda_reasons[dialect][(name, outcome, reason_of(line))] += 1

    def pct(c):
        n = sum(c.values())
        return f"{c['pass']} of {n} ({100.0 * c['pass'] / n:.0f}%)" if n else "none"

    command = (f"python3 tools/opinfo_sweep.py --kiln build/kiln --out {args.out} --samples {manifest['samples']} "
               f"--workdir DIR")
    lines = [
        "# PyTorch's OpInfo samples through kiln",
        "",
        f"Generated by `{command}` with torch {manifest['torch']} on the CPU backend"
        + (f", then `{command} --device cuda{'' if os.path.exists(os.path.join(args.workdir, 'cuda-device.txt')) else ' --partition-only'}` on {cuda_machine(args)}"
           if cuda is not None else "")
        + "; do not edit.",
        "",
        "| dialect | pass | mismatch | refused | crash |",
        "|---|---|---|---|---|",
    ]
    for d in DIALECTS:
        c = totals[d]
        lines.append(f"| {d} | {pct(c)} | {c['mismatch']} | {c['refused']} | {c['crash']} |")
    if cuda is not None:
        partition_only = not os.path.exists(os.path.join(args.workdir, "cuda-device.txt"))
        how = ("partition only: the ops of the sample in CUDA engines, not run" if partition_only else
               "its ops in CUDA engines (`--min-block-size 1`, no compute node on the host) and matching PyTorch")
        lines += ["", f"On CUDA, of the samples that pass on the CPU backend ({how}):", "",
                  "| dialect | pass | falls back | mismatch | refused | crash |", "|---|---|---|---|---|---|"]
        for d in DIALECTS:
            c = cuda_totals[d]
            lines.append(f"| {d} | {pct(c)} | {c['falls back']} | {c['mismatch']} | {c['refused']} | {c['crash']} |")
    lines += ["", "Samples PyTorch itself could not export, save or decompose (not counted above):", ""]
    lines += [f"- {why}: {n}" for why, n in collections.Counter(manifest["not_kiln"]).most_common()]
    if manifest["float64_refs"]:
        lines += ["", "Samples checked against PyTorch's float64 result, rounded to float32, because PyTorch's own "
                  "float32 result is off it beyond kiln's tolerance (ill-conditioned inputs; kiln computes these ops "
                  "in float64):", ""]
        lines += [f"- `{name}`: {n}" for name, n in sorted(manifest["float64_refs"].items())]
    head = "| op | training: pass / mismatch / refused / crash | aten: pass / mismatch / refused / crash |"
    rule = "|---|---|---|"
    if cuda is not None:
        head += " cuda, both dialects: pass / falls back / mismatch / refused / crash |"
        rule += "---|"
    lines += ["", "## By op", "", head + " not exported by PyTorch |", rule + "---|"]
    for name in sorted(per_op):
        c = per_op[name]
        cells = [" / ".join(str(c[f"{d} {o}"]) for o in OUTCOMES) for d in DIALECTS]
        if cuda is not None:
            cells.append(" / ".join(str(c[f"cuda {o}"]) for o in CUDA_OUTCOMES))
        lines.append(f"| `{name}` | {' | '.join(cells)} | {c['not exported']} |")
    for d in DIALECTS:
        lines += ["", f"## Not passing ({d} dialect): op, outcome, kiln's last line", ""]
        for (name, outcome, why), n in sorted(reasons[d].items()):
            lines.append(f"- `{name}` {outcome} x{n}: {why}")
    if cuda is not None:
        for d in DIALECTS:
            lines += ["", f"## Not passing on CUDA ({d} dialect): op, outcome, kiln's last line or the host fallbacks",
                      ""]
            for (name, outcome, why), n in sorted(cuda_reasons[d].items()):
                lines.append(f"- `{name}` {outcome} x{n}: {why}")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:20]))
    crashed = any(totals[d]["crash"] or cuda_totals[d]["crash"] for d in DIALECTS)
    return 1 if crashed else 0


def cuda_machine(args):
    """The GPU the CUDA column was run on, as recorded by that run."""
    try:
        with open(os.path.join(args.workdir, "cuda-device.txt")) as f:
            return f.read().strip() or "a GPU"
    except OSError:
        return "no GPU (partition only)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True, help="the markdown table to write")
    ap.add_argument("--samples", type=int, default=3, help="samples per op at most")
    ap.add_argument("--ops", help="comma-separated op names (default: every op with float32 samples)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--workdir", help="keep the exported samples, the manifest and each device's results here "
                    "(default: a temporary folder); with a manifest already there nothing is exported again")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="check on this backend; cuda adds the CUDA column to the table (needs a CPU run first)")
    ap.add_argument("--partition-only", action="store_true",
                    help="with --device cuda: only ask which ops would leave CUDA engines (needs no GPU)")
    args = ap.parse_args()

    args.workdir = args.workdir or tempfile.mkdtemp(prefix="kiln_opinfo_")
    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    else:
        manifest = export_samples(args)
    at = lambda f: os.path.join(args.workdir, f)
    if args.device == "cpu":
        cpu = run_checks(args, manifest)
    else:
        with open(at("results-cpu.json")) as f:
            cpu = json.load(f)
    cuda = None
    if args.device == "cuda":
        if not args.partition_only:
            p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True)
            with open(at("cuda-device.txt"), "w") as f:
                f.write(p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else "")
        elif os.path.exists(at("cuda-device.txt")):
            os.remove(at("cuda-device.txt"))
        cuda = run_checks(args, manifest)
    elif os.path.exists(at("results-cuda.json")):
        with open(at("results-cuda.json")) as f:
            cuda = json.load(f)
    return report(args, manifest, cpu, cuda)


if __name__ == "__main__":
    sys.exit(main())
