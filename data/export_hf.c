// export_hf.c: a train_gpt checkpoint to a directory that Hugging Face transformers loads as it is
// (llmc/io/hf_checkpoint.h): model.safetensors (the fp32 master weights) and config.json; for GPT-2 also
// its tokenizer files.
//   build/export_hf [-vocab PATH] CKPT OUT_DIR
// CKPT is what -resume takes: a ckpt_<step>.bin file, a run's -out directory (its latest checkpoint),
// or `latest` (of out/). Host only: no GPU needed. Then, in Python:
//   GPT2LMHeadModel.from_pretrained(OUT_DIR), AutoTokenizer.from_pretrained(OUT_DIR)   (GPT-2)
//   LlamaForCausalLM.from_pretrained(OUT_DIR), and tiktoken for the ids                (-model llama)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../llmc/core/check.h"
#include "../llmc/io/checkpoint_dir.h"
#include "../llmc/io/hf_checkpoint.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/export_hf [-vocab PATH] CKPT OUT_DIR\n"
            "  CKPT      a train_gpt checkpoint: a ckpt_<step>.bin file, a run's -out directory (its latest\n"
            "            checkpoint), or `latest` (of out/)\n"
            "  OUT_DIR   created if missing; gets model.safetensors (fp32) and config.json; for GPT-2 also\n"
            "            vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json. An earlier\n"
            "            export there is replaced whole; a directory holding other files is refused\n"
            "options:\n"
            "  -vocab PATH   GPT-2 vocab.bpe, with encoder.json beside it (default data/gpt2/vocab.bpe;\n"
            "                `make data` fetches them); a Llama-style export has no tokenizer files\n");
}

int main(int argc, char** argv) {
    const char* vocab = "data/gpt2/vocab.bpe";
    const char* args[2];
    int n = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[a], "-vocab") == 0 && a + 1 < argc) { vocab = argv[++a]; continue; }
        int bad = 1;
        if (strcmp(argv[a], "-vocab") == 0)
            fprintf(stderr, "error: -vocab needs a value: the path of GPT-2's vocab.bpe, with encoder.json beside it\n");
        else if (argv[a][0] == '-')
            fprintf(stderr, "error: unknown option \"%s\" (the only option is -vocab PATH)\n", argv[a]);
        else if (n == 2)
            fprintf(stderr, "error: a third argument \"%s\": export_hf takes CKPT and OUT_DIR\n", argv[a]);
        else
            bad = 0;
        if (bad) {
            usage(stderr);
            return EXIT_FAILURE;
        }
        args[n++] = argv[a];
    }
    if (n != 2) {
        fprintf(stderr, "error: %s: export_hf takes CKPT and OUT_DIR\n", n == 0 ? "no arguments" : "no OUT_DIR");
        usage(stderr);
        return EXIT_FAILURE;
    }
    char ckpt[CHECKPOINT_PATH_LEN], err[HF_ERR_LEN];
    if (checkpoint_resolve(ckpt, sizeof(ckpt), args[0], "out", err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_FAILURE;
    }
    HfExported ex;
    if (hf_export_checkpoint(ckpt, args[1], vocab, &ex, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_FAILURE;
    }
    const CheckpointModel* m = &ex.model;
    if (m->family == CHECKPOINT_FAMILY_GPT2)
        printf("exported %s (GPT-2, step %lld: %d layers, %d channels, %d heads, context %d) to %s/: "
               "model.safetensors (fp32 master weights), config.json (GPT2LMHeadModel), the GPT-2 tokenizer files\n",
               ckpt, (long long)ex.step, m->num_layers, m->channels, m->num_heads, m->max_seq_len, args[1]);
    else
        printf("exported %s (Llama-style, step %lld: %d layers, %d channels, %d heads on %d key/value heads, FFN %d, "
               "vocabulary %d) to %s/: model.safetensors (fp32 master weights), config.json (LlamaForCausalLM%s)\n",
               ckpt, (long long)ex.step, m->num_layers, m->channels, m->num_heads, m->num_kv_heads, m->ffn_hidden,
               m->vocab_size, args[1], ex.eos >= 0 ? ", eos_token_id of its encoding" : "; no encoding has its "
               "vocabulary, so no eos_token_id");
    return 0;
}
