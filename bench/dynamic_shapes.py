#!/usr/bin/env python3
"""BERT-base fp16 with a dynamic sequence length: one kiln build serving every
length from 2 to 512, beside a kiln engine built for each length alone and
torch.compile(dynamic=True), in one run on one GPU.

The model: transformers' BertModel(BertConfig()) with random weights
(torch.manual_seed(0)), float16, eval, no_grad, batch 1, forward(input_ids)
returning last_hidden_state (run_bench.py's wrapper). Token ids come from a
seeded generator.

For each length L in --lengths, on the same ids:

- kiln range: the model exported once with Dim("seq", min=2, max=512) and
  compiled once (`kiln compile --device cuda -o bert_dyn.kiln`; build time
  recorded, and the number of engines and fallback nodes from
  `kiln inspect --partition`). Then `kiln bench bert_dyn.kiln --inputs IN_L`
  gives resident calls (device time, CUDA events; inputs and outputs on the device) and
  end to end from host tensors, and `kiln run` at L in a new process gives
  the first call at a length the build did not plan (wall time of the call,
  as the CLI reports it, beside the same at the build's opt length).
- kiln fixed: the model exported at length L and benched the same way
  (`kiln bench bert_L.pt2 --device cuda`), one build per length.
- torch.compile(dynamic=True): one compiled module for all lengths, CUDA-event
  medians; its first call at each length timed apart.
- eager fp16, CUDA-event medians.

    python3 bench/dynamic_shapes.py --kiln build/kiln --out bench/results [--case resnet50-hw]
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def log(msg: str) -> None:
    print(f"[dyn] {msg}", flush=True)


class LastHiddenState(torch.nn.Module):
    def __init__(self, bert: torch.nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).last_hidden_state


def build_model() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return LastHiddenState(BertModel(BertConfig())).eval().half()


def ids_of(length: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(length)
    return torch.randint(0, 30000, (1, length), generator=g)


def cuda_times(fn, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def first_call_ms(fn) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def run(cmd: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    log(" ".join(cmd))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def save_inputs(path: Path, ids: torch.Tensor) -> None:
    from safetensors.torch import save_file

    save_file({"input.0": ids.contiguous()}, str(path))


def kiln_bench(kiln: str, model: Path, inputs: Path, iters: int, extra: list[str]) -> dict:
    out = inputs.with_suffix(".result.json")
    out.unlink(missing_ok=True)
    p = run([kiln, "bench", str(model), "--inputs", str(inputs), "--iters", str(iters), "--warmup", "20",
             "--json", str(out)] + extra)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    r = json.loads(out.read_text())
    return {"engine_ms": r.get("median_ms"), "end_to_end_ms": r.get("end_to_end_median_ms"),
            "first_call_ms": r.get("first_call_ms"), "build_s": r.get("build_s"), "engines": r.get("engines"),
            "fallback_nodes": r.get("fallback_nodes"), "timing": r.get("timing")}


def case_spec(name: str):
    """(title, model, example input of a size, dynamic_shapes for export, sizes, --shape argument or None,
    extra kiln compile arguments) of a bench case."""
    if name == "bert":
        from torch.export import Dim

        seq = Dim("seq", min=2, max=512)
        return ("BERT-base fp16, sequence 2..512", build_model(), ids_of, {"input_ids": {1: seq}},
                [7, 97, 128, 384, 512], None, [])
    import torchvision
    from torch.export import Dim

    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval().half()

    def image(shape):
        g = torch.Generator().manual_seed(sum(shape))
        return torch.randn(shape, generator=g).half()

    if name == "resnet50-batch":
        batch = Dim("batch", min=1, max=64)
        return ("ResNet-50 fp16, batch 1..64 (opt 16), 224x224", model, lambda n: image((n, 3, 224, 224)),
                {"x": {0: batch}}, [1, 16, 64], "x:1x3x224x224,16x3x224x224,64x3x224x224",
                ["--batch-buckets", "off"])
    if name == "resnet50-hw":
        # Multiples of 32 (export asks it of ResNet's five halvings): 32*hq with hq in 5..10.
        h, w = 32 * Dim("hq", min=5, max=10), 32 * Dim("wq", min=5, max=10)
        return ("ResNet-50 fp16, batch 1, height and width 160..320 in steps of 32 (opt: the max)", model,
                lambda n: image((1, 3, n, n)), {"x": {2: h, 3: w}}, [160, 224, 320], None, [])
    raise SystemExit(f"unknown case {name}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--case", default="bert", help="bert | resnet50-batch | resnet50-hw")
    ap.add_argument("--sizes", help="comma-separated sizes (default: the case's)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--workdir")
    ap.add_argument("--skip-torch-compile", action="store_true")
    args = ap.parse_args()
    title, model, make_input, dynamic, sizes, shape_arg, extra = case_spec(args.case)
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kiln-dyn-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"case": args.case, "title": title, "machine": torch.cuda.get_device_name(0),
                    "torch": torch.__version__, "sizes": sizes, "rows": {}}
    from torch.export import export, save

    # kiln: one export with the dynamic sizes, one build.
    with torch.no_grad():
        ep = export(model, (make_input(sizes[len(sizes) // 2]),), dynamic_shapes=dynamic)
    dyn_pt2 = work / f"{args.case}_dyn.pt2"
    save(ep, str(dyn_pt2))
    dyn_kiln = work / f"{args.case}_dyn.kiln"
    cmd = [args.kiln, "compile", str(dyn_pt2), "--device", "cuda", "--no-cache", "-o", str(dyn_kiln)] + extra
    if shape_arg:
        cmd += ["--shape", shape_arg]
    t = time.perf_counter()
    p = run(cmd, 600)
    result["range_build_s"] = time.perf_counter() - t
    result["range_compile_rc"] = p.returncode
    result["range_compile_log"] = p.stderr[-2000:]
    p = run([args.kiln, "inspect", str(dyn_kiln), "--partition"])
    result["range_partition"] = p.stdout[-3000:]
    m = re.search(r"segments: (\d+) \((\d+) engine, (\d+) fallback\)", p.stdout)
    if m:
        result["range_segments"] = {"segments": int(m[1]), "engines": int(m[2]), "fallback": int(m[3])}

    for size in sizes:
        row: dict = {}
        x = make_input(size)
        inp = work / f"in_{args.case}_{size}.safetensors"
        save_inputs(inp, x)
        # A new process per size: its first call makes the steps of that size (kiln bench reports it).
        row["kiln_range"] = kiln_bench(args.kiln, dyn_kiln, inp, args.iters, [])
        # An engine built for this size alone.
        with torch.no_grad():
            ep_fixed = export(model, (x,))
        fixed_pt2 = work / f"{args.case}_{size}.pt2"
        save(ep_fixed, str(fixed_pt2))
        t = time.perf_counter()
        row["kiln_fixed"] = kiln_bench(args.kiln, fixed_pt2, inp, args.iters, ["--device", "cuda", "--no-cache"])
        row["kiln_fixed_wall_s"] = time.perf_counter() - t
        result["rows"][size] = row
        log(f"{size}: range {row['kiln_range'].get('engine_ms')} fixed {row['kiln_fixed'].get('engine_ms')}")

    gpu = model.cuda()
    with torch.no_grad():
        for size in sizes:
            x = make_input(size).cuda()
            ts = cuda_times(lambda: gpu(x), 10, args.iters)
            result["rows"][size]["eager_ms"] = statistics.median(ts)
        if not args.skip_torch_compile:
            torch._dynamo.reset()
            compiled = torch.compile(gpu, dynamic=True)
            for size in sizes:
                x = make_input(size).cuda()
                result["rows"][size]["torch_compile_dynamic_first_call_ms"] = first_call_ms(lambda: compiled(x))
                ts = cuda_times(lambda: compiled(x), 10, args.iters)
                result["rows"][size]["torch_compile_dynamic_ms"] = statistics.median(ts)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d")
    (out / f"{stamp}-dynamic-shapes-{args.case}.json").write_text(json.dumps(result, indent=1, default=str))
    lines = [f"# {title} ({result['machine']}, torch {result['torch']})", "",
             f"- kiln range build: {result['range_build_s']:.1f} s (rc {result['range_compile_rc']}), "
             f"segments {result.get('range_segments')}", "",
             "| size | kiln range engine ms | kiln fixed engine ms | range / fixed | kiln range end to end ms | "
             "kiln range first call ms | range engines / fallback nodes | torch.compile dynamic ms "
             "(first call) | eager ms |", "|---|---|---|---|---|---|---|---|---|"]

    def f(v) -> str:
        return f"{v:.3f}" if isinstance(v, (int, float)) else "—"

    for size in sizes:
        r = result["rows"][size]
        kr, kf = r["kiln_range"], r["kiln_fixed"]
        a, b = kr.get("engine_ms"), kf.get("engine_ms")
        ratio = f"{a / b:.3f}" if a and b else "—"
        lines.append(f"| {size} | {f(a)} | {f(b)} | {ratio} | {f(kr.get('end_to_end_ms'))} | "
                     f"{f(kr.get('first_call_ms'))} | {kr.get('engines')} / {kr.get('fallback_nodes')} | "
                     f"{f(r.get('torch_compile_dynamic_ms'))} ({f(r.get('torch_compile_dynamic_first_call_ms'))}) | "
                     f"{f(r.get('eager_ms'))} |")
    (out / f"{stamp}-dynamic-shapes-{args.case}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
