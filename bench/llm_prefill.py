#!/usr/bin/env python3
"""Prefill of a Llama-3.2-1B-shaped model with a dynamic prompt length, as a
user runs it: one `kiln compile` of the prefill (prompt 1..CACHE tokens) and
the decode step into one program, then `kiln generate` on prompts of several
lengths, beside eager PyTorch and torch.compile(dynamic=True) on the same
step module, in one process run on one GPU.

The model is bench/llm_decode.py's (bfloat16, random weights, static KV cache
of 1024, transformers' TorchExportableModuleWithStaticCache: token ids [1, T]
and cache positions [T] in, logits [1, T, vocab] out, the caches as buffers).
The prefill is exported with torch.export and Dim("prompt", 1, CACHE); the
decode step with one token, as llm_decode.py does.

For each prompt length the table has: the prefill call on resident memory
(`kiln bench --method prefill`: device time from CUDA events, inputs, outputs
and caches resident on the device),
the same call end to end from host tensors, its first call in a fresh process
(the shape planned, new kernels compiled, GEMMs timed), `kiln generate`'s
prompt time (a fresh process: includes that first call) and its decode time
per token, PyTorch eager and torch.compile(dynamic=True) on the same prefill
(CUDA events, medians), and optionally an engine built for one fixed length.

    python3 bench/llm_prefill.py --kiln build/kiln --out bench/results
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_decode import config, run, step_module  # noqa: E402


def log(msg: str) -> None:
    print(f"[prefill] {msg}", flush=True)


def prompt_ids(n: int) -> list[int]:
    return [(k * 7919 + 11) % 128256 for k in range(n)]


def time_prefill(fn, n: int, iters: int, warmup: int) -> float:
    ids = torch.tensor([prompt_ids(n)], device="cuda")
    pos = torch.arange(n, device="cuda")
    times = []
    with torch.no_grad():
        for k in range(warmup + iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(ids, pos)
            end.record()
            torch.cuda.synchronize()
            if k >= warmup:
                times.append(start.elapsed_time(end))
    return statistics.median(times)


def arena_bytes(compile_log: str) -> list[int]:
    return [int(m) for m in re.findall(r"arena ([0-9]+) bytes", compile_log)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--workdir", help="where the .pt2, .kiln and logs go (default: a temporary directory)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--cache", type=int, default=1024)
    ap.add_argument("--lengths", default="1,7,128,512,1000", help="prompt lengths")
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens kiln generate decodes after each prompt")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--fixed", type=int, default=0, help="also build an engine for this one prompt length")
    ap.add_argument("--skip-torch-compile", action="store_true")
    ap.add_argument("--commit", default=os.environ.get("KILN_COMMIT", "unknown"))
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kiln_prefill_"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    row: dict = {"layers": args.layers, "cache": args.cache, "commit": args.commit, "lengths": lengths,
                 "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "by_length": {}}
    per = row["by_length"]
    for n in lengths:
        per[n] = {}
    result = out / f"{time.strftime('%Y-%m-%d')}-llm-prefill.json"

    def save() -> None:  # after every phase: a run cut short keeps what it measured
        result.write_text(json.dumps(row, indent=1, default=str) + "\n")

    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        lm = LlamaForCausalLM(config(args)).to(torch.bfloat16).eval()
    step = step_module(lm, args.cache)
    for n in lengths:
        per[n]["eager_ms"] = time_prefill(step, n, args.iters, 3)
    save()
    log("eager " + ", ".join(f"{n}: {per[n]['eager_ms']:.3f} ms" for n in lengths))
    if not args.skip_torch_compile:
        try:
            t0 = time.time()
            compiled = torch.compile(step_module(lm, args.cache), dynamic=True)
            for n in lengths:
                per[n]["compile_dynamic_ms"] = time_prefill(compiled, n, args.iters, 3)
            row["compile_dynamic_s"] = time.time() - t0
            log("torch.compile(dynamic=True) " + ", ".join(f"{n}: {per[n]['compile_dynamic_ms']:.3f} ms" for n in lengths))
            del compiled
        except Exception as e:  # keep the other columns
            row["compile_dynamic_error"] = f"{type(e).__name__}: {e}"[:300]
            log(row["compile_dynamic_error"])

    # Export on the CPU (no device-typed weights in the archive).
    t0 = time.time()
    cpu_lm = lm.to("cpu")
    del step
    torch.cuda.empty_cache()
    prompt = torch.export.Dim("prompt", min=1, max=args.cache)
    files = {}
    with torch.no_grad():
        for name, example, dyn in (
                ("prefill", (torch.tensor([prompt_ids(8)]), torch.arange(8)), ({1: prompt}, {0: prompt})),
                ("decode", (torch.tensor([[1]]), torch.tensor([0])), None),
                ("fixed", (torch.tensor([prompt_ids(max(args.fixed, 1))]), torch.arange(max(args.fixed, 1))), None)):
            if name == "fixed" and not args.fixed:
                continue
            ep = torch.export.export(step_module(cpu_lm, args.cache), example, dynamic_shapes=dyn, strict=True)
            files[name] = work / f"llama1b_{name}.pt2"
            torch.export.save(ep, str(files[name]))
            del ep
    row["export_s"] = time.time() - t0
    log(f"exported {', '.join(files)} in {row['export_s']:.1f} s")

    from safetensors.torch import save_file

    kiln = work / "llama1b.kiln"
    t0 = time.time()
    p = run([args.kiln, "compile", str(files["prefill"]), str(files["decode"]), "--method", "prefill", "--method",
             "decode", "-o", str(kiln), "--device", "cuda", "--no-cache"], work / "compile.log", 900)
    row["kiln_compile_s"] = time.time() - t0
    row["kiln_compile_rc"] = p.returncode
    row["kiln_compile_tail"] = (p.stdout + p.stderr).strip().splitlines()[-12:]
    row["arena_bytes"] = arena_bytes(p.stdout + p.stderr)
    if p.returncode != 0:
        log("kiln compile failed: " + " | ".join(row["kiln_compile_tail"][-3:]))
    else:
        log(f"kiln compile {row['kiln_compile_s']:.1f} s")
        p = run([args.kiln, "inspect", str(kiln), "--partition", "--method", "prefill"], work / "inspect.log", 300)
        row["prefill_segments"] = [l for l in p.stdout.splitlines() if l.startswith("segment")][:12]
        for n in lengths:
            inputs = work / f"prefill_{n}.safetensors"
            save_file({"input.0": torch.tensor([prompt_ids(n)]), "input.1": torch.arange(n)}, str(inputs))
            p = run([args.kiln, "bench", str(kiln), "--method", "prefill", "--inputs", str(inputs), "--iters",
                     str(args.iters), "--json", str(work / f"bench_{n}.json")], work / f"bench_{n}.log", 600)
            if p.returncode == 0:
                b = json.loads((work / f"bench_{n}.json").read_text())
                per[n].update(engine_ms=b.get("median_ms"), end_to_end_ms=b.get("end_to_end_median_ms"),
                              first_call_ms=b.get("first_call_ms"))
            else:
                per[n]["bench_error"] = (p.stdout + p.stderr).strip().splitlines()[-2:]
            new = min(args.new_tokens, args.cache - n + 1)
            ids = ",".join(str(t) for t in prompt_ids(n))
            p = run([args.kiln, "generate", str(kiln), "--prompt-ids", ids, "--max-new-tokens", str(new)],
                    work / f"generate_{n}.log", 600)
            text = p.stdout + p.stderr
            m = re.search(r"prompt: ([0-9]+) tokens in ([0-9.]+) ms \(method ([a-z]+)\)", text)
            if m:
                per[n].update(generate_prompt_ms=float(m.group(2)), generate_method=m.group(3))
            m = re.search(r"([0-9.]+) ms per token \(median ([0-9.]+) ms", text)
            if m:
                per[n]["generate_decode_ms"] = float(m.group(2))
            if p.returncode != 0:
                per[n]["generate_error"] = text.strip().splitlines()[-2:]
            log(f"{n}: " + json.dumps(per[n]))
            save()
    save()
    if args.fixed and row["kiln_compile_rc"] == 0:
        fixed = work / "llama1b_fixed.kiln"
        t0 = time.time()
        p = run([args.kiln, "compile", str(files["fixed"]), "-o", str(fixed), "--device", "cuda", "--no-cache"],
                work / "compile_fixed.log", 900)
        row["fixed_compile_s"] = time.time() - t0
        row["fixed_arena_bytes"] = arena_bytes(p.stdout + p.stderr)
        inputs = work / f"prefill_{args.fixed}.safetensors"
        if p.returncode == 0 and inputs.exists():
            p = run([args.kiln, "bench", str(fixed), "--inputs", str(inputs), "--iters", str(args.iters), "--json",
                     str(work / "bench_fixed.json")], work / "bench_fixed.log", 600)
            if p.returncode == 0:
                b = json.loads((work / "bench_fixed.json").read_text())
                row["fixed"] = {"length": args.fixed, "engine_ms": b.get("median_ms"),
                                "end_to_end_ms": b.get("end_to_end_median_ms")}
        log(f"fixed {args.fixed}: {json.dumps(row.get('fixed'))}")

    save()
    print(json.dumps(row, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
