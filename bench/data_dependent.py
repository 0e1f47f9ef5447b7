#!/usr/bin/env python3
"""Programs with a data-dependent op or a fallback op between CUDA engines:
what a call costs end to end, from host tensors and from CUDA tensors, beside
the same program on the CPU (or without the fallback op) and PyTorch on the
GPU, in one run on one GPU.

Cases:

- nonzero_middle (tests/fixtures/torch2.11/nonzero_middle.pt2 and its
  recorded input): Linear/ReLU/Linear, a row score, idx = nonzero(score > 0)
  selecting rows (7 of 12), then Linear/tanh/ReLU/Linear. `kiln bench
  --device cuda` (end to end from host tensors, and from CUDA tensors with
  every call waited for); with --kiln-before, the same with an earlier kiln
  binary (one that ran nonzero and everything after it on the host);
  `kiln bench --device cpu`; PyTorch eager on the GPU (the exported
  program's module moved to CUDA, wall clock per call with a synchronize, as
  nonzero synchronizes anyway).
- BERT-base fp16 at length 128 (bench/dynamic_shapes.py's model), with one op
  kind forced out of the engines (`--fallback-ops aten.gelu.default`: one
  GELU per layer, 12 fallback nodes between 13 engines) beside the same
  program without it, and PyTorch eager; the values that cross per call from
  `kiln inspect --partition`.

    python3 bench/data_dependent.py --kiln build/kiln --out bench/results [--kiln-before OLD/kiln]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dynamic_shapes import build_model, ids_of, run, save_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "torch2.11"


def log(msg: str) -> None:
    print(f"[data-dependent] {msg}", flush=True)


def bench(kiln: str, model: Path, inputs: Path, iters: int, extra: list[str]) -> dict:
    out = inputs.with_name(inputs.stem + f".{abs(hash(tuple(extra + [kiln, str(model)])))}.json")
    out.unlink(missing_ok=True)
    p = run([kiln, "bench", str(model), "--inputs", str(inputs), "--iters", str(iters), "--warmup", "10",
             "--json", str(out)] + extra)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    r = json.loads(out.read_text())
    return {"host_tensors_ms": r.get("end_to_end_median_ms"), "device_tensors_ms": r.get("device_tensors_median_ms"),
            "engines": r.get("engines"), "fallback_nodes": r.get("fallback_nodes"), "build_s": r.get("build_s")}


def crossings(kiln: str, model: Path, extra: list[str]) -> str:
    p = run([kiln, "inspect", str(model), "--partition"] + extra)
    m = re.search(r"values that cross between the device and the host in a call with host inputs: ([^\n]*)",
                  p.stdout)
    return m[1] if m else (p.stderr.strip().splitlines() or ["?"])[-1]


def torch_wall_ms(fn, warmup: int, iters: int) -> float:
    with torch.no_grad():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--kiln-before", help="an earlier kiln binary to measure beside")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--workdir")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kiln-dd-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": {}}

    # nonzero_middle
    from safetensors.torch import load_file

    pt2 = FIXTURES / "nonzero_middle.pt2"
    io = load_file(str(FIXTURES / "nonzero_middle.io.safetensors"))
    inp = work / "nonzero_middle_in.safetensors"
    save_inputs(inp, io["input.0"])
    case: dict = {"crossings": crossings(args.kiln, pt2, ["--device", "cuda"])}
    case["kiln_cuda"] = bench(args.kiln, pt2, inp, args.iters, ["--device", "cuda", "--no-cache"])
    if args.kiln_before:
        case["kiln_cuda_before"] = bench(args.kiln_before, pt2, inp, args.iters, ["--device", "cuda", "--no-cache"])
    case["kiln_cpu"] = bench(args.kiln, pt2, inp, args.iters, ["--device", "cpu", "--no-cache"])
    module = torch.export.load(str(pt2)).module().cuda()
    x = io["input.0"].cuda()
    case["torch_eager_cuda_ms"] = torch_wall_ms(lambda: module(x), 20, args.iters)
    result["cases"]["nonzero_middle"] = case
    log(json.dumps(case))

    # BERT-base fp16, length 128, with and without a forced fallback op.
    from torch.export import export, save

    model = build_model()
    ids = ids_of(128)
    with torch.no_grad():
        ep = export(model, (ids,))
    bert = work / "bert_128.pt2"
    save(ep, str(bert))
    inp = work / "bert_128_in.safetensors"
    save_inputs(inp, ids)
    forced = ["--fallback-ops", "aten.gelu.default"]
    case = {"crossings_forced": crossings(args.kiln, bert, ["--device", "cuda"] + forced),
            "crossings_plain": crossings(args.kiln, bert, ["--device", "cuda"])}
    case["kiln_cuda_plain"] = bench(args.kiln, bert, inp, args.iters, ["--device", "cuda", "--no-cache"])
    case["kiln_cuda_forced"] = bench(args.kiln, bert, inp, args.iters, ["--device", "cuda", "--no-cache"] + forced)
    gpu = model.cuda()
    gids = ids.cuda()
    case["torch_eager_cuda_ms"] = torch_wall_ms(lambda: gpu(gids), 20, args.iters)
    result["cases"]["bert_gelu_fallback"] = case
    log(json.dumps(case))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d")
    (out / f"{stamp}-nvidia-h200-data-dependent.json").write_text(json.dumps(result, indent=2) + "\n")
    nz, bt = result["cases"]["nonzero_middle"], result["cases"]["bert_gelu_fallback"]

    def f(v):
        return "-" if v is None else f"{v:.3f}"

    lines = [f"# Data-dependent and fallback ops between CUDA engines ({result['machine']}, torch {result['torch']})",
             "", "`python3 bench/data_dependent.py --kiln build/kiln --out bench/results"
             + (" --kiln-before OLD" if args.kiln_before else "") + "`", "",
             "## nonzero_middle (ms per call, median)", "",
             "| program | engines | fallback nodes | from host tensors | from CUDA tensors |", "|---|---|---|---|---|"]
    for key, name in [("kiln_cuda", "kiln cuda"), ("kiln_cuda_before", "kiln cuda, earlier binary"),
                      ("kiln_cpu", "kiln cpu")]:
        if key in nz:
            r = nz[key]
            lines.append(f"| {name} | {r.get('engines')} | {r.get('fallback_nodes')} | {f(r.get('host_tensors_ms'))} "
                         f"| {f(r.get('device_tensors_ms'))} |")
    lines += [f"| PyTorch eager (CUDA) | | | | {f(nz['torch_eager_cuda_ms'])} |", "",
              f"Values that cross: {nz['crossings']}", "",
              "## BERT-base fp16, length 128, GELU forced out of the engines (ms per call, median)", "",
              "| program | engines | fallback nodes | from host tensors | from CUDA tensors |", "|---|---|---|---|---|"]
    for key, name in [("kiln_cuda_plain", "kiln cuda"), ("kiln_cuda_forced", "kiln cuda, --fallback-ops gelu")]:
        r = bt[key]
        lines.append(f"| {name} | {r.get('engines')} | {r.get('fallback_nodes')} | {f(r.get('host_tensors_ms'))} "
                     f"| {f(r.get('device_tensors_ms'))} |")
    lines += [f"| PyTorch eager (CUDA) | | | | {f(bt['torch_eager_cuda_ms'])} |", "",
              f"Values that cross, forced: {bt['crossings_forced']}", "",
              f"Values that cross, plain: {bt['crossings_plain']}"]
    (out / f"{stamp}-nvidia-h200-data-dependent.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
