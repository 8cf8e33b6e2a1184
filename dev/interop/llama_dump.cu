// llama_dump.cu: train_gpt's side of the check of the Llama-style model against Hugging Face
// transformers' LlamaForCausalLM (dev/interop/hf_check.py), the twin of gpt_dump.cu. It builds the model of
// a checkpoint as train_gpt -model llama does (bf16 parameters = the master weights' high halves, the fused head),
// runs one forward and one backward on given tokens, and writes what it computed:
//   build/dev/llama_dump CKPT TOKENS OUT_DIR
//   CKPT     a ckpt_<step>.bin file or a run's -out directory (its latest checkpoint), as -resume takes;
//            a GPT-2 checkpoint is refused (build/dev/gpt_dump dumps those)
//   TOKENS   a safetensors file with "tokens", I32 or I64 (B, T+1): inputs [:, :T], targets [:, 1:]
//   OUT_DIR  gets outputs.safetensors: "logits" F32 (B, T, V), the fp32 logits of every position as the
//              sampler computes them (llama_logits_row: bf16 final-norm output · bf16 lm_headᵀ, fp32
//              accumulation), and "loss" F32 (1,), the mean cross-entropy over all B·T targets from the
//              fused head (what training reports); and grads.safetensors: the gradient of that loss for
//              every parameter, fp32, under LlamaForCausalLM's names and layouts, cut from our stacked
//              wqkv and w_gateup by the very function that writes the exported weights
//              (llama_hf_write_safetensors, llmc/io/llama_hf.h), so that it compares name by name with
//              torch's .grad of the exported model. The export permutes no rows (RoPE is rotate_half on
//              both sides), so neither do the gradients; the padded vocabulary rows are dropped.
// The command line, the tokens and outputs.safetensors are dev/interop/dump.h's, shared with gpt_dump.cu.
// Needs a GPU. Build: make build/dev/llama_dump.
#include "../../llmc/model/llama.cuh"
#include "../../llmc/io/llama_checkpoint.cuh"
#include "../../llmc/io/llama_hf.h"
#include "dump.h"

int main(int argc, char** argv) {
    dump_check_args(argc, "llama_dump");
    char ckpt_path[CHECKPOINT_PATH_LEN], err[HF_ERR_LEN];
    CheckpointReader ck;
    dump_open_checkpoint(&ck, ckpt_path, argv[1], CHECKPOINT_FAMILY_LLAMA);
    const CheckpointModel* cm = &ck.state.model;
    LlamaConfig c;
    c.vocab_size = cm->vocab_size; c.padded_vocab_size = cm->padded_vocab_size; c.max_seq_len = cm->max_seq_len;
    c.num_layers = cm->num_layers; c.channels = cm->channels; c.num_heads = cm->num_heads;
    c.num_kv_heads = cm->num_kv_heads; c.ffn_hidden = cm->ffn_hidden; c.rope_theta = cm->rope_theta;
    c.norm_eps = cm->norm_eps;
    int V = c.vocab_size;
    DumpTokens tok;
    dump_read_tokens(&tok, argv[2], V, c.max_seq_len);
    int B = tok.B, T = tok.T;

    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    LlamaModel m;
    llama_build(&m, &c, B, T, FUSED_LCE_PATH_AUTO, FUSED_LCE_DEFAULT_SCRATCH);
    checkpoint_check(ck.err, llama_load_checkpoint(&m, &ck, &ctx));
    checkpoint_reader_close(&ck);

    llama_forward(&m, tok.inputs, B, T, &ctx);
    float* logits = (float*)malloc_check((size_t)B * T * V * sizeof(float));
    for (int row = 0; row < B * T; row++) {
        llama_logits_row(&m, row, &ctx);
        cuda_check(cudaMemcpyAsync(logits + (size_t)row * V, m.acts.logits_row, (size_t)V * sizeof(float),
                                   cudaMemcpyDeviceToHost, ctx.stream));
    }
    llama_zero_grad(&m, &ctx);
    llama_backward(&m, tok.targets, 1.0f, &ctx);
    float loss;
    cuda_check(cudaMemcpyAsync(&loss, m.acts.loss, sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
    cuda_check(cudaStreamSynchronize(ctx.stream));
    fused_lce_check(&m.head, &ctx);
    float* grads = (float*)malloc_check(m.num_params * sizeof(float));
    cuda_check(cudaMemcpy(grads, m.grads_memory, m.num_params * sizeof(float), cudaMemcpyDeviceToHost));

    dump_write_outputs(argv[3], logits, B, T, V, loss);
    char path[CHECKPOINT_PATH_LEN + 32];
    snprintf(path, sizeof(path), "%s/grads.safetensors", argv[3]);
    if (llama_hf_write_safetensors(path, &c, grads, err, sizeof(err)) != 0) dump_die("OUT_DIR", err);
    printf("llama_dump: %s, B %d, T %d: loss %.6f; wrote %s/outputs.safetensors (logits, loss) and "
           "%s/grads.safetensors\n", ckpt_path, B, T, loss, argv[3], argv[3]);

    free(grads);
    free(logits);
    llama_free(&m);
    gpu_context_free(&ctx);
    dump_free_tokens(&tok);
    return 0;
}
