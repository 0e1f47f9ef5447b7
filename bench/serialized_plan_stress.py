#!/usr/bin/env python3
"""Runs 16-bit CUDA programs loaded from serialized plans many times in a row,
one process per run, and counts crashes: the workflow `kiln check` a second
time (engines from the engine cache) and `kiln compile -o X.kiln` then
`kiln check X.kiln`, for convolutional models with grouped and depthwise
convolutions, in fp16 and bf16.

Models (random weights, `torch.manual_seed(0)`, BatchNorm statistics
recalibrated on four random batches of 8 so that outputs do not vanish, eval,
float32, input 1x3x224x224 from `torch.Generator().manual_seed(0)`; the io
file holds the input and PyTorch's float32 output):

- shufflenet_v2: torchvision.models.shufflenet_v2_x1_0()
- mnasnet: torchvision.models.mnasnet1_0()
- convnext: torchvision.models.convnext_tiny() (depthwise 7x7)

For each model and precision: one `kiln check` fills a fresh engine cache and
one `kiln compile` writes the .kiln; then RUNS runs of each of
`kiln check X.pt2 --cache-dir D` (cached engines) and `kiln check X.kiln`.
A run that dies on a signal, or exits with something other than 0 (PASS) or 1
(a mismatch), counts as a crash; mismatches are counted apart. Outputs are
compared at rtol = atol = 0.05 (16-bit engines against PyTorch's float32);
beside each row, PyTorch's own error in that precision (the model cast to it,
on the GPU) against the same float32 output.

    python3 bench/serialized_plan_stress.py --kiln build/kiln --workdir /tmp/stress --runs 50 --jobs 4
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import os
import subprocess
import time

import torch
import torchvision
from safetensors.torch import save_file

MODELS = {
    "shufflenet_v2": lambda: torchvision.models.shufflenet_v2_x1_0(),
    "mnasnet": lambda: torchvision.models.mnasnet1_0(),
    "convnext": lambda: torchvision.models.convnext_tiny(),
}


def export(name: str, workdir: str) -> tuple[str, str, dict[str, float]]:
    """The .pt2 and io file, and PyTorch's own error in float16 and bfloat16
    (the model cast to the dtype, on the GPU) against its float32 output."""
    pt2, io = os.path.join(workdir, name + ".pt2"), os.path.join(workdir, name + ".io.safetensors")
    torch.manual_seed(0)
    model = MODELS[name]()
    # BatchNorm statistics at their defaults shrink random activations layer
    # by layer until the outputs vanish (and any check passes): recalibrate
    # them on random batches first.
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(8, 3, 224, 224))
    model.eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = model(x)
    torch_err = {}
    for prec, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        with torch.no_grad():
            y16 = copy.deepcopy(model).to("cuda", dtype)(x.to("cuda", dtype)).float().cpu()
        torch_err[prec] = (y16 - y).abs().max().item()
    print(f"{name}: largest |output| {y.abs().max().item():.3g}; PyTorch's own max abs err "
          f"fp16 {torch_err['fp16']:.2g}, bf16 {torch_err['bf16']:.2g}", flush=True)
    if not (os.path.exists(pt2) and os.path.exists(io)):
        torch.export.save(torch.export.export(model, (x,)), pt2)
        save_file({"input.0": x.contiguous(), "output.0": y.contiguous()}, io)
    return pt2, io, torch_err


def run(cmd: list[str]) -> tuple[int, str]:
    p = subprocess.run(cmd, capture_output=True, text=True)
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=4, help="runs at a time (one GPU, several processes)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--precisions", default="fp16,bf16")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    tol = ["--rtol", "0.05", "--atol", "0.05"]
    rows = []
    crash_lines: list[str] = []
    for name in args.models.split(","):
        pt2, io, torch_err = export(name, args.workdir)
        for prec in args.precisions.split(","):
            cache = os.path.join(args.workdir, f"cache-{name}-{prec}")
            subprocess.run(["rm", "-rf", cache])
            program = os.path.join(args.workdir, f"{name}-{prec}.kiln")
            common = ["--device", "cuda", "--precision", prec]
            t0 = time.time()
            first = run([args.kiln, "check", pt2, io, *common, "--cache-dir", cache, *tol])
            comp = run([args.kiln, "compile", pt2, "-o", program, *common, "--no-cache"])
            build_s = time.time() - t0
            for how, cmd in (("cached", [args.kiln, "check", pt2, io, *common, "--cache-dir", cache, *tol]),
                             (".kiln", [args.kiln, "check", program, io, *tol])):
                t0 = time.time()
                with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
                    results = list(pool.map(lambda _: run(cmd), range(args.runs)))
                codes = collections.Counter(rc for rc, _ in results)
                crashes = [(rc, line) for rc, line in results if rc not in (0, 1)]
                for rc, line in crashes[:3]:
                    crash_lines.append(f"{name} {prec} {how}: exit {rc}: {line}")
                last = next((line for rc, line in results if rc in (0, 1)), "")
                rows.append((name, prec, how, args.runs, codes.get(0, 0), codes.get(1, 0), len(crashes),
                             time.time() - t0, last, torch_err[prec]))
            print(f"{name} {prec}: first check exit {first[0]} ({first[1]}); compile exit {comp[0]}; "
                  f"{build_s:.1f} s", flush=True)
    print("\n| model | precision | engines from | runs | pass | mismatch | crash | seconds | last line | "
          "PyTorch's own max abs err |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {r[7]:.0f} | {r[8]} | {r[9]:.2g} |")
    for line in crash_lines:
        print(line)
    return 1 if any(r[6] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
