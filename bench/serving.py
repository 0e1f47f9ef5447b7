#!/usr/bin/env python3
"""A server's view of dynamic shapes: a seeded stream of requests whose sizes
are drawn at random from a model's range, each timed from host tensors in to
host tensors out with the device synchronized, the whole stream run twice in
one process per system. What a serving process meets is the first pass (most
sizes new to it); the second pass shows what the same sizes cost once seen.

Cases (--case, repeatable):
  bert      transformers' BertModel(BertConfig()) fp16, batch 1, sequence 2..512, 200 requests
  resnet50  torchvision's resnet50 fp16, batch 1..64 at 224x224, 100 requests
  prefill   bench/llm_decode.py's Llama-3.2-1B-shaped decoder (bf16, random weights, static KV cache
            of 1024) as a prefill step over prompts 1..1024, 50 requests; kiln's inputs are its own
            random token ids and cache positions, PyTorch's random ids at positions 0..n-1. The step
            returns the next token's logits (the head over the prompt's last position, [1, 1, vocab]),
            as a server's prefill does (transformers' generate passes logits_to_keep=1): the logits
            of every position, up to 1024 x 128256, would make each request a copy of up to 256 MB
            to freshly allocated host memory, which times the host's page faults, not the prefill

Systems, each over the same sizes in the same order:
  kiln                   `kiln bench MODEL.kiln --stream N --seed S` (the C++ runtime; it draws the
                         sizes, and the others take them from its JSON)
  kiln-python            kiln.load(MODEL.kiln, device="cuda") called on CUDA tensors
                         (input copied to the device, output back to the host, in the timing)
  torch-compile-dynamic  torch.compile(model, dynamic=True), the same host-to-host timing
  eager                  the module itself

Each `kiln compile` writes its progress (lowering, planning, timing, with times) to
WORKDIR/<case>_dyn.compile.log and <case>_fixed.compile.log.

With --threads T the kiln row also gives calls per second of T sessions on T
threads beside one (`kiln bench --stream --threads T`).

    python3 bench/serving.py --kiln build/kiln --out bench/results [--case bert] [--threads 8]

Writes <date>-<gpu>-serving.md and .json to --out; the JSON is
{"cases": [{"case", "system", "p50_ms", "p99_ms", "max_ms", "max_at", "first_request_ms",
            "second_pass_p50_ms", "second_pass_p99_ms", "second_pass_max_ms", ...}]}.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dynamic_shapes import build_model  # noqa: E402


def log(msg: str) -> None:
    print(f"[serving] {msg}", flush=True)


def percentile(ms: list[float], q: float) -> float:
    s = sorted(ms)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def summary(first: list[float], second: list[float], sizes: list[int]) -> dict:
    worst = max(range(len(first)), key=lambda i: first[i])
    return {"p50_ms": percentile(first, 0.5), "p99_ms": percentile(first, 0.99), "max_ms": first[worst],
            "max_at": sizes[worst], "first_request_ms": first[0],
            "second_pass_p50_ms": percentile(second, 0.5), "second_pass_p99_ms": percentile(second, 0.99),
            "second_pass_max_ms": max(second)}


def case_spec(name: str):
    """(title, model, inputs of a size, dynamic_shapes, example size, requests, kiln compile arguments)."""
    from torch.export import Dim

    if name == "bert":
        def ids(n: int, g: torch.Generator) -> tuple:
            return (torch.randint(0, 30000, (1, n), generator=g),)
        return ("BERT-base fp16, batch 1, sequence 2..512", build_model(), ids,
                {"input_ids": {1: Dim("seq", min=2, max=512)}}, 128, 200, ["--precision", "fp16"])
    if name == "resnet50":
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.resnet50().eval().half()

        def image(n: int, g: torch.Generator) -> tuple:
            return (torch.randn((n, 3, 224, 224), generator=g).half(),)
        return ("ResNet-50 fp16, batch 1..64, 224x224", model, image, {"x": {0: Dim("batch", min=1, max=64)}}, 16,
                100, ["--precision", "fp16", "--batch-buckets", "off", "--shape",
                      "x:1x3x224x224,16x3x224x224,64x3x224x224"])
    if name == "prefill":
        from types import SimpleNamespace

        from transformers import LlamaForCausalLM

        from llm_decode import config, step_module

        torch.manual_seed(0)
        lm = LlamaForCausalLM(config(SimpleNamespace(layers=16))).to(torch.bfloat16).eval()

        class LastPosition(torch.nn.Module):
            def __init__(self, head):
                super().__init__()
                self.head = head

            def forward(self, h):
                return self.head(h[:, -1:, :])
        lm.lm_head = LastPosition(lm.lm_head)

        def prompt(n: int, g: torch.Generator) -> tuple:
            return (torch.randint(0, 128000, (1, n), generator=g), torch.arange(n))
        prompt_dim = Dim("prompt", min=1, max=1024)
        step = step_module(lm, 1024)
        # The static cache is no buffer .cuda() moves: PyTorch's systems get a step made over the model on the GPU.
        object.__setattr__(step, "cuda_module", lambda: step_module(lm.to("cuda"), 1024))
        return ("Llama-3.2-1B-shaped prefill bf16, prompts 1..1024 (static KV cache 1024)", step,
                prompt, ({1: prompt_dim}, {0: prompt_dim}), 128, 50, [])
    raise SystemExit(f"unknown case {name}")


def timed_stream(call, inputs: list[tuple]) -> list[float]:
    """Host tensors in, host tensors out, the device synchronized: milliseconds per request."""
    ms = []
    for x in inputs:
        torch.cuda.synchronize()
        t = time.perf_counter()
        y = call(*x)
        if isinstance(y, torch.Tensor):
            y = y.cpu()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t) * 1e3)
    return ms


def run_case(name: str, args, work: Path) -> list[dict]:
    title, model, make, dynamic, example, requests, extra = case_spec(name)
    from torch.export import export, save

    with torch.no_grad():
        ep = export(model, make(example, torch.Generator().manual_seed(0)), dynamic_shapes=dynamic, strict=name == "prefill")
    # The same model exported at the example size alone, built the same way: what the range's build is held to.
    # It is built once untimed first, so that neither timed build pays the process's and the machine's first
    # loads of the libraries' kernels.
    with torch.no_grad():
        fixed_ep = export(model, make(example, torch.Generator().manual_seed(0)), strict=name == "prefill")
    fixed_pt2 = work / f"{name}_fixed.pt2"
    save(fixed_ep, str(fixed_pt2))
    fixed_cmd = [args.kiln, "compile", str(fixed_pt2), "--device", "cuda", "--no-cache", "-o",
                 str(work / f"{name}_fixed.kiln")] + [a for a in extra if a != "--shape" and ":" not in a]
    subprocess.run(fixed_cmd, capture_output=True, text=True, timeout=900)
    pt2 = work / f"{name}_dyn.pt2"
    save(ep, str(pt2))
    program = work / f"{name}_dyn.kiln"
    cmd = [args.kiln, "compile", str(pt2), "--device", "cuda", "--no-cache", "-o", str(program)] + extra
    log(" ".join(cmd))
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    build_s = time.perf_counter() - t
    (work / f"{name}_dyn.compile.log").write_text(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"kiln compile failed: {p.stderr[-2000:]}")
    t = time.perf_counter()
    p = subprocess.run(fixed_cmd, capture_output=True, text=True, timeout=900)
    fixed_build_s = time.perf_counter() - t
    (work / f"{name}_fixed.compile.log").write_text(p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"kiln compile (fixed size) failed: {p.stderr[-2000:]}")
    log(f"{name}: range build {build_s:.1f} s, fixed build at {example} {fixed_build_s:.1f} s")
    rows = []
    out = work / f"{name}_stream.json"
    cmd = [args.kiln, "bench", str(program), "--stream", str(requests), "--seed", str(args.seed), "--json", str(out)]
    if args.threads > 1:
        cmd += ["--threads", str(args.threads)]
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"kiln bench --stream failed: {p.stderr[-2000:]}")
    log(p.stdout.strip())
    k = json.loads(out.read_text())
    sizes = [int(re.search(r"=(\d+)", s)[1]) for s in k["sizes"]]
    row = {"case": name, "title": title, "system": "kiln", "build_s": build_s, "fixed_build_s": fixed_build_s,
           **summary(k["first_pass_ms"], k["second_pass_ms"], sizes), "distinct_sizes": k["distinct_sizes"]}
    if "sessions" in k:
        row["sessions"] = k["sessions"]
    rows.append(row)

    g = torch.Generator().manual_seed(args.seed)
    inputs = [make(n, g) for n in sizes]

    def two_passes(system: str, call, **extra_fields) -> None:
        with torch.no_grad():
            first = timed_stream(call, inputs)
            second = timed_stream(call, inputs)
        rows.append({"case": name, "title": title, "system": system, **summary(first, second, sizes),
                     **extra_fields})
        log(f"{name} {system}: p50 {rows[-1]['p50_ms']:.3f} ms, p99 {rows[-1]['p99_ms']:.3f}, "
            f"max {rows[-1]['max_ms']:.3f}, second pass p50 {rows[-1]['second_pass_p50_ms']:.3f}")

    try:
        import kiln

        compiled = kiln.load(str(program), device="cuda")
        two_passes("kiln-python", lambda *x: compiled(*(t.cuda() for t in x)))
    except ImportError as e:
        log(f"kiln-python skipped: {e}")
    gpu = model.cuda_module() if hasattr(model, "cuda_module") else model.cuda()
    two_passes("eager", lambda *x: gpu(*(t.cuda() for t in x)))
    torch._dynamo.reset()
    compiled_torch = torch.compile(gpu, dynamic=True)
    t = time.perf_counter()
    with torch.no_grad():
        compiled_torch(*(x.cuda() for x in make(example, torch.Generator().manual_seed(0))))
    torch.cuda.synchronize()
    two_passes("torch-compile-dynamic", lambda *x: compiled_torch(*(t.cuda() for t in x)),
               compile_s=time.perf_counter() - t)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--case", action="append", help="bert, resnet50, prefill (default: all three)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workdir")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kiln-serving-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.case or ["bert", "resnet50", "prefill"]:
        rows += run_case(name, args, work)
    gpu = torch.cuda.get_device_name(0)
    result = {"machine": gpu, "torch": torch.__version__, "seed": args.seed, "cases": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y-%m-%d')}-{re.sub(r'[^a-z0-9]+', '-', gpu.lower()).strip('-')}-serving"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    lines = [f"# Serving streams of random sizes ({gpu}, torch {torch.__version__}, seed {args.seed})", "",
             "`python3 bench/serving.py --kiln build/kiln --out bench/results"
             + (f" --threads {args.threads}" if args.threads > 1 else "") + "`; each request timed host tensors "
             "in to host tensors out, the device synchronized; first pass = the stream as a fresh process meets "
             "it, second pass = the same stream again.", "",
             "| case | system | p50 ms | p99 ms | max ms (size) | first request ms | second pass p50 / p99 / max ms |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['system']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | "
                     f"{r['max_ms']:.3f} ({r['max_at']}) | {r['first_request_ms']:.3f} | "
                     f"{r['second_pass_p50_ms']:.3f} / {r['second_pass_p99_ms']:.3f} / "
                     f"{r['second_pass_max_ms']:.3f} |")
    for r in rows:
        if "build_s" in r:
            lines.append(f"\n{r['case']}: range build {r['build_s']:.1f} s beside a build at the one example size "
                         f"{r['fixed_build_s']:.1f} s ({r['build_s'] / r['fixed_build_s']:.2f}x)")
    for r in rows:
        if "sessions" in r:
            s = r["sessions"]
            lines.append(f"\n{r['case']}: {s['threads']} sessions on {s['threads']} threads "
                         f"{s['calls_per_s']:.1f} calls/s beside one session {s['one_thread_calls_per_s']:.1f} "
                         f"({s['calls_per_s'] / s['one_thread_calls_per_s']:.2f}x)")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
