"""Latency of a kiln-compiled torchvision model called from PyTorch on CUDA:
eager PyTorch, kiln on PyTorch's CUDA tensors (DLPack, current stream) and
kiln through host memory (the input copied to the host, the call on host
tensors, the output copied back), in one process (CUDA events, median of
--iters).

    python3 bench/python_path.py --batch 8 --iters 100
"""

import argparse
import statistics

import torch
import torchvision

import kiln


def timed(fn, x, iters):
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None).eval().cuda()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda")
    compiled = kiln.compile(model, (x,), device="cuda", cache_dir="")
    with torch.no_grad():
        eager = timed(model, x, args.iters)
        on_device = timed(compiled, x, args.iters)
        through_host = timed(lambda t: compiled(t.cpu()).cuda(), x, args.iters)
    print(f"{args.model} batch {args.batch} on {torch.cuda.get_device_name()}: eager {eager:.3f} ms, "
          f"kiln on CUDA tensors {on_device:.3f} ms, kiln through host memory {through_host:.3f} ms")


if __name__ == "__main__":
    main()
