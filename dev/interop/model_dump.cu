// model_dump.cu: train_gpt's side of the check against Hugging Face transformers (dev/interop/hf_check.py:
// GPT2LMHeadModel, LlamaForCausalLM), for either model family. It builds the model of a checkpoint as
// train_gpt does (the family and sizes of its header; bf16 parameters = the master weights' high halves,
// the fused head), runs one forward and one backward on given tokens, and writes what it computed:
//   build/dev/model_dump CKPT TOKENS OUT_DIR
//   CKPT     a ckpt_<step>.bin file or a run's -out directory (its latest checkpoint), as -resume takes
//   TOKENS   a safetensors file with "tokens", I32 or I64 (B, T+1): inputs [:, :T], targets [:, 1:]
//   OUT_DIR  gets outputs.safetensors: "logits" F32 (B, T, V), the fp32 logits of every position as the
//              sampler computes them (model_logits_row: bf16 final-norm output · bf16 headᵀ, the head
//              GPT-2's wte or Llama's lm_head, fp32 accumulation), and "loss" F32 (1,), the mean
//              cross-entropy over all B·T targets from the fused head (what training reports); and
//              grads.safetensors: the gradient of that loss for every parameter, fp32, under Hugging
//              Face's names and layouts, cut and transposed (GPT-2's Conv1D weights; Llama's q|k|v and
//              gate|up parts) by the very function that writes the exported weights
//              (hf_model_write_safetensors, llmc/io/hf_model.h), so that it compares name by name with
//              torch's .grad of the exported model; the padded vocabulary rows are dropped.
// The command line, the tokens and outputs.safetensors are dev/interop/dump.h's. Needs a GPU. Build:
// make build/dev/model_dump.
#include "../../llmc/model/model.cuh"
#include "../../llmc/io/model_checkpoint.cuh"
#include "../../llmc/io/hf_model.h"
#include "dump.h"

int main(int argc, char** argv) {
    dump_check_args(argc, "model_dump");
    char ckpt_path[CHECKPOINT_PATH_LEN], err[HF_ERR_LEN];
    CheckpointReader ck;
    dump_open_checkpoint(&ck, ckpt_path, argv[1]);
    ModelConfig c = checkpoint_config_of(&ck.state.model);
    int V = c.vocab_size;
    DumpTokens tok;
    dump_read_tokens(&tok, argv[2], V, c.max_seq_len);
    int B = tok.B, T = tok.T;

    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    Model m;
    model_build(&m, &c, B, T, 0, FUSED_LCE_PATH_AUTO, FUSED_LCE_DEFAULT_SCRATCH, NULL);
    checkpoint_check(ck.err, model_load_checkpoint(&m, &ck, &ctx));
    checkpoint_reader_close(&ck);

    model_forward(&m, tok.inputs, B, T, &ctx);
    float* logits = (float*)malloc_check((size_t)B * T * V * sizeof(float));
    for (int row = 0; row < B * T; row++) {
        model_logits_row(&m, row, &ctx);
        cuda_check(cudaMemcpyAsync(logits + (size_t)row * V, m.acts.logits_row, (size_t)V * sizeof(float),
                                   cudaMemcpyDeviceToHost, ctx.stream));
    }
    model_zero_grad(&m, &ctx);
    model_backward(&m, tok.targets, 1.0f, &ctx);
    float loss;
    cuda_check(cudaMemcpyAsync(&loss, m.acts.loss, sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
    cuda_check(cudaStreamSynchronize(ctx.stream));
    fused_lce_check(&m.head, &ctx);
    float* grads = (float*)malloc_check(m.num_params * sizeof(float));
    cuda_check(cudaMemcpy(grads, m.grads_memory, m.num_params * sizeof(float), cudaMemcpyDeviceToHost));

    dump_write_outputs(argv[3], logits, B, T, V, loss);
    char path[CHECKPOINT_PATH_LEN + 32];
    snprintf(path, sizeof(path), "%s/grads.safetensors", argv[3]);
    if (hf_model_write_safetensors(path, &c, grads, err, sizeof(err)) != 0) dump_die("OUT_DIR", err);
    printf("model_dump: %s (%s), B %d, T %d: loss %.6f; wrote %s/outputs.safetensors (logits, loss) and "
           "%s/grads.safetensors\n", ckpt_path, m.spec->name, B, T, loss, argv[3], argv[3]);

    free(grads);
    free(logits);
    model_free(&m);
    gpu_context_free(&ctx);
    dump_free_tokens(&tok);
    return 0;
}
