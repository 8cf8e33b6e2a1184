"""PyTorch peer of dev/cuda/attention.cu: torch.nn.functional.scaled_dot_product_attention(is_causal=True)
with each of its cuDNN and flash backends forced, bf16, on the same shapes and the trainer's layout (q, k,
v sliced out of one (B, T, 3C) tensor), printing the same columns: fwd, bwd, fwd+bwd ms; TF/s as F,
2.5F, 3.5F over those times with F = 4·B·NH·T²·hs/2; scratch = peak memory of fwd+bwd beyond qkv, out,
dout, dqkv. A backend this PyTorch build or GPU lacks is reported and skipped.
    python3 dev/cuda/attention_torch.py
"""
import torch
import torch.nn.functional as F
from torch_timing import time_ms  # dev/cuda/torch_timing.py (this script's folder is on sys.path)
from torch.nn.attention import sdpa_kernel, SDPBackend

SHAPES = [(64, 1024, 12, 64), (4, 4096, 16, 128), (4, 4096, 32, 128)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def bench(B, T, NH, hs, name, backend):
    C = NH * hs
    torch.manual_seed(0)
    qkv = ((torch.rand(B, T, 3 * C, device="cuda") * 2 - 1) * 2).bfloat16().requires_grad_()
    dout = (torch.rand(B, T, C, device="cuda") * 2 - 1).bfloat16()

    def attn():
        q, k, v = (x.view(B, T, NH, hs).transpose(1, 2) for x in qkv.split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(B, T, C)

    with sdpa_kernel(backend):
        out = attn()

        def fwd():
            with torch.no_grad():
                attn()

        def bwd():
            qkv.grad = None
            out.backward(dout, retain_graph=True)

        def fwd_bwd():
            qkv.grad = None
            attn().backward(dout)

        t_f, t_b, t_fb = time_ms(fwd, 20), time_ms(bwd, 20), time_ms(fwd_bwd, 20)
        torch.cuda.synchronize()
        qkv.grad = None
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fwd_bwd(); torch.cuda.synchronize()
        # peak beyond what was allocated before (qkv, dout, the retained out), minus the new out and dqkv
        extra = torch.cuda.max_memory_allocated() - base - (qkv.numel() + dout.numel()) * 2
    Fl = 4.0 * B * NH * T * T * hs / 2
    shape = f"B={B} T={T} NH={NH} hs={hs}"
    print(f"{shape:26s} | {'torch sdpa ' + name + ' (bf16)':34s} | {t_f:8.3f} | {t_b:8.3f} | {t_fb:8.3f} | "
          f"{Fl / t_f * 1e-9:6.0f} | {2.5 * Fl / t_b * 1e-9:6.0f} | {3.5 * Fl / t_fb * 1e-9:6.0f} | "
          f"{extra / 2**20:9.1f} MiB")


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'shape':26s} | {'variant':34s} | {'fwd ms':>8s} | {'bwd ms':>8s} | {'f+b ms':>8s} | {'fwdTF':>6s} | "
          f"{'bwdTF':>6s} | {'f+b TF':>6s} | scratch")
    for (B, T, NH, hs) in SHAPES:
        for name, backend in BACKENDS:
            try:
                bench(B, T, NH, hs, name, backend)
            except RuntimeError as e:  # no kernel of that backend for this shape, GPU or build
                print(f"B={B} T={T} NH={NH} hs={hs}: torch sdpa {name}: not available ({str(e).splitlines()[0][:80]})")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
