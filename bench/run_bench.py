#!/usr/bin/env python3
"""Benchmark kiln against PyTorch on one GPU, in one run, on the same inputs.

For every case this script builds the model with random weights (seed 0) in
float16, exports it with torch.export on the CPU, and then times

  * eager PyTorch,
  * torch.compile (default mode) and torch.compile(mode="reduce-overhead"),
    each on fresh dynamo state,
  * eager PyTorch captured once into a CUDA graph and replayed
    (cudnn.benchmark on; channels_last for resnet50),
  * kiln (`kiln bench`, a separate process),

checks kiln's output.0 against eager PyTorch's output, and writes a results
table (Markdown and JSON) that is rewritten after every step, so a run that is
cut short keeps what finished. See bench/README.md.

    python3 bench/run_bench.py --kiln build-cuda/kiln
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
FALLBACK_RUNS = 3  # whole-process `kiln run` timings when this kiln has no `bench`
COMPILE_RESERVE_S = 60  # a torch.compile step is not started later than --budget-s minus this
CHECK_RTOL = 2e-2  # PASS when max_abs_err <= CHECK_RTOL * max(1, max|ref|)
CHECK_RULE = f"PASS when max_abs_err <= {CHECK_RTOL:g} * max(1, max|ref|), ref = eager PyTorch fp16 output.0"
T0 = time.perf_counter()


# --------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]  # float32 module on the CPU; called after torch.manual_seed(0)
    make_inputs: Callable[[torch.Generator], tuple[torch.Tensor, ...]]  # CPU tensors, final dtypes
    batch: int
    channels_last: bool = False  # use channels_last for "eager + graph"


class LastHiddenState(nn.Module):
    """BertModel with a positional input_ids and last_hidden_state as the one output."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).last_hidden_state


def resnet50() -> nn.Module:
    import torchvision

    return torchvision.models.resnet50()


def vit_b_16() -> nn.Module:
    import torchvision

    model = torchvision.models.vit_b_16()
    # torchvision zero-initializes the classifier head, which makes every output
    # exactly 0 and the correctness check meaningless: give it random weights.
    nn.init.normal_(model.heads.head.weight, std=0.02)
    return model


def bert(**config: Any) -> nn.Module:
    from transformers import BertConfig, BertModel

    return LastHiddenState(BertModel(BertConfig(**config)))


def tiny_convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def images(batch: int, size: int) -> Callable[[torch.Generator], tuple[torch.Tensor, ...]]:
    return lambda gen: (torch.randn(batch, 3, size, size, generator=gen).half(),)


def token_ids(batch: int, seq: int, high: int) -> Callable[[torch.Generator], tuple[torch.Tensor, ...]]:
    return lambda gen: (torch.randint(0, high, (batch, seq), generator=gen, dtype=torch.int64),)


def suite(tiny: bool) -> list[Case]:
    if tiny:
        tiny_bert = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                         vocab_size=1000, max_position_embeddings=64)
        return [
            Case("tiny-convnet-fp16-bs2", tiny_convnet, images(2, 32), 2),
            Case("tiny-bert-fp16-seq16-bs2", lambda: bert(**tiny_bert), token_ids(2, 16, 1000), 2),
        ]
    return [
        Case("resnet50-fp16-bs1", resnet50, images(1, 224), 1, channels_last=True),
        Case("resnet50-fp16-bs64", resnet50, images(64, 224), 64, channels_last=True),
        Case("vit_b_16-fp16-bs1", vit_b_16, images(1, 224), 1),
        Case("bert-base-fp16-seq128-bs1", bert, token_ids(1, 128, 30000), 1),
        Case("bert-base-fp16-seq128-bs32", bert, token_ids(32, 128, 30000), 32),
    ]


# --------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {message}", flush=True)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def summarize(times_ms: list[float], batch: int) -> dict[str, Any]:
    ordered = sorted(times_ms)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    p90 = ordered[max(0, math.ceil(0.9 * n) - 1)]  # nearest rank
    return {"median_ms": median, "p90_ms": p90, "min_ms": ordered[0], "iters": n,
            "throughput_per_s": batch * 1000.0 / median if median > 0 else None}


def time_calls(fn: Callable[[], Any], device: str, warmup: int, iters: int, batch: int,
               before_each: Callable[[], None] | None = None) -> dict[str, Any]:
    """Warm up, then time each of `iters` calls: CUDA events on the GPU, perf_counter on the CPU."""
    for _ in range(warmup):
        if before_each:
            before_each()
        fn()
    synchronize(device)
    times: list[float] = []
    if device == "cuda":
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends):
            if before_each:
                before_each()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) for start, end in zip(starts, ends)]
    else:
        for _ in range(iters):
            if before_each:
                before_each()
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return summarize(times, batch)


def max_abs_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return (got.detach().float().cpu() - ref.detach().float().cpu()).abs().max().item()


def time_eager(model: nn.Module, inputs: tuple[torch.Tensor, ...], args: argparse.Namespace,
               batch: int) -> tuple[dict[str, Any], torch.Tensor]:
    ref = model(*inputs)
    synchronize(args.device)
    return time_calls(lambda: model(*inputs), args.device, args.warmup, args.iters, batch), ref


def time_compile(model: nn.Module, inputs: tuple[torch.Tensor, ...], mode: str, args: argparse.Namespace,
                 batch: int, ref: torch.Tensor) -> dict[str, Any]:
    """torch.compile on fresh dynamo state; compile_s is the wall time of the first call.

    With --cold-compile the inductor/triton caches are fresh too (otherwise they are shared within the run).
    """
    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    step = torch.compiler.cudagraph_mark_step_begin if mode == "reduce-overhead" else None
    with fresh_cache() if args.cold_compile else nullcontext():
        compiled = torch.compile(model, mode=mode)
        try:
            return compile_and_time(compiled, inputs, args, batch, ref, step)
        finally:
            del compiled
            torch._dynamo.reset()


def compile_and_time(compiled: Callable[..., Any], inputs: tuple[torch.Tensor, ...], args: argparse.Namespace,
                     batch: int, ref: torch.Tensor, step: Callable[[], None] | None) -> dict[str, Any]:
    synchronize(args.device)
    t = time.perf_counter()
    if step:
        step()
    out = compiled(*inputs)
    synchronize(args.device)
    compile_s = time.perf_counter() - t
    err = max_abs_err(out, ref)
    del out
    stats = time_calls(lambda: compiled(*inputs), args.device, args.warmup, args.iters, batch, step)
    return {**stats, "compile_s": compile_s, "max_abs_err_vs_eager": err}


def time_cuda_graph(model: nn.Module, inputs: tuple[torch.Tensor, ...], channels_last: bool,
                    args: argparse.Namespace, batch: int, ref: torch.Tensor) -> dict[str, Any]:
    """Eager PyTorch (cudnn.benchmark on) captured once into a CUDA graph; replays are timed."""
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
            inputs = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(args.warmup, 3)):
                model(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(*inputs)
        graph.replay()
        torch.cuda.synchronize()
        err = max_abs_err(out, ref)
        stats = time_calls(graph.replay, args.device, args.warmup, args.iters, batch)
        del graph, out
        return {**stats, "channels_last": channels_last, "max_abs_err_vs_eager": err}
    finally:
        torch.backends.cudnn.benchmark = benchmark
        if channels_last:
            model.to(memory_format=torch.contiguous_format)


# --------------------------------------------------------------------------
# kiln
# --------------------------------------------------------------------------


def run_logged(cmd: list[str], name: str, args: argparse.Namespace) -> subprocess.CompletedProcess[str]:
    """Run a subprocess, capture its output, and keep it under --log DIR when given."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.kiln_timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        proc = subprocess.CompletedProcess(cmd, 124, out, f"timed out after {args.kiln_timeout} s\n{err}")
    if args.log:
        log_dir = Path(args.log)
        (log_dir / f"{name}.cmd").write_text(shlex.join(cmd) + "\n")
        (log_dir / f"{name}.stdout").write_text(proc.stdout)
        (log_dir / f"{name}.stderr").write_text(proc.stderr)
        (log_dir / f"{name}.rc").write_text(f"{proc.returncode}\n")
    return proc


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def error_line(stderr: str) -> str:
    """The first stderr line that names an error (kiln prints build progress on stderr too), else the first line."""
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    return first_line(errors[0]) if errors else first_line(stderr)


def run_kiln(case: Case, pt2: Path, in_path: Path, out_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    json_path = out_path.with_suffix(".result.json")
    for stale in (out_path, json_path):
        stale.unlink(missing_ok=True)
    cmd = [args.kiln, "bench", str(pt2), "--device", args.device, "--inputs", str(in_path),
           "--outputs", str(out_path), "--json", str(json_path),
           "--iters", str(args.iters), "--warmup", str(args.warmup)]
    proc = run_logged(cmd, f"{case.name}.kiln-bench", args)
    if proc.returncode != 0 and "unknown command" in proc.stderr:
        return run_kiln_whole_process(case, pt2, in_path, out_path, args)
    result: dict[str, Any] = {"mode": "bench", "cmd": shlex.join(cmd), "rc": proc.returncode}
    if proc.returncode not in (0, 1):
        return {**result, "error": f"rc {proc.returncode}: " + error_line(proc.stderr)}
    notes = ["kiln bench exited 1 (mismatch): " + error_line(proc.stderr)] if proc.returncode == 1 else []
    try:
        result.update(json.loads(json_path.read_text()))
    except (OSError, json.JSONDecodeError) as e:
        notes.append(f"no readable --json file ({type(e).__name__})")
    if notes:
        result["note"] = "; ".join(notes)
    return result


def run_kiln_whole_process(case: Case, pt2: Path, in_path: Path, out_path: Path,
                           args: argparse.Namespace) -> dict[str, Any]:
    """For a kiln without `bench`: wall time of whole `kiln run` processes (load, compile, one call, write)."""
    cmd = [args.kiln, "run", str(pt2), "--inputs", str(in_path), "--outputs", str(out_path), "--device", args.device]
    result: dict[str, Any] = {
        "mode": "run-process", "cmd": shlex.join(cmd),
        "note": "no `kiln bench` in this kiln: time is the whole `kiln run` process (compile + 1 call + I/O)",
    }
    times: list[float] = []
    for i in range(FALLBACK_RUNS):
        t = time.perf_counter()
        proc = run_logged(cmd, f"{case.name}.kiln-run{i}", args)
        times.append((time.perf_counter() - t) * 1e3)
        result["rc"] = proc.returncode
        if proc.returncode != 0:
            result["error"] = f"rc {proc.returncode}: " + error_line(proc.stderr)
            return result
    return {**result, **summarize(times, case.batch)}


def within_tolerance(err: float, ref_max: float) -> bool:
    return err <= CHECK_RTOL * max(1.0, ref_max)  # False for NaN


def check_output(out_path: Path, ref: torch.Tensor) -> dict[str, Any]:
    from safetensors.torch import load_file

    if not out_path.exists():
        return {"check": "no output file"}
    got = load_file(str(out_path)).get("output.0")
    if got is None:
        return {"check": "FAIL: no output.0"}
    ref = ref.detach().cpu()
    if tuple(got.shape) != tuple(ref.shape):
        return {"check": f"FAIL: shape {list(got.shape)} != {list(ref.shape)}"}
    ref_max = ref.float().abs().max().item()
    if not math.isfinite(ref_max):
        return {"check": "reference not finite", "ref_max_abs": ref_max}
    err = max_abs_err(got, ref)
    return {"check": "PASS" if within_tolerance(err, ref_max) else "FAIL", "max_abs_err": err, "ref_max_abs": ref_max,
            "max_rel_err": err / ref_max if ref_max > 0 else None, "output_dtype": str(got.dtype)}


# --------------------------------------------------------------------------
# one case
# --------------------------------------------------------------------------


def attempt(row: dict[str, Any], key: str, fn: Callable[[], dict[str, Any]], save: Callable[[], None]) -> None:
    """Run one measurement; an exception is recorded in the row instead of ending the run."""
    t = time.perf_counter()
    try:
        row[key] = fn()
    except Exception as e:  # noqa: BLE001 - one failing system must not cost the others
        traceback.print_exc()
        row[key] = {"error": f"{type(e).__name__}: {first_line(str(e))}"}
    entry = row[key]
    shown = f"{entry['median_ms']:.3f} ms" if "median_ms" in entry else entry.get("error", "")
    log(f"{row['case']}: {key} {shown} ({time.perf_counter() - t:.1f} s)")
    save()


@dataclass
class Loaded:
    """A case's model and inputs on the device, kept from the first phase for the torch.compile phase."""

    case: Case
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    ref: torch.Tensor  # eager output


def measure_case(case: Case, args: argparse.Namespace, workdir: Path, row: dict[str, Any],
                 save: Callable[[], None]) -> Loaded | None:
    """Phase 1: build, export, eager, kiln, eager + graph. Returns what phase 2 needs, None if eager failed."""
    log(f"{case.name}: building")
    torch.manual_seed(0)
    model = case.build().eval().half()
    inputs_cpu = case.make_inputs(torch.Generator().manual_seed(0))
    pt2 = workdir / f"{case.name}.pt2"
    in_path = workdir / f"{case.name}.in.safetensors"
    out_path = workdir / f"{case.name}.out.safetensors"

    from safetensors.torch import save_file

    t = time.perf_counter()
    torch.export.save(torch.export.export(model, inputs_cpu), str(pt2))  # on the CPU: no device-typed weights
    save_file({f"input.{i}": x.contiguous() for i, x in enumerate(inputs_cpu)}, str(in_path))
    row["export_s"] = time.perf_counter() - t
    log(f"{case.name}: exported ({row['export_s']:.1f} s, {pt2.stat().st_size / 2**20:.0f} MiB)")

    model = model.to(args.device)
    inputs = tuple(x.to(args.device) for x in inputs_cpu)
    ref: torch.Tensor | None = None

    def eager() -> dict[str, Any]:
        nonlocal ref
        stats, ref = time_eager(model, inputs, args, case.batch)
        return stats

    attempt(row, "eager", eager, save)
    if ref is None:
        return None
    row["ref_max_abs"] = ref.float().abs().max().item()
    loaded = Loaded(case, model, inputs, ref)

    def kiln() -> dict[str, Any]:
        result = run_kiln(case, pt2, in_path, out_path, args)
        return result if "error" in result else {**result, **check_output(out_path, loaded.ref)}

    attempt(row, "kiln", kiln, save)
    if args.device == "cuda":
        attempt(row, "eager_graph", partial(time_cuda_graph, model, inputs, case.channels_last, args, case.batch, ref),
                save)
    return loaded


def compile_case(loaded: Loaded, args: argparse.Namespace, row: dict[str, Any], save: Callable[[], None]) -> None:
    """Phase 2: torch.compile default and reduce-overhead (GPU only), each on fresh dynamo state."""
    modes = [("compile", "default")] + ([("reduce_overhead", "reduce-overhead")] if args.device == "cuda" else [])
    for key, mode in modes:
        elapsed = time.perf_counter() - T0
        if args.budget_s and elapsed > args.budget_s - COMPILE_RESERVE_S:
            row[key] = {"error": f"skipped: {elapsed:.0f} s elapsed, --budget-s {args.budget_s}"}
            log(f"{row['case']}: {key} {row[key]['error']}")
            save()
            continue
        attempt(row, key, partial(time_compile, loaded.model, loaded.inputs, mode, args, loaded.case.batch,
                                  loaded.ref), save)


def run_suite(cases: list[Case], args: argparse.Namespace, workdir: Path, rows: list[dict[str, Any]],
              save: Callable[[], None]) -> None:
    """Everything but torch.compile for every case first, so a long compile phase cannot cost kiln's numbers."""
    loaded: list[tuple[Loaded, dict[str, Any]]] = []
    for case in cases:
        row: dict[str, Any] = {"case": case.name, "batch": case.batch}
        rows.append(row)
        try:
            result = measure_case(case, args, workdir, row, save)
            if result is not None:
                loaded.append((result, row))
        except Exception as e:  # noqa: BLE001 - keep the other cases
            traceback.print_exc()
            row["error"] = f"{type(e).__name__}: {first_line(str(e))}"
            log(f"{case.name}: failed: {row['error']}")
        save()
        gc.collect()
    if args.skip_torch_compile:
        return
    log("torch.compile phase")
    for item, row in loaded:
        compile_case(item, args, row, save)
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def command_output(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def kiln_commit(arg: str | None) -> str:
    if arg:
        return arg
    head = command_output(["git", "rev-parse", "--short", "HEAD"], REPO_ROOT)
    if head:
        dirty = command_output(["git", "status", "--porcelain", "--", "src", "include", "tools", "cmake",
                                "CMakeLists.txt"], REPO_ROOT)
        return head + (" (+ uncommitted changes)" if dirty else "")
    return os.environ.get("KILN_COMMIT", "unknown (pass --commit or set KILN_COMMIT)")


def machine_info(device: str) -> dict[str, str]:
    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        driver = command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        return {"gpu": name, "driver": (driver or "unknown").splitlines()[0], "slug": slug(name)}
    cpu = platform.processor() or platform.machine()
    try:
        models = [line.split(":", 1)[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")]
        cpu = models[0].strip() if models else cpu
    except OSError:
        pass
    return {"gpu": f"none (CPU: {cpu})", "driver": "n/a", "slug": "cpu-" + slug(cpu)}


def fmt_value(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"


def fmt_ms(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "—"
    if "error" in entry:
        return "skipped" if entry["error"].startswith("skipped") else "error"
    value = entry.get("median_ms")
    return "—" if value is None else fmt_value(value)


def median(entry: dict[str, Any] | None) -> float | None:
    if not entry or "error" in entry or not entry.get("median_ms"):
        return None
    return entry["median_ms"]


def speedup(baselines: list[float | None], kiln_ms: float | None) -> str:
    known = [b for b in baselines if b is not None]
    return f"{min(known) / kiln_ms:.2f}x" if known and kiln_ms else "—"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


TORCH_SYSTEMS = ("eager", "compile", "reduce_overhead", "eager_graph")


def check_cell(kiln: dict[str, Any]) -> str:
    if "error" in kiln:
        return "error: " + kiln["error"]
    if "max_abs_err" in kiln:
        return f"{kiln['check']} (abs {kiln['max_abs_err']:.2e}, rel {kiln['max_rel_err'] or 0:.2e})"
    return kiln.get("check", "—")


def notes_cell(row: dict[str, Any]) -> str:
    kiln = row.get("kiln") or {}
    notes = [row["error"]] if row.get("error") else []
    notes += [kiln["note"]] if kiln.get("note") else []
    if kiln.get("engines") is not None:
        notes.append(f"{kiln['engines']} engines, {kiln.get('fallback_nodes', '?')} fallback nodes")
    ref_max = row.get("ref_max_abs")
    for key in TORCH_SYSTEMS:
        entry = row.get(key) or {}
        err = entry.get("max_abs_err_vs_eager")
        if "error" in entry:
            notes.append(f"{key}: {entry['error']}")
        elif err is not None and ref_max is not None and not within_tolerance(err, ref_max):
            notes.append(f"{key} output differs from eager by {err:.2e}")
    return "; ".join(notes)


def table_row(row: dict[str, Any]) -> list[str]:
    kiln = row.get("kiln") or {}
    eager, compile_, ro, graph = (median(row.get(k)) for k in TORCH_SYSTEMS)
    kiln_ms = median(kiln)
    kiln_cell = fmt_ms(kiln) + (f" ({fmt_value(kiln['p90_ms'])})" if kiln_ms and kiln.get("p90_ms") else "")
    if kiln.get("mode") != "bench":
        kiln_ms = None  # a whole-process time is no forward time: no speed-ups
    compile_s = " / ".join(
        f"{row[k]['compile_s']:.1f}" if "compile_s" in (row.get(k) or {}) else "—"
        for k in ("compile", "reduce_overhead")
    )
    build_s = f"{kiln['build_s']:.1f}" if isinstance(kiln.get("build_s"), (int, float)) else "—"
    cells = [row["case"], *(fmt_ms(row.get(k)) for k in TORCH_SYSTEMS), kiln_cell,
             speedup([compile_, ro], kiln_ms), speedup([eager, compile_, ro, graph], kiln_ms),
             compile_s, build_s, check_cell(kiln), notes_cell(row)]
    return [cell(c) for c in cells]


HEADER = ["case", "eager ms", "torch.compile ms", "reduce-overhead ms", "eager+graph ms", "kiln ms (p90)",
          "kiln vs best torch.compile mode", "kiln vs best of all",
          "torch.compile compile s (default / reduce-overhead)", "kiln build s", "kiln check", "notes"]


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    cache = "fresh per compile" if meta["cold_compile"] else "fresh per run, shared by both modes"
    lines = [
        f"# kiln benchmark {meta['date']}",
        "",
        f"- GPU: {meta['gpu']}, driver {meta['driver']}",
        f"- torch {meta['torch']} (CUDA {meta['cuda']}, cuDNN {meta['cudnn']}), torchvision {meta['torchvision']}, "
        f"transformers {meta['transformers']}",
        f"- kiln commit: {meta['kiln_commit']}",
        f"- command: `{meta['command']}`",
        f"- fp16, random weights (seed 0), eval, no_grad, the same inputs for every system; ms = median of "
        f"{meta['iters']} {meta['timer']} timings of one forward after {meta['warmup']} warm-up calls, inputs and "
        "outputs on the device; kiln also p90",
        "- eager and torch.compile with cudnn.benchmark off; eager+graph: cudnn.benchmark on, channels_last for "
        f"resnet50, one CUDA graph replayed; torch.compile compile s = first call, inductor cache {cache}",
        "- speed-ups: best torch.compile mode = min(compile, reduce-overhead) / kiln; "
        "best of all = min(eager, compile, reduce-overhead, eager+graph) / kiln (> 1: kiln is faster)",
        f"- kiln check: {CHECK_RULE}",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(table_row(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def result_paths(out_dir: Path, stem: str) -> tuple[Path, Path]:
    """<stem>.md/.json in out_dir, with -2, -3, ... appended rather than overwriting an earlier run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    candidate, n = stem, 1
    while (out_dir / f"{candidate}.md").exists() or (out_dir / f"{candidate}.json").exists():
        n += 1
        candidate = f"{stem}-{n}"
    return out_dir / f"{candidate}.md", out_dir / f"{candidate}.json"


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default="build/kiln", help="kiln binary (default build/kiln)")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--iters", type=int, default=100, help="timed calls per system (default 100)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up calls before timing (default 20, at least 10)")
    p.add_argument("--out", default="bench/results", help="directory for the .md/.json results (default bench/results)")
    p.add_argument("--workdir", help="directory for .pt2 and safetensors files (default: a temporary directory)")
    p.add_argument("--skip-torch-compile", action="store_true", help="skip both torch.compile modes")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu only to smoke-test this script: perf_counter timing, no CUDA graphs, no reduce-overhead")
    p.add_argument("--tiny", action="store_true", help="tiny models instead of the suite (smoke tests)")
    p.add_argument("--log", help="keep every subprocess's command, stdout, stderr and exit code in this directory")
    p.add_argument("--commit", help="kiln commit to report (default: git rev-parse --short HEAD, else $KILN_COMMIT)")
    p.add_argument("--kiln-timeout", type=int, default=180, help="seconds before one kiln process is killed (180)")
    p.add_argument("--cold-compile", action="store_true",
                   help="fresh inductor/triton caches for every torch.compile (slower; default: shared within the run)")
    p.add_argument("--budget-s", type=int, default=540,
                   help=f"start no torch.compile step after this many seconds minus {COMPILE_RESERVE_S} "
                        "(default 540; 0: no limit); eager, graph and kiln always run")
    args = p.parse_args()
    if args.device == "cuda" and args.warmup < 10:
        p.error("--warmup must be at least 10 on the GPU")
    if args.iters < 1:
        p.error("--iters must be positive")
    return args


def main() -> int:
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no GPU (use --device cpu for a smoke test)")
    kiln_path = shutil.which(args.kiln) or (args.kiln if Path(args.kiln).is_file() else None)
    if not kiln_path:
        sys.exit(f"error: no kiln binary at {args.kiln} (pass --kiln PATH)")
    args.kiln = str(Path(kiln_path).resolve())

    cases = suite(args.tiny)
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = sorted(set(wanted) - {c.name for c in cases})
        if unknown:
            sys.exit(f"error: unknown case(s) {', '.join(unknown)}; known: {', '.join(c.name for c in cases)}")
        cases = [c for c in cases if c.name in wanted]
    if args.log:
        Path(args.log).mkdir(parents=True, exist_ok=True)

    scratch = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    # A fresh inductor/triton cache per run, so compile times do not depend on earlier runs.
    # (Within the run, the second torch.compile mode of a model may reuse kernels of the first.)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(scratch / "inductor-cache"))
    workdir = Path(args.workdir) if args.workdir else scratch
    workdir.mkdir(parents=True, exist_ok=True)

    import torchvision
    import transformers

    machine = machine_info(args.device)
    now = datetime.now(timezone.utc)
    meta = {
        "date": now.strftime("%Y-%m-%d %H:%M UTC"), "gpu": machine["gpu"], "driver": machine["driver"],
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "torchvision": torchvision.__version__, "transformers": transformers.__version__,
        "kiln_commit": kiln_commit(args.commit), "kiln": args.kiln,
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "device": args.device, "iters": args.iters, "warmup": args.warmup,
        "timer": "CUDA-event" if args.device == "cuda" else "perf_counter",
        "check_rule": CHECK_RULE, "inductor_cache": os.environ["TORCHINDUCTOR_CACHE_DIR"],
        "cold_compile": args.cold_compile, "budget_s": args.budget_s,
    }
    stem = now.strftime("%Y-%m-%d") + "-" + machine["slug"] + ("-tiny" if args.tiny else "")
    md_path, json_path = result_paths(Path(args.out), stem)
    rows: list[dict[str, Any]] = []

    def save() -> None:
        md_path.write_text(render(meta, rows))
        json_path.write_text(json.dumps({"meta": meta, "cases": rows}, indent=2, default=str) + "\n")

    log(f"{machine['gpu']}; torch {torch.__version__}; kiln {meta['kiln_commit']}; writing {md_path}")
    try:
        with torch.no_grad():
            run_suite(cases, args, workdir, rows, save)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(render(meta, rows), end="")
    log(f"done; results in {md_path} and {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
