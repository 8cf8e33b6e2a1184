"""llama_check.py: the Llama-style model's CPU reference (dev/ref/model_ref.h) and its export
(llmc/io/hf_model.h) against Hugging Face transformers' LlamaForCausalLM, an implementation of the same
architecture that this project did not write. Needs PyTorch and transformers (a GPU is not needed).

    make build/dev/llama_ref_dump && python3 dev/interop/llama_check.py

The script
  1. runs build/dev/llama_ref_dump: a small random model (L=2, C=128, NH=4 on NKV=2 kv heads, F=344,
     V=997, theta 5e5) through the reference in double, exported to DIR/hf, with its logits and loss on
     random tokens;
  2. loads DIR/hf with LlamaForCausalLM.from_pretrained as a user would (nothing missing or left over),
     in float64 with eager attention, and runs the same tokens;
  3. compares: logits relative L2 error <= 1e-5, loss relative difference <= 1e-6;
  4. the import (llmc/io/hf_model_import.h, train_gpt's -init): moves every weight a little, saves the model
     with transformers' own save_pretrained (fp32), and runs build/dev/llama_ref_dump DIR --init on that
     directory: the reference's loss on the same tokens against transformers', within the same 1e-6;
  5. saves that model again split into several files with an index (max_shard_size a third of it), and
     its import gives bitwise the loss of step 4's.
Why these tolerances: both sides compute in double from the same fp32 weights; what differs is that
transformers computes RoPE's angles in fp32 (inv_freq and position x inv_freq), off by up to
t * 2^-24 relative at position t < 33, ~2e-6 rad, which moves the attention scores and the logits by
~1e-6 relative. Anything wrong in the architecture (RoPE's pairing or frequencies, the kv head a query
head reads, RMSNorm's eps inside or outside the root, SwiGLU's gate and up swapped, q/k/v rows cut in
the wrong place) is off by O(1e-2) or more. Prints one line per check, then 'llama_check: N passed, M
failed', and exits non-zero on any failure.
"""
import argparse
import os
import subprocess
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM
from checks import check, finish  # dev/interop/checks.py (this script's folder is on sys.path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", default="build/dev/llama_ref_dump", help="the reference's dump tool")
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--logits_tol", type=float, default=1e-5)
    ap.add_argument("--loss_tol", type=float, default=1e-6)
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="llama_check.")
    os.makedirs(d, exist_ok=True)
    r = subprocess.run([a.dump, d], capture_output=True, text=True)
    print(r.stdout.strip())
    if not check(r.returncode == 0, f"{a.dump} {d} (exit {r.returncode}) {r.stderr.strip()}"):
        return
    model, info = LlamaForCausalLM.from_pretrained(os.path.join(d, "hf"), torch_dtype=torch.float64,
                                                   attn_implementation="eager", output_loading_info=True)
    left = {k: v for k, v in info.items() if v}
    check(not left, f"from_pretrained: nothing missing, unexpected or mismatched {left if left else ''}")
    cfg = model.config
    check(cfg.num_key_value_heads == 2 and cfg.num_attention_heads == 4 and not cfg.tie_word_embeddings,
          f"config: {cfg.num_attention_heads} heads on {cfg.num_key_value_heads} kv heads, untied head")
    tokens = np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32).reshape(2, -1)
    inputs = torch.from_numpy(tokens[:, :-1].astype(np.int64))
    targets = torch.from_numpy(tokens[:, 1:].astype(np.int64))
    B, T = inputs.shape
    ref_logits = torch.from_numpy(np.fromfile(os.path.join(d, "logits.bin"), dtype=np.float64).reshape(B, T, -1))
    ref_loss = float(open(os.path.join(d, "loss.txt")).read())
    with torch.no_grad():
        logits = model(inputs).logits
    check(logits.shape == ref_logits.shape, f"logits shape {tuple(logits.shape)} vs {tuple(ref_logits.shape)}")
    rel = ((logits - ref_logits).norm() / ref_logits.norm()).item()
    maxd = (logits - ref_logits).abs().max().item()
    check(rel <= a.logits_tol, f"logits: relative L2 error {rel:.2e} (tol {a.logits_tol:.0e}), max |diff| {maxd:.2e} "
          f"of max |logit| {ref_logits.abs().max().item():.2f}")
    loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1)).item()
    lrel = abs(loss - ref_loss) / abs(ref_loss)
    check(lrel <= a.loss_tol, f"loss: transformers {loss:.12f}, reference {ref_loss:.12f} (rel diff {lrel:.1e}, "
          f"tol {a.loss_tol:.0e})")

    # 4. transformers' own file read by the import: other weights than the export's (each moved by 1% of
    # its scale), rounded to fp32 as saved, so that both sides compute with the same numbers
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * p.abs().mean() * torch.randn_like(p))
    model = model.to(torch.float32)
    saved = os.path.join(d, "saved")
    model.save_pretrained(saved, safe_serialization=True)
    model = model.to(torch.float64)
    with torch.no_grad():
        loss2 = F.cross_entropy(model(inputs).logits.reshape(B * T, -1), targets.reshape(-1)).item()
    r = subprocess.run([a.dump, d, "--init", saved], capture_output=True, text=True)
    print(r.stdout.strip())
    if not check(r.returncode == 0, f"{a.dump} {d} --init {saved} (exit {r.returncode}) {r.stderr.strip()}"):
        return
    init_loss = float(open(os.path.join(d, "loss_init.txt")).read())
    lrel2 = abs(loss2 - init_loss) / abs(loss2)
    check(lrel2 <= a.loss_tol and abs(loss2 - loss) > 1e-4,
          f"import of save_pretrained's file: transformers {loss2:.12f}, reference {init_loss:.12f} (rel diff "
          f"{lrel2:.1e}, tol {a.loss_tol:.0e}; the export's loss was {loss:.6f})")

    # 5. the same model saved split into files of at most a third of its size (model-0000N-of-M and
    # model.safetensors.index.json, llmc/io/hf_weights.h): the import reads the same numbers
    model = model.to(torch.float32)
    split = os.path.join(d, "split")
    size = sum(p.numel() * 4 for p in model.parameters())
    model.save_pretrained(split, safe_serialization=True, max_shard_size=size // 3 + 1)
    files = sorted(f for f in os.listdir(split) if f.endswith(".safetensors"))
    r = subprocess.run([a.dump, d, "--init", split], capture_output=True, text=True)
    if not check(r.returncode == 0 and len(files) >= 2 and "model.safetensors.index.json" in os.listdir(split),
                 f"save_pretrained split the model into {files} with an index; {a.dump} {d} --init {split} "
                 f"(exit {r.returncode}) {r.stderr.strip()}"):
        return
    split_loss = float(open(os.path.join(d, "loss_init.txt")).read())
    check(split_loss == init_loss, f"import of the split model: reference {split_loss:.12f}, the same as from one "
          f"file, {init_loss:.12f}")


if __name__ == "__main__":
    main()
    finish("llama_check")
