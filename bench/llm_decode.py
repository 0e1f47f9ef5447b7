#!/usr/bin/env python3
"""Decode step of a Llama-3.2-1B-shaped model: kiln beside eager PyTorch and
torch.compile(mode="reduce-overhead"), in one process run on one GPU.

The model: hidden 2048, 16 layers, 32 heads, 8 KV heads (head_dim 64),
intermediate 8192, vocabulary 128256, bfloat16, random weights, a static KV
cache of 1024 positions, batch 1, wrapped by transformers' ExecuTorch recipe
(TorchExportableModuleWithStaticCache: token ids [1,1] and cache position [1]
in, logits out, the caches as buffers). PyTorch runs that step module on the
GPU; kiln compiles the same module exported with torch.export (on the CPU,
as the fixtures are) for --device cuda.

Times per token are medians of CUDA-event timings (PyTorch) and of kiln bench
(device time of calls on inputs, outputs and caches resident on the device,
enqueued back to back; CUDA events between them), plus end to end through Session::run (kiln bench) and kiln generate:
the session keeps the caches on the device, token ids go in and logits come
out through host memory. The memory-bandwidth floor is the bytes one step must read (weights
once and the KV cache) at 4.8 TB/s. Also: the same program with every kernel launched early
(KILN_CUDA_PDL=1), the launches per step, and the program with FP8 weights (--precision fp8w):
its ms/token and its logits' error against the bf16 program over 64 greedy steps.

    python3 bench/llm_decode.py --kiln build/kiln --out bench/results
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def log(msg: str) -> None:
    print(f"[llm] {msg}", flush=True)


def config(args):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=4096,
        rope_theta=500000.0, tie_word_embeddings=True, attn_implementation="sdpa", use_cache=True,
    )


def step_module(lm, cache_len: int):
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    lm.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": cache_len},
    )
    inner = TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=cache_len)

    class Step(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, cache_position):
            return self.inner(input_ids=input_ids, cache_position=cache_position)

    return Step(inner).eval()


def time_steps(fn, steps: int, warmup: int) -> list[float]:
    times = []
    with torch.no_grad():
        for k in range(warmup + steps):
            ids = torch.tensor([[(k * 7919) % 128256]], device="cuda")
            pos = torch.tensor([k % 1000], device="cuda")
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(ids, pos)
            end.record()
            torch.cuda.synchronize()
            if k >= warmup:
                times.append(start.elapsed_time(end))
    return times


def python_decode_loop(kiln_path: Path, tokens: int) -> dict:
    """Greedy decoding from Python with the compiled module on CUDA tensors:
    each step's logits stay on the GPU, torch.argmax picks the next token there
    and feeds it to the next call; the KV caches are the module's own CUDA
    buffers, updated in place. Time per token over the whole loop (CUDA
    events), as a user's loop gets it."""
    import kiln

    compiled = kiln.load(str(kiln_path), device="cuda")
    buffers = dict(compiled.named_buffers())
    before = {name: t.data_ptr() for name, t in buffers.items()}
    positions = torch.arange(tokens + 8, device="cuda")
    ids = torch.tensor([[1]], device="cuda")
    with torch.no_grad():
        for k in range(8):  # warm-up (graph capture)
            ids = compiled(ids, positions[k:k + 1])[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for k in range(8, tokens):
            ids = compiled(ids, positions[k:k + 1])[:, -1].argmax(-1, keepdim=True)
        end.record()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        # The host's share: each call and each argmax as the host spends it (no wait in either).
        call_ms, pick_ms = [], []
        for k in range(8, min(tokens, 72)):
            a = time.perf_counter()
            logits = compiled(ids, positions[k:k + 1])
            b = time.perf_counter()
            ids = logits[:, -1].argmax(-1, keepdim=True)
            pick_ms.append((time.perf_counter() - b) * 1e3)
            call_ms.append((b - a) * 1e3)
        torch.cuda.synchronize()
    steps = tokens - 8
    after = {name: t.data_ptr() for name, t in compiled.named_buffers()}
    return {"python_loop_ms": start.elapsed_time(end) / steps, "python_loop_wall_ms": wall / steps,
            "python_loop_steps": steps, "python_call_host_ms": statistics.median(call_ms),
            "python_argmax_host_ms": statistics.median(pick_ms), "python_buffers_on_cuda": all(t.is_cuda for t in buffers.values()),
            "python_buffers_same_memory": before == after,
            "python_host_staging_reason": compiled.host_staging_reason}


def fp8_error(bf16_path: Path, fp8_path: Path, steps: int) -> dict:
    """The FP8-weight program's logits beside the bf16 one's over `steps`
    greedy steps, both fed bf16's tokens (so each step compares the same
    input): per step the largest |difference| over the largest |bf16 logit|
    and the mean |difference| over the mean |bf16 logit|, and how often the
    two pick the same next token."""
    import kiln

    a = kiln.load(str(bf16_path), device="cuda")
    b = kiln.load(str(fp8_path), device="cuda")
    positions = torch.arange(steps, device="cuda")
    ids = torch.tensor([[1]], device="cuda")
    max_rel, mean_rel, same = [], [], 0
    with torch.no_grad():
        for k in range(steps):
            la = a(ids, positions[k:k + 1])[:, -1].float()
            lb = b(ids, positions[k:k + 1])[:, -1].float()
            d = (lb - la).abs()
            max_rel.append((d.max() / la.abs().max()).item())
            mean_rel.append((d.mean() / la.abs().mean()).item())
            same += int(la.argmax().item() == lb.argmax().item())
            ids = la.argmax(-1, keepdim=True).view(1, 1)
    return {"fp8_steps_compared": steps, "fp8_max_rel_err": max(max_rel), "fp8_mean_rel_err": statistics.mean(mean_rel),
            "fp8_max_rel_err_median_step": statistics.median(max_rel), "fp8_greedy_agreement": same / steps}


def launches(kiln_bin: str, program: Path, inputs: Path, work: Path, name: str) -> int | None:
    """Steps of the engine per call, from KILN_CUDA_PROFILE's summary."""
    p = subprocess.run([kiln_bin, "bench", str(program), "--device", "cuda", "--inputs", str(inputs), "--iters", "2"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "KILN_CUDA_PROFILE": "1"})
    (work / f"profile-{name}.log").write_text(p.stdout + p.stderr)
    m = re.search(r": ([0-9]+) steps, ", p.stderr)
    return int(m.group(1)) if m else None


def run(cmd: list[str], log_path: Path, timeout: int, env: dict | None = None) -> subprocess.CompletedProcess:
    log(" ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    log_path.write_text(f"$ {' '.join(cmd)}\nrc={p.returncode} ({time.time() - t0:.1f} s)\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--workdir", help="where the .pt2 and logs go (default: a temporary directory)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--cache", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps per system")
    ap.add_argument("--skip-torch-compile", action="store_true")
    ap.add_argument("--skip-python", action="store_true", help="no decode loop through the kiln Python package")
    ap.add_argument("--tokens", type=int, default=201, help="new tokens for kiln generate and the Python loop")
    ap.add_argument("--commit", default=os.environ.get("KILN_COMMIT", "unknown"))
    ap.add_argument("--skip-fp8", action="store_true", help="no --precision fp8w program")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kiln_llm_"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    row: dict = {"layers": args.layers, "cache": args.cache, "commit": args.commit,
                 "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}

    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        lm = LlamaForCausalLM(config(args)).to(torch.bfloat16).eval()
    params = sum(p.numel() for p in lm.parameters())
    kv_bytes = 2 * args.layers * 8 * args.cache * 64 * 2
    floor_ms = (params * 2 + kv_bytes) / 4.8e12 * 1e3
    row.update(params=params, floor_ms=floor_ms)
    log(f"{params / 1e9:.2f} B parameters; floor {floor_ms:.3f} ms at 4.8 TB/s")

    step = step_module(lm, args.cache)
    row["eager_ms"] = statistics.median(time_steps(step, args.steps, 5))
    log(f"eager {row['eager_ms']:.3f} ms/token")
    if not args.skip_torch_compile:
        try:
            t0 = time.time()
            fresh = step_module(lm, args.cache)
            compiled = torch.compile(fresh, mode="reduce-overhead")
            times = time_steps(compiled, args.steps, 10)
            row["compile_ro_ms"] = statistics.median(times)
            row["compile_ro_s"] = time.time() - t0
            log(f"torch.compile reduce-overhead {row['compile_ro_ms']:.3f} ms/token")
        except Exception as e:  # keep the other columns
            row["compile_ro_error"] = f"{type(e).__name__}: {e}"[:300]
            log(row["compile_ro_error"])

    # Export on the CPU (no device-typed weights in the archive).
    t0 = time.time()
    cpu_lm = lm.to("cpu")
    del step
    torch.cuda.empty_cache()
    cpu_step = step_module(cpu_lm, args.cache)
    with torch.no_grad():  # as the fixtures: no grad-mode switches in the graph
        ep = torch.export.export(cpu_step, (torch.tensor([[1]]), torch.tensor([0])), strict=True)
    pt2 = work / "llama1b_decode.pt2"
    torch.export.save(ep, str(pt2))
    row["export_s"] = time.time() - t0
    log(f"exported in {row['export_s']:.1f} s ({pt2.stat().st_size / 2**30:.2f} GiB)")

    from safetensors.torch import save_file

    inputs = work / "step.in.safetensors"
    save_file({"input.0": torch.tensor([[42]]), "input.1": torch.tensor([7])}, str(inputs))
    kiln = work / "llama1b_decode.kiln"
    p = run([args.kiln, "compile", str(pt2), "-o", str(kiln), "--device", "cuda", "--no-cache"], work / "compile.log", 900)
    row["kiln_compile_rc"] = p.returncode
    if p.returncode == 0:
        row["kiln_compile_tail"] = (p.stdout + p.stderr).strip().splitlines()[-6:]
        p = run([args.kiln, "inspect", str(kiln), "--partition"], work / "inspect.log", 300)
        row["kiln_segments"] = [l for l in p.stdout.splitlines() if l.startswith("segment")][:12]
        p = run([args.kiln, "bench", str(kiln), "--device", "cuda", "--inputs", str(inputs), "--iters",
                 str(args.steps), "--json", str(work / "bench.json")], work / "bench.log", 600)
        row["kiln_bench_rc"] = p.returncode
        if p.returncode == 0:
            row["kiln_bench"] = json.loads((work / "bench.json").read_text())
        p = run([args.kiln, "generate", str(kiln), "--device", "cuda", "--prompt-ids", "1,2,3", "--max-new-tokens",
                 str(args.tokens)], work / "generate.log", 600)
        row["kiln_generate"] = (p.stdout + p.stderr).strip().splitlines()[-2:]
        m = re.search(r"([0-9.]+) ms per token \(median ([0-9.]+) ms", p.stdout)
        if m:
            row["kiln_generate_ms"], row["kiln_generate_median_ms"] = float(m.group(1)), float(m.group(2))
        if not args.skip_python:
            try:
                row.update(python_decode_loop(kiln, args.tokens))
                log(f"kiln.load decode loop {row['python_loop_ms']:.3f} ms/token")
            except Exception as e:  # keep the other columns
                row["python_loop_error"] = f"{type(e).__name__}: {e}"[:300]
                log(row["python_loop_error"])
        row["kiln_launches"] = launches(args.kiln, kiln, inputs, work, "bf16")
        # The same program with every kernel launched early (programmatic dependent launch).
        pdl = {**os.environ, "KILN_CUDA_PDL": "1"}
        p = run([args.kiln, "bench", str(kiln), "--device", "cuda", "--inputs", str(inputs), "--iters",
                 str(args.steps), "--json", str(work / "bench-pdl.json")], work / "bench-pdl.log", 600, pdl)
        if p.returncode == 0:
            row["kiln_bench_pdl"] = json.loads((work / "bench-pdl.json").read_text())
        if not args.skip_fp8:
            fp8 = work / "llama1b_decode_fp8.kiln"
            p = run([args.kiln, "compile", str(pt2), "-o", str(fp8), "--device", "cuda", "--precision", "fp8w",
                     "--no-cache"], work / "compile-fp8.log", 900)
            row["fp8_compile_rc"] = p.returncode
            if p.returncode == 0:
                row["fp8_launches"] = launches(args.kiln, fp8, inputs, work, "fp8")
                for name, env in (("fp8_bench", None), ("fp8_bench_pdl", pdl)):
                    p = run([args.kiln, "bench", str(fp8), "--device", "cuda", "--inputs", str(inputs), "--iters",
                             str(args.steps), "--json", str(work / f"{name}.json")], work / f"{name}.log", 600, env)
                    if p.returncode == 0:
                        row[name] = json.loads((work / f"{name}.json").read_text())
                p = run([args.kiln, "generate", str(fp8), "--device", "cuda", "--prompt-ids", "1,2,3",
                         "--max-new-tokens", str(args.tokens)], work / "generate-fp8.log", 600)
                m = re.search(r"([0-9.]+) ms per token \(median ([0-9.]+) ms", p.stdout)
                if m:
                    row["fp8_generate_ms"], row["fp8_generate_median_ms"] = float(m.group(1)), float(m.group(2))
                try:
                    row.update(fp8_error(kiln, fp8, 64))
                    log(f"fp8: max rel err {row['fp8_max_rel_err']:.4f}, greedy agreement {row['fp8_greedy_agreement']:.3f}")
                except Exception as e:  # keep the other columns
                    row["fp8_error_error"] = f"{type(e).__name__}: {e}"[:300]
                    log(row["fp8_error_error"])
    else:
        row["kiln_compile_error"] = (p.stdout + p.stderr).strip().splitlines()[-3:]

    stamp = time.strftime("%Y-%m-%d")
    (out / f"{stamp}-llm-decode.json").write_text(json.dumps(row, indent=1, default=str) + "\n")
    print(json.dumps(row, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
