// test_llama_dist.cu: the Llama-style model (llmc/model/llama.cuh) trained data-parallel (ZeRO-1) by N ranks
// as threads of one process on one GPU, through the communicator's test double
// (dev/test/comm_local.cuh), in the harness that dev/test/test_dist.cu uses for GPT-2
// (dev/test/dist_harness.cuh). The model of test_llama.cu: L=2, C=256, NH=4, NKV=2, F=680, V=200019
// padded to 200064, B=4, T=80 per rank.
//   ./build/test_llama_dist     (needs a GPU; a minute or two)
// Checks, each printed with its numbers:
//   1. N=2 ranks with a micro-batch each equal 1 rank accumulating the same 2 micro-batches: losses and
//      master weights within the rounding of the gradient sums' order (dist_harness.cuh's tolerances);
//      so does N=2 with -zero 0 (the optimizer state whole on every rank) against ZeRO-1
//   2. checkpoints hold the whole state: one written at N=2, loaded at N=1 and written again is
//      byte-identical; a run resumed from it at N=2 is bitwise the uninterrupted N=2 run
// The batches of a step: global batch g = (step · A + k) · N + rank for micro-step k of A, as the data
// loader deals them (llmc/data/dataloader.h), so both configurations see the same data.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../llmc/model/llama.cuh"
#include "../../llmc/io/llama_checkpoint.cuh"
#include "dist_harness.cuh"
#include "gpu_testing.cuh"
#include "testing.h"

#define B_ 4
#define T_ 80
#define V_ 200019

static LlamaConfig small_config(void) {
    LlamaConfig c;
    c.vocab_size = V_; c.padded_vocab_size = llama_padded_vocab(V_); c.max_seq_len = T_;
    c.num_layers = 2; c.channels = 256; c.num_heads = 4; c.num_kv_heads = 2; c.ffn_hidden = 680;
    c.rope_theta = 10000.0; c.norm_eps = 1e-5;
    return c;
}

// Global batch g of the test's data stream: random ids, one target in 16 ignored.
static void batch(int g, int* in, int* tg) {
    uint64_t rng = rand_mix(1234, (uint64_t)g, 0);
    for (int i = 0; i < B_ * T_; i++) {
        in[i] = (int)(rand_next(&rng) % V_);
        tg[i] = rand_next(&rng) % 16 == 0 ? -1 : (int)(rand_next(&rng) % V_);
    }
}

// One rank's run of a job (dist_harness.cuh starts the ranks): build, init or load, the steps, save, outputs.
static void* rank_main(void* arg) {
    RankRun* rr = (RankRun*)arg;
    const Job* j = rr->job;
    LlamaConfig c = small_config();
    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    Comm comm;
    if (rr->group) comm_local(&comm, rr->group, rr->rank);
    comm.zero = j->zero;
    LlamaModel m;
    llama_build_dist(&m, &c, B_, T_, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH, rr->group ? &comm : NULL);
    char err[CHECKPOINT_ERR_LEN];
    if (j->load) {
        CheckpointReader r;
        int rc = checkpoint_reader_open(&r, j->load);
        if (rc == 0) rc = llama_load_checkpoint(&m, &r, &ctx);
        if (rc != 0) { fprintf(stderr, "rank %d: loading %s: %s\n", rr->rank, j->load, r.err); rr->rc = -1; }
        checkpoint_reader_close(&r);
    } else {
        llama_init_params(&m, j->seed, &ctx);
    }
    int in[B_ * T_], tg[B_ * T_];
    for (int s = j->from; s < j->to; s++) {
        llama_zero_grad(&m, &ctx);
        for (int k = 0; k < j->accum; k++) {
            batch((s * j->accum + k) * j->world + rr->rank, in, tg);
            llama_forward(&m, in, B_, T_, &ctx);
            float dloss = 1.0f / (j->accum * j->world);
            if (k == j->accum - 1) llama_backward_reduce(&m, tg, dloss, &ctx);
            else llama_backward(&m, tg, dloss, &ctx);
        }
        llama_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s + 1, 0, &ctx);
        rank_keep_loss(rr, s, m.acts.loss, m.comm, ctx.stream);
    }
    if (j->save) {
        CheckpointState st;
        memset(&st, 0, sizeof(st));
        st.step = j->to;
        snprintf(st.settings, sizeof(st.settings), "-steps %d", j->to);
        if (llama_save_checkpoint(&m, j->save, &st, err, sizeof(err), &ctx) != 0) {
            fprintf(stderr, "rank %d: saving %s: %s\n", rr->rank, j->save, err);
            rr->rc = -1;
        }
    }
    OptimState o = llama_optim(&m);
    rank_gather_outputs(rr, &o, ctx.stream);
    llama_free(&m);
    gpu_context_free(&ctx);
    return NULL;
}

static void test_data_parallel(size_t n) {
    float l1[MAX_STEPS], l2[MAX_STEPS], lz[MAX_STEPS];
    float* init = (float*)malloc_check(n * sizeof(float));
    float* m1 = (float*)malloc_check(n * sizeof(float));
    float* m2 = (float*)malloc_check(n * sizeof(float));
    float* mz = (float*)malloc_check(n * sizeof(float));
    Job i = job(1, 1, 0, 0), a = job(1, 2, 0, 3), b = job(2, 1, 0, 3), z = job(2, 1, 0, 3);
    i.master = init;
    a.losses = l1; a.master = m1;
    b.losses = l2; b.master = m2;
    z.losses = lz; z.master = mz; z.zero = 0;
    EXPECT(run_job(&i) == 0 && run_job(&a) == 0 && run_job(&b) == 0 && run_job(&z) == 0, "a data-parallel run failed");
    compare_runs("N=2 x 1 micro-step vs N=1 x 2", l2, l1, 0, 3, m2, m1, init, n);
    compare_runs("N=2 -zero 0 vs ZeRO-1", lz, l2, 0, 3, mz, m2, init, n);
    free(mz); free(m2); free(m1); free(init);
}

static void test_checkpoints(size_t n) {
    char dir[] = "/tmp/test_llama_dist.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(EXIT_FAILURE); }
    char pa[256], pb[256];
    snprintf(pa, sizeof(pa), "%s/a_n2.bin", dir);
    snprintf(pb, sizeof(pb), "%s/b_n1.bin", dir);
    float lf[MAX_STEPS], lr[MAX_STEPS];
    float* mf = (float*)malloc_check(n * sizeof(float));
    float* mr = (float*)malloc_check(n * sizeof(float));
    Job a = job(2, 1, 0, 2);  a.save = pa;
    Job b = job(1, 2, 2, 2);  b.load = pa; b.save = pb;   // no steps: load at N=1, write back
    EXPECT(run_job(&a) == 0 && run_job(&b) == 0, "a checkpoint job failed");
    int ab = files_equal(pa, pb);
    printf("checkpoint written at N=2, loaded at N=1 and written again: %s\n", ab ? "byte-identical" : "DIFFERENT");
    EXPECT(ab, "N=2 -> N=1 round trip changed the checkpoint");
    Job full = job(2, 1, 0, 4);  full.losses = lf; full.master = mf;
    Job same = job(2, 1, 2, 4);  same.load = pa; same.losses = lr; same.master = mr;
    EXPECT(run_job(&full) == 0 && run_job(&same) == 0, "a resumed job failed");
    int bitwise = memcmp(lf + 2, lr + 2, 2 * sizeof(float)) == 0 && memcmp(mf, mr, n * sizeof(float)) == 0;
    printf("resume at N=2 of an N=2 checkpoint: losses %.7f %.7f vs uninterrupted %.7f %.7f; master %s\n", lr[2],
           lr[3], lf[2], lf[3], bitwise ? "bitwise equal" : "DIFFERENT");
    EXPECT(bitwise, "resuming at the same N is not bitwise the uninterrupted run");
    free(mr); free(mf);
    remove(pa); remove(pb);
    rmdir(dir);
}

int main(void) {
    test_require_cuda("test_llama_dist");
    setvbuf(stdout, NULL, _IOLBF, 0);
    LlamaConfig c = small_config();
    size_t n = llama_num_params(&c);
    test_data_parallel(n);
    test_checkpoints(n);
    return test_summary("test_llama_dist");
}
