"""PyTorch peers of dev/cuda/fused_lce.cu: eager and torch.compile of
    F.cross_entropy(F.linear(x, W)[:, :V].float(), targets)
on the same shapes and inputs, printing the same columns (fwd, bwd, fwd+bwd ms, TF/s as 3F/time,
ratio to PyTorch's own three GEMMs, extra memory beyond inputs and gradients).
    python3 dev/cuda/fused_lce_torch.py [--small]
"""
import sys
import torch
import torch.nn.functional as F
from torch_timing import time_ms  # dev/cuda/torch_timing.py (this script's folder is on sys.path)

SHAPES = [(1024, 768, 50257, 50304), (1024, 4096, 128256, 128256),
          (65536, 768, 50257, 50304), (16384, 1600, 50257, 50304),
          (8192, 4096, 128256, 128256), (16384, 4096, 128256, 128256)]


def head_loss(x, W, t, V):
    return F.cross_entropy(F.linear(x, W)[:, :V].float(), t)


def bench(N, C, V, Vp, compiled):
    torch.manual_seed(0)
    x = ((torch.rand(N, C, device="cuda") * 2 - 1) * 3 ** 0.5).bfloat16().requires_grad_()
    W = ((torch.rand(Vp, C, device="cuda") * 2 - 1) * 3 / C ** 0.5).bfloat16().requires_grad_()
    t = torch.randint(0, V, (N,), device="cuda")
    F2 = 2.0 * N * C * V
    reps = 5 if F2 > 5e12 else 15
    fn = torch.compile(head_loss) if compiled else head_loss

    with torch.no_grad():
        logits = torch.empty(N, Vp, device="cuda", dtype=torch.bfloat16)
        gemms = time_ms(lambda: (torch.mm(x, W.t(), out=logits), logits @ W, logits.t() @ x), reps)
        del logits

    def fwd():
        with torch.no_grad():
            fn(x, W, t, V)

    def fwd_bwd():
        x.grad = None; W.grad = None
        fn(x, W, t, V).backward()

    t_fwd = time_ms(fwd, reps)
    t_fb = time_ms(fwd_bwd, reps)
    torch.cuda.synchronize()
    x.grad = None; W.grad = None
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fwd_bwd(); torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - (x.numel() + W.numel()) * 2  # minus the bf16 grads
    name = "torch.compile" if compiled else "torch eager"
    print(f"{N:6d} x {C:4d} x {V:6d} | {name:34s} | {t_fwd:8.2f} | {t_fb - t_fwd:8.2f} | {t_fb:8.2f} | "
          f"{3 * F2 / t_fb * 1e-9:6.0f} | {t_fb / gemms:5.2f}x | {extra / 2**20:9.1f} MiB  (torch GEMMs {gemms:.2f} ms)")


def main():
    small = "--small" in sys.argv
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'N x C x V':22s} | {'variant':34s} | {'fwd ms':>8s} | {'bwd ms':>8s} | {'f+b ms':>8s} | {'TF/s':>6s} | "
          f"{'xGEMMs':>6s} | scratch")
    for (N, C, V, Vp) in SHAPES:
        if small and N != 1024:
            continue
        for compiled in (False, True):
            try:
                bench(N, C, V, Vp, compiled)
            except torch.OutOfMemoryError:
                print(f"{N:6d} x {C:4d} x {V:6d} | {'torch.compile' if compiled else 'torch eager':34s} | out of memory")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
