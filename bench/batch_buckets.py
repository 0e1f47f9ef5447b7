#!/usr/bin/env python3
"""resnet50 over a batch range on CUDA as padded batch buckets, called from
PyTorch with CUDA tensors, in one process run on one GPU:

- on device: kiln pads the inputs and cuts the outputs on the GPU
  (Session::run into output memory PyTorch allocates), the path CUDA
  tensors take;
- host-staged: the same compiled module called on a host copy of the input,
  its output copied back to the GPU (the path programs with several
  profiles took before);
- eager fp16: the same weights in torch eager float16 on the GPU.

The model is torchvision's resnet50 with random weights (seed 0), exported
with a dynamic batch (1..64) and compiled with `kiln compile --device cuda
--precision fp16 --shape x:1x3x224x224,8x3x224x224,16x3x224x224`, which
makes buckets 1, 2, 4, 8 and 16. Each time is the median of 30 calls from a
CUDA input to a synchronized CUDA output (perf_counter around the call and
torch.cuda.synchronize), after one warm-up call. Errors are against torch
eager float32 on the CPU.

    python3 bench/batch_buckets.py --kiln build/kiln --workdir /tmp/r50
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time

import torch
import torchvision

import kiln


def median_ms(fn, n=30):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[n // 2] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True, help="the kiln CLI")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    pt2, program = os.path.join(args.workdir, "r50dyn.pt2"), os.path.join(args.workdir, "r50dyn.kiln")
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    torch.export.save(torch.export.export(model, (torch.randn(2, 3, 224, 224),), dynamic_shapes={"x": {0: batch}}), pt2)
    subprocess.run([args.kiln, "compile", pt2, "-o", program, "--device", "cuda", "--precision", "fp16", "--no-cache",
                    "--shape", "x:1x3x224x224,8x3x224x224,16x3x224x224"], check=True)
    eager = torchvision.models.resnet50().eval()
    eager.load_state_dict(model.state_dict())
    eager = eager.half().cuda()
    compiled = kiln.load(program, device="cuda")

    print("| batch | on device (ms) | host-staged (ms) | eager fp16 (ms) | max abs err (outputs up to) |")
    print("| --- | --- | --- | --- | --- |")
    for b in [1, 3, 4, 5, 8, 11, 16]:
        x = torch.randn(b, 3, 224, 224)
        with torch.no_grad():
            want = model(x)
        xd = x.cuda()
        got = compiled(xd)
        assert compiled.host_staging_reason is None, compiled.host_staging_reason
        on_device = median_ms(lambda: compiled(xd))
        through_host = lambda t: compiled(t.cpu()).cuda()  # noqa: E731
        staged = through_host(xd)
        host = median_ms(lambda: through_host(xd))
        assert torch.equal(got.cpu(), staged.cpu()), f"batch {b}: the two paths disagree"
        xh = xd.half()
        with torch.no_grad():
            ref = median_ms(lambda: eager(xh))
        err, scale = (got.float().cpu() - want).abs().max().item(), want.abs().max().item()
        print(f"| {b} | {on_device:.2f} | {host:.2f} | {ref:.2f} | {err:.3g} ({scale:.3g}) |")


if __name__ == "__main__":
    main()
