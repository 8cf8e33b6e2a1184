"""hf_check.py: train_gpt's models against Hugging Face transformers, implementations of GPT-2 and of Llama
that this project did not write. Needs a GPU, PyTorch, transformers and safetensors (doc/interop.md).

    python3 dev/interop/hf_check.py --ckpt out/interop/a --hf out/interop/hf          # GPT-2
    python3 dev/interop/hf_check.py --ckpt out/interop_llama --hf out/interop_llama/hf  # Llama-style

--ckpt is a train_gpt checkpoint (a ckpt_<step>.bin or a run's -out directory), --hf its export
(build/export_hf or train_gpt -export_hf). The family is the export's: config.json's model_type gpt2
(GPT2LMHeadModel) or llama (LlamaForCausalLM); this program's side is build/dev/model_dump, either family.
The script
  1. loads the export with from_pretrained, as a user would, and checks that nothing was missing or left
     over; GPT-2: also AutoTokenizer.from_pretrained, which must give GPT-2's ids, and lm_head tied to wte;
     Llama: lm_head untied (the export has no tokenizer files: its ids are tiktoken's);
  2. writes B x (T+1) tokens in [0, V) (fixed seed) and runs the dump tool on the checkpoint: train_gpt's
     forward and backward on them (bf16 parameters and activations, the fused head);
  3. runs the same tokens through transformers in fp32 (TF32 off, eager attention) with every weight
     rounded to bf16 first, the parameters train_gpt computes with, so that the difference left is the
     bf16 rounding of activations, and compares:
       logits    relative L2 error <= 2e-2, and max |diff| <= 5% of max |logit|
       loss      relative difference <= 2e-3
       gradients relative L2 error <= 5e-2 for every parameter
  4. Llama: two controls, that the logits check fails on a wrong mapping: transformers' logits with
     gate_proj and up_proj swapped in every layer, then with k_proj and v_proj swapped, must be further
     from train_gpt's than the tolerance; and, printed only, how far q_proj and k_proj permuted for the
     other RoPE convention move them;
  5. samples 16 tokens greedily with generate, a smoke check of the whole stack (GPT-2: decoded).
Why these tolerances: bf16 keeps 8 significant bits, so each stored activation is off by up to 2^-9
relative. The residual stream is rounded about twice per layer (GPT-2 and the Llama-style block alike:
after the attention half and after the MLP half); over L layers the relative error of the last norm's
input grows to about sqrt(2L)·2^-9 (~0.7% at L = 6, GPT-2 d6; ~0.9% at L = 10, llama-30m), and the
logits inherit it: about 1% relative L2, 2e-2 leaves a factor of two. The roundings inside a block (q, k
after RoPE, v, the attention output, gate|up, the SwiGLU product in the Llama-style one) reach the
stream through one more matrix each and add less. The loss is a mean over B·T rows of fp32 softmax math
from those logits: errors average out to ~1e-3 or less. Gradients pass through about a dozen more
roundings in the backward (the residual gradient is bf16 too): test_gpt.cu checks 5e-2
against the CPU references. A wrong formula (the attention scale, the GELU, a transposed weight, a
shifted target) is off by O(1) relative in some tensor. So is a wrong mapping of the Llama-style export
(llmc/io/hf_model.h): gate and up swapped computes silu(up)·gate, a different MLP; q, k or v cut at the
wrong rows makes attention read keys as values; a q/k row permutation for the other RoPE convention
(pairs 2i, 2i+1 instead of i, i + hs/2) rotates the pairs by other frequencies, which moves every
attention score of a trained model. Each shows in the logits, and the gradients are compared name by
name, so one cut at the wrong rows in the dump alone shows there. Tolerances can be changed with flags.
Prints one line per check, then 'hf_check: N passed, M failed', and exits non-zero on any failure.
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from checks import check, finish  # dev/interop/checks.py (this script's folder is on sys.path)


def bf16_as_trained(t):
    """t rounded to bf16 as train_gpt derives its parameters from its fp32 master weights
    (llmc/optim/master_split.h): to nearest with ties away from zero (torch's .to(bfloat16) takes ties to
    even), on the bit patterns; as fp32. For finite values."""
    u = t.detach().float().contiguous().view(torch.int32)
    b = ((u & 0x7FFFFFFF) + 0x8000) & -65536
    return ((u & -2**31) | b).view(torch.float32)


def rel_l2(a, b):
    return ((a - b).double().norm() / b.double().norm().clamp_min(1e-30)).item()


def load_gpt2(path):
    """The GPT-2 export and its tokenizer. Returns the model, the gradients to print, and a prompt for
    generate with its pad id and decoder."""
    from transformers import AutoTokenizer, GPT2LMHeadModel
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("Hello world")["input_ids"]
    check(ids == [15496, 995], f"AutoTokenizer.from_pretrained: 'Hello world' -> {ids} (GPT-2: [15496, 995]; {type(tok).__name__})")
    ids = tok("Hello, my dog is cute")["input_ids"]
    check(ids == [15496, 11, 616, 3290, 318, 13779], f"'Hello, my dog is cute' -> {ids}")
    check(tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 50256, f"eos token {tok.eos_token!r} = {tok.eos_token_id}")
    model, info = GPT2LMHeadModel.from_pretrained(path, output_loading_info=True, attn_implementation="eager")
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
    shown = {"wte.weight", "wpe.weight", "h.0.attn.c_attn.weight", f"h.{cfg.n_layer - 1}.mlp.c_proj.weight",
             "h.0.ln_1.weight", "ln_f.bias"}
    prompt = tok("The meaning of life is", return_tensors="pt").input_ids
    return model, shown, prompt, tok.eos_token_id, tok.decode


def load_llama(path):
    """The Llama-style export: as load_gpt2, without a tokenizer (the prompt is <|endoftext|>, the start of
    a document in training, and the ids are printed as they are)."""
    from transformers import LlamaForCausalLM
    model, info = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager",
                                                   output_loading_info=True)
    left = {k: v for k, v in info.items() if v}
    check(not left, f"LlamaForCausalLM.from_pretrained: nothing missing, unexpected or mismatched {left if left else ''}")
    cfg = model.config
    check(not cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr(),
          "lm_head untied (its own tensor)")
    hs = cfg.hidden_size // cfg.num_attention_heads
    # transformers 5 keeps θ in rope_parameters, earlier versions as rope_theta
    theta = getattr(cfg, "rope_theta", None) or (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta")
    print(f"     model: {cfg.num_hidden_layers} layers, {cfg.hidden_size} channels, {cfg.num_attention_heads} heads on "
          f"{cfg.num_key_value_heads} key/value heads of {hs}, FFN {cfg.intermediate_size}, rope_theta "
          f"{theta}, eps {cfg.rms_norm_eps}, vocabulary {cfg.vocab_size}, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    last = cfg.num_hidden_layers - 1
    shown = {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
             "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
             f"model.layers.{last}.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"}
    eos = cfg.eos_token_id if cfg.eos_token_id is not None else 0
    return model, shown, torch.tensor([[eos]]), eos, None


def changed_logits(model, inputs, params, change):
    """transformers' logits with change() applied to the weights params in place, which are restored after."""
    with torch.no_grad():
        saved = [prm.detach().clone() for prm in params]
        change()
        logits = model(inputs).logits
        for prm, was in zip(params, saved):
            prm.copy_(was)
    return logits


def swap(pairs):
    for a, b in pairs:
        t = a.detach().clone()
        a.copy_(b)
        b.copy_(t)


def rope_permute(weights, hs):
    """Each head's rows permuted as transformers' conversion of Meta's checkpoints permutes q and k (their
    RoPE pairs are 2i, 2i+1; rotate_half's are i, i + hs/2): what an export that applied it would hold,
    which this program's weights, rotate_half already, must not get."""
    for w in weights:
        rows, cols = w.shape
        w.copy_(w.view(rows // hs, hs // 2, 2, cols).transpose(1, 2).reshape(rows, cols))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", required=True, help="train_gpt checkpoint: ckpt_<step>.bin or a run's -out directory")
    p.add_argument("--hf", required=True, help="its export: a directory with model.safetensors, config.json ...")
    p.add_argument("--dump", default="build/dev/model_dump",
                   help="train_gpt's side (default: build/dev/model_dump, dev/interop/model_dump.cu)")
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
    with open(os.path.join(args.hf, "config.json")) as f:
        family = json.load(f).get("model_type")
    if family not in ("gpt2", "llama"):
        check(False, f"{args.hf}/config.json: model_type {family!r}, this script knows gpt2 and llama")
        finish("hf_check")
    llama = family == "llama"
    dump = args.dump
    model, shown, prompt, eos, decode = (load_llama if llama else load_gpt2)(args.hf)
    V = model.config.vocab_size

    # 2. train_gpt's side on the same tokens
    B, T = args.b, args.t
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, V, (B, T + 1), generator=g, dtype=torch.int32)
    work = tempfile.mkdtemp(prefix="hf_check.")
    save_file({"tokens": tokens}, os.path.join(work, "tokens.safetensors"))
    r = subprocess.run([dump, args.ckpt, os.path.join(work, "tokens.safetensors"), work], capture_output=True, text=True)
    print("     " + (r.stdout + r.stderr).strip().replace("\n", "\n     "))
    if not check(r.returncode == 0, f"{dump} exited {r.returncode}"):
        finish("hf_check")
    outs = load_file(os.path.join(work, "outputs.safetensors"))
    ours_grads = load_file(os.path.join(work, "grads.safetensors"))
    ours_logits, ours_loss = outs["logits"].to(device), outs["loss"].item()

    # 3. transformers in fp32 with the bf16 parameters train_gpt computes with
    model = model.to(device).eval()
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(bf16_as_trained(prm))
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
    # by the names of the dump's gradients: GPT-2's without "transformer." (lm_head is wte), Llama's as they are
    named = dict((model if llama else model.transformer).named_parameters())
    bad = []
    for name, ours in ours_grads.items():
        ref = named[name].grad if name in named else None
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

    # 4. the controls: the check above fails on a wrong mapping of the Llama-style export
    if llama:
        layers = model.model.layers
        for what, pairs in (("gate_proj and up_proj", [(l.mlp.gate_proj.weight, l.mlp.up_proj.weight) for l in layers]),
                            ("k_proj and v_proj", [(l.self_attn.k_proj.weight, l.self_attn.v_proj.weight) for l in layers])):
            ce = rel_l2(ours_logits, changed_logits(model, inputs, [w for pr in pairs for w in pr], lambda: swap(pairs)))
            check(ce > args.logits_tol, f"control: {what} swapped in every layer: logits relative L2 error {ce:.2e}, "
                  f"above the tolerance {args.logits_tol:.0e} (the check would fail)")
        # printed, not checked: how far a trained model moves depends on how much it uses position
        qk = [w for l in layers for w in (l.self_attn.q_proj.weight, l.self_attn.k_proj.weight)]
        hs = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
        ce = rel_l2(ours_logits, changed_logits(model, inputs, qk, lambda: rope_permute(qk, hs)))
        print(f"     (q_proj and k_proj rows permuted for the interleaved RoPE convention: logits relative L2 error {ce:.2e})")

    # 5. generate, a smoke check
    prompt = prompt.to(device)
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=16, do_sample=False,
                         pad_token_id=eos)
    new = out[0, prompt.size(1):].tolist()
    shown_out = repr(decode(out[0])) if decode else f"<|endoftext|> ({eos}) then ids {new}"
    check(len(new) == 16 and all(0 <= t < V for t in new), f"generate: 16 greedy tokens: {shown_out}")

    finish("hf_check")


if __name__ == "__main__":
    main()
