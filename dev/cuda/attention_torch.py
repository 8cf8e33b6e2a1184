"""PyTorch peer of dev/cuda/attention.cu: torch.nn.functional.scaled_dot_product_attention(is_causal=True)
with each of its cuDNN and flash backends forced, bf16, on the same shapes and the trainer's layout (q, k,
v sliced out of one (B, T, (NH + 2·NKV)·hs) tensor; GPT-2's (B, T, 3C) when NKV = NH), printing the same
columns: fwd, bwd, fwd+bwd ms; TF/s as F, 2.5F, 3.5F over those times with F = 4·B·NH·T²·hs/2; scratch =
peak memory of fwd+bwd beyond qkv, out, dout, dqkv. The grouped-query shape (NH=32/8: 32 query heads on
8 kv heads) runs twice per backend: SDPA's own enable_gqa=True ("gqa"), and k, v repeated to NH heads
with repeat_interleave before a multi-head SDPA ("rep-kv", the copies counted in the times). A backend
this PyTorch build or GPU lacks (for a shape or for enable_gqa) is reported and skipped.
    python3 dev/cuda/attention_torch.py
"""
import torch
import torch.nn.functional as F
from torch_timing import time_ms  # dev/cuda/torch_timing.py (this script's folder is on sys.path)
from torch.nn.attention import sdpa_kernel, SDPBackend

SHAPES = [(64, 1024, 12, 12, 64), (4, 4096, 16, 16, 128), (4, 4096, 32, 32, 128), (4, 4096, 32, 8, 128)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def bench(B, T, NH, NKV, hs, name, backend, gqa):
    C, Ckv = NH * hs, NKV * hs
    torch.manual_seed(0)
    qkv = ((torch.rand(B, T, C + 2 * Ckv, device="cuda") * 2 - 1) * 2).bfloat16().requires_grad_()
    dout = (torch.rand(B, T, C, device="cuda") * 2 - 1).bfloat16()

    def attn():
        q, k, v = qkv.split([C, Ckv, Ckv], dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k, v = (x.view(B, T, NKV, hs).transpose(1, 2) for x in (k, v))
        if gqa == "rep-kv":
            k, v = (x.repeat_interleave(NH // NKV, dim=1) for x in (k, v))
        kw = {"enable_gqa": True} if gqa == "gqa" else {}
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
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
    label = f"torch sdpa {name}{' ' + gqa if gqa else ''} (bf16)"
    print(f"{shape_name(B, T, NH, NKV, hs):26s} | {label:34s} | {t_f:8.3f} | {t_b:8.3f} | {t_fb:8.3f} | "
          f"{Fl / t_f * 1e-9:6.0f} | {2.5 * Fl / t_b * 1e-9:6.0f} | {3.5 * Fl / t_fb * 1e-9:6.0f} | "
          f"{extra / 2**20:9.1f} MiB")


def shape_name(B, T, NH, NKV, hs):
    return f"B={B} T={T} NH={NH if NKV == NH else f'{NH}/{NKV}'} hs={hs}"


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"{'shape':26s} | {'variant':34s} | {'fwd ms':>8s} | {'bwd ms':>8s} | {'f+b ms':>8s} | {'fwdTF':>6s} | "
          f"{'bwdTF':>6s} | {'f+b TF':>6s} | scratch")
    for (B, T, NH, NKV, hs) in SHAPES:
        for name, backend in BACKENDS:
            for gqa in ([None] if NKV == NH else ["gqa", "rep-kv"]):
                try:
                    bench(B, T, NH, NKV, hs, name, backend, gqa)
                except (RuntimeError, TypeError) as e:  # no kernel of that backend (shape, GPU, build, enable_gqa)
                    print(f"{shape_name(B, T, NH, NKV, hs)}: torch sdpa {name}{' ' + gqa if gqa else ''}: not available "
                          f"({(str(e).splitlines() or [''])[0][:80]})")
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
