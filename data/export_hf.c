// export_hf.c: a train_gpt checkpoint to a directory that Hugging Face transformers loads as it is
// (llmc/gpt_hf.h): model.safetensors (the fp32 master weights), config.json, the GPT-2 tokenizer files.
//   build/export_hf [-vocab PATH] CKPT OUT_DIR
// CKPT is what -resume takes: a ckpt_<step>.bin file, a run's -out directory (its latest checkpoint),
// or `latest` (of out/). Host only: no GPU needed. Then, in Python:
//   GPT2LMHeadModel.from_pretrained(OUT_DIR), AutoTokenizer.from_pretrained(OUT_DIR)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../llmc/check.h"
#include "../llmc/checkpoint_dir.h"
#include "../llmc/gpt_hf.h"

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/export_hf [-vocab PATH] CKPT OUT_DIR\n"
            "  CKPT      a train_gpt checkpoint: a ckpt_<step>.bin file, a run's -out directory (its latest\n"
            "            checkpoint), or `latest` (of out/)\n"
            "  OUT_DIR   created if missing; gets model.safetensors (fp32), config.json, vocab.json,\n"
            "            merges.txt, tokenizer_config.json, special_tokens_map.json\n"
            "options:\n"
            "  -vocab PATH   GPT-2 vocab.bpe, with encoder.json beside it (default data/gpt2/vocab.bpe;\n"
            "                `make data` fetches them)\n");
}

int main(int argc, char** argv) {
    const char* vocab = "data/gpt2/vocab.bpe";
    const char* args[2];
    int n = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-h") == 0 || strcmp(argv[a], "--help") == 0) { usage(stdout); return 0; }
        if (strcmp(argv[a], "-vocab") == 0 && a + 1 < argc) { vocab = argv[++a]; continue; }
        if (argv[a][0] == '-' || n == 2) {
            fprintf(stderr, "error: unexpected argument \"%s\"\n", argv[a]);
            usage(stderr);
            return EXIT_FAILURE;
        }
        args[n++] = argv[a];
    }
    if (n != 2) { usage(stderr); return EXIT_FAILURE; }
    char ckpt[CHECKPOINT_PATH_LEN], err[HF_ERR_LEN];
    if (checkpoint_resolve(ckpt, sizeof(ckpt), args[0], "out", err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_FAILURE;
    }
    GptConfig c;
    int64_t step = 0;
    if (gpt_hf_export_checkpoint(ckpt, args[1], vocab, &c, &step, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_FAILURE;
    }
    printf("exported %s (step %lld: %d layers, %d channels, %d heads, context %d) to %s/: model.safetensors "
           "(fp32 master weights), config.json, the GPT-2 tokenizer files\n", ckpt, (long long)step, c.num_layers,
           c.channels, c.num_heads, c.max_seq_len, args[1]);
    return 0;
}
