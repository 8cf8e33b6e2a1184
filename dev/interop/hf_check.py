"""hf_check.py: train_gpt's model against Hugging Face transformers, an implementation of GPT-2 that this
project did not write. Needs a GPU, PyTorch, transformers and safetensors (doc/interop.md).

    python3 dev/interop/hf_check.py --ckpt out/interop/a --hf out/interop/hf

--ckpt is a train_gpt checkpoint (a ckpt_<step>.bin or a run's -out directory), --hf its export
(build/export_hf or train_gpt -export_hf). The script
  1. loads the export with GPT2LMHeadModel.from_pretrained and AutoTokenizer.from_pretrained, as a user
     would, and checks that nothing was missing or left over and that the tokenizer gives GPT-2's ids;
  2. writes B x (T+1) tokens (fixed seed) and runs build/dev/gpt_dump on the checkpoint: train_gpt's
     forward and backward on them (bf16 parameters and activations, the fused head);
  3. runs the same tokens through transformers in fp32 (TF32 off, eager attention) with every weight
     rounded to bf16 first, the parameters train_gpt computes with, so that the difference left is the
     bf16 rounding of activations, and compares:
       logits    relative L2 error <= 2e-2, and max |diff| <= 5% of max |logit|
       loss      relative difference <= 2e-3
       gradients relative L2 error <= 5e-2 for every parameter
  4. samples 16 tokens greedily with generate and decodes them, a smoke check of the whole stack.
Why these tolerances: bf16 keeps 8 significant bits, so each stored activation is off by up to 2^-9
relative. The residual stream is rounded about twice per layer; over L layers the relative error of
the last LayerNorm's input grows to about sqrt(2L)·2^-9 (~0.7% at L = 6), and the logits inherit it:
about 1% relative L2, 2e-2 leaves a factor of two. The loss is a mean over B·T rows of fp32 softmax
math from those logits: errors average out to ~1e-3 or less. Gradients pass through about a dozen more
roundings in the backward (the residual gradient is bf16 too): test_gpt.cu measures ~1% against the
CPU reference and checks 5e-2. A wrong formula (the attention scale, the GELU, a transposed weight, a
shifted target) is off by O(1) relative in some tensor. Tolerances can be changed with flags.
Prints one line per check, then 'hf_check: N passed, M failed', and exits non-zero on any failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, GPT2LMHeadModel

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    return ok


def rel_l2(a, b):
    return ((a - b).double().norm() / b.double().norm().clamp_min(1e-30)).item()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="train_gpt checkpoint: ckpt_<step>.bin or a run's -out directory")
    p.add_argument("--hf", required=True, help="its export: a directory with model.safetensors, config.json ...")
    p.add_argument("--dump", default="build/dev/gpt_dump", help="train_gpt's side (dev/interop/gpt_dump.cu)")
    p.add_argument("--b", type=int, default=4, help="sequences")
    p.add_argument("--t", type=int, default=64, help="tokens per sequence")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--logits_tol", type=float, default=2e-2, help="relative L2 error of the logits")
    p.add_argument("--logits_max_frac", type=float, default=5e-2, help="max |diff| as a fraction of max |logit|")
    p.add_argument("--loss_tol", type=float, default=2e-3, help="relative difference of the loss")
    p.add_argument("--grad_tol", type=float, default=5e-2, help="relative L2 error of each gradient")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    # 1. the export, loaded as a user would
    tok = AutoTokenizer.from_pretrained(args.hf)
    ids = tok("Hello world")["input_ids"]
    check(ids == [15496, 995], f"AutoTokenizer.from_pretrained: 'Hello world' -> {ids} (GPT-2: [15496, 995]; {type(tok).__name__})")
    ids = tok("Hello, my dog is cute")["input_ids"]
    check(ids == [15496, 11, 616, 3290, 318, 13779], f"'Hello, my dog is cute' -> {ids}")
    check(tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 50256, f"eos token {tok.eos_token!r} = {tok.eos_token_id}")
    model, info = GPT2LMHeadModel.from_pretrained(args.hf, output_loading_info=True, attn_implementation="eager")
    # the causal-mask buffers are not weights, and lm_head is tied to wte (checked below)
    missing = [k for k in info["missing_keys"] if not k.endswith((".attn.bias", ".attn.masked_bias", "lm_head.weight"))]
    check(not missing and not info["unexpected_keys"] and not info["mismatched_keys"],
          f"GPT2LMHeadModel.from_pretrained: missing {missing}, unexpected {info['unexpected_keys']}, "
          f"mismatched {info['mismatched_keys']}")
    cfg = model.config
    check(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(),
          "lm_head tied to wte (one tensor)")
    print(f"     model: {cfg.n_layer} layers, {cfg.n_embd} channels, {cfg.n_head} heads, context {cfg.n_positions}, "
          f"{cfg.activation_function}, eps {cfg.layer_norm_epsilon}, {sum(p.numel() for p in model.parameters())} parameters")

    # 2. train_gpt's side on the same tokens
    B, T = args.b, args.t
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, 50257, (B, T + 1), generator=g, dtype=torch.int32)
    work = tempfile.mkdtemp(prefix="hf_check.")
    save_file({"tokens": tokens}, os.path.join(work, "tokens.safetensors"))
    r = subprocess.run([args.dump, args.ckpt, os.path.join(work, "tokens.safetensors"), work], capture_output=True, text=True)
    print("     " + (r.stdout + r.stderr).strip().replace("\n", "\n     "))
    if not check(r.returncode == 0, f"{args.dump} exited {r.returncode}"):
        print(f"hf_check: {passed} passed, {failed} failed")
        sys.exit(1)
    outs = load_file(os.path.join(work, "outputs.safetensors"))
    ours_grads = load_file(os.path.join(work, "grads.safetensors"))
    ours_logits, ours_loss = outs["logits"].to(device), outs["loss"].item()

    # 3. transformers in fp32 with the bf16 parameters train_gpt computes with
    model = model.to(device).eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(prm.to(torch.bfloat16).float())
    inputs, targets = tokens[:, :T].long().to(device), tokens[:, 1:].long().to(device)
    logits = model(inputs).logits  # (B, T, V) fp32
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    loss.backward()
    e = rel_l2(ours_logits, logits.detach())
    maxd = (ours_logits - logits.detach()).abs().max().item()
    maxref = logits.detach().abs().max().item()
    agree = (ours_logits.argmax(-1) == logits.detach().argmax(-1)).float().mean().item()
    check(e <= args.logits_tol, f"logits (B {B}, T {T}, V {logits.size(-1)}): relative L2 error {e:.2e} (tol {args.logits_tol:.0e}); "
          f"argmax agrees at {100 * agree:.1f}% of positions")
    check(maxd <= args.logits_max_frac * maxref, f"logits: max |diff| {maxd:.3e}, max |logit| {maxref:.3f} "
          f"(tol {args.logits_max_frac:.0%} of it: {args.logits_max_frac * maxref:.3e})")
    d = abs(ours_loss - loss.item()) / loss.item()
    check(d <= args.loss_tol, f"loss: train_gpt {ours_loss:.6f}, transformers {loss.item():.6f}, relative difference {d:.2e} "
          f"(tol {args.loss_tol:.0e})")
    worst = (0.0, "")
    shown = {"wte.weight", "wpe.weight", "h.0.attn.c_attn.weight", f"h.{cfg.n_layer - 1}.mlp.c_proj.weight",
             "h.0.ln_1.weight", "ln_f.bias"}
    named = dict(model.transformer.named_parameters())
    bad = []
    for name, ours in ours_grads.items():
        ref = named[name].grad
        if ref is None or ref.shape != ours.shape:
            bad.append(f"{name}: no gradient or shape {None if ref is None else tuple(ref.shape)} vs {tuple(ours.shape)}")
            continue
        err = rel_l2(ours.to(device), ref)
        worst = max(worst, (err, name))
        if err > args.grad_tol:
            bad.append(f"{name}: {err:.2e}")
        if name in shown:
            print(f"     gradient {name} {tuple(ours.shape)}: relative L2 error {err:.2e}")
    check(not bad and len(ours_grads) == len(named), f"gradients of all {len(ours_grads)} parameters vs torch.autograd: "
          f"worst relative L2 error {worst[0]:.2e} ({worst[1]}), tol {args.grad_tol:.0e}" + (f"; over: {bad}" if bad else ""))

    # 4. generate, a smoke check
    prompt = tok("The meaning of life is", return_tensors="pt").input_ids.to(device)
    out = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=tok.eos_token_id)
    new = out[0, prompt.size(1):].tolist()
    check(len(new) == 16 and all(0 <= t < 50257 for t in new), f"generate: 16 greedy tokens: {tok.decode(out[0])!r}")

    print(f"hf_check: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
