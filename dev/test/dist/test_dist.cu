// test_dist.cu: data-parallel training (ZeRO-1, llmc/optim/zero.cuh) of the model (llmc/model/model.cuh)
// of each family with N ranks as threads of one process on one GPU, through the communicator's test
// double (dev/test/dist/comm_local.cuh; the jobs and their ranks: dev/test/dist/dist_harness.cuh). Small GPT: L=2,
// C=128, NH=2, V=50257 padded to 50304, B=4, T=64 per rank; and test_gpt.cu's Llama-style model: L=2,
// C=256, NH=4, NKV=2, F=680, V=200019 padded to 200064, B=4, T=80 per rank.
//   ./build/test_dist        (needs a GPU; a few minutes)
// Checks, each printed with its numbers (GPT-2 all of them; the Llama-style model 1 at N=2 against one
// rank accumulating 2 micro-batches, with -zero 0 too, and 3's N=2 -> N=1 round trip and its resume at
// the same N, the master weights bitwise):
//   1. N ranks with a micro-batch each equal 1 rank accumulating the same N micro-batches (and N=2 with
//      2 micro-steps each): losses and master weights within the rounding of the gradient sums' order
//   2. ZeRO-1's sharded AdamW equals the unsharded one bitwise, given the same reduced gradients:
//      master, m, v and the bf16 parameters after two steps, at N=2 and N=4; so does -zero 0's (the
//      state whole on every rank, the gradients all-reduced), on every rank, with the whole state's size,
//      clipping (its norm and clip scale one rank's, bitwise). The unsharded one against fp32 AdamW on
//      the host, its parameters the master's high halves
//   1 and 3 also run N=2 with -zero 0: its training within check 1's tolerance of ZeRO-1's (the norm
//      sums the same numbers in another grouping), its checkpoint round trip byte-identical
//   3. checkpoints hold the whole state: one written at N=2 and loaded at N=1 is written back
//      byte-identical, and the reverse; a run resumed at the same N is bitwise the uninterrupted one;
//      resumed at the other N it continues within the tolerance of check 1 (dist_harness.cuh states it)
// The batches of a step: global batch g = (step · A + k) · N + rank for micro-step k of A, as the data
// loader deals them (llmc/data/dataloader.h), so every configuration of the same N·A sees the same data.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../../llmc/model/model.cuh"
#include "../../../llmc/io/model_checkpoint.cuh"
#include "dist_harness.cuh"
#include "../gpu_testing.cuh"
#include "../testing.h"

#define B_ 4
#define MAX_T 80

// The family under test: its config (T is its max_seq_len), set by main before its jobs.
static ModelConfig the_config;
static int T_;

static ModelConfig gpt2_config(void) { return model_config_gpt2_sizes(64, 50257, 50304, 2, 2, 128); }

static ModelConfig llama_config(void) {
    return model_config_llama_sizes(200019, model_padded_vocab(200019), 80, 2, 256, 4, 2, 680, 10000.0, 1e-5);
}

static ModelConfig small_config(void) { return the_config; }

// Global batch g of the test's data stream: random ids, one target in 16 ignored.
static void batch(int g, int* in, int* tg) {
    uint64_t rng = rand_mix(1234, (uint64_t)g, 0);
    int V = the_config.vocab_size;
    for (int i = 0; i < B_ * T_; i++) {
        in[i] = (int)(rand_next(&rng) % V);
        tg[i] = rand_next(&rng) % 16 == 0 ? -1 : (int)(rand_next(&rng) % V);
    }
}

// A rank's context and model of the family under test: on comm, rank `rank` of group (no Comm when group
// is NULL), the optimizer state sharded unless zero is 0. comm outlives the model, which points to it.
static void rank_build(Model* m, GpuContext* ctx, Comm* comm, CommLocal* group, int rank, int zero) {
    ModelConfig c = small_config();
    gpu_context_build(ctx, 0);
    if (group) comm_local(comm, group, rank);
    comm->zero = zero;
    model_build(m, &c, B_, T_, 0, FUSED_LCE_PATH_BLOCKS, FUSED_LCE_DEFAULT_SCRATCH, group ? comm : NULL);
}

// One rank's run of a job (dist_harness.cuh starts the ranks): build, init or load, the steps, save, outputs.
static void* rank_main(void* arg) {
    RankRun* rr = (RankRun*)arg;
    const Job* j = rr->job;
    GpuContext ctx;
    Comm comm;
    Model m;
    rank_build(&m, &ctx, &comm, rr->group, rr->rank, j->zero);
    char err[CHECKPOINT_ERR_LEN];
    if (j->load) {
        CheckpointReader r;
        int rc = checkpoint_reader_open(&r, j->load);
        if (rc == 0) rc = model_load_checkpoint(&m, &r, &ctx);
        if (rc != 0) { fprintf(stderr, "rank %d: loading %s: %s\n", rr->rank, j->load, r.err); rr->rc = -1; }
        checkpoint_reader_close(&r);
    } else {
        model_init_params(&m, j->seed, &ctx);
    }
    int in[B_ * MAX_T], tg[B_ * MAX_T];
    for (int s = j->from; s < j->to; s++) {
        model_zero_grad(&m, &ctx);
        for (int k = 0; k < j->accum; k++) {
            batch((s * j->accum + k) * j->world + rr->rank, in, tg);
            model_forward(&m, in, B_, T_, &ctx);
            float dloss = 1.0f / (j->accum * j->world);
            if (k == j->accum - 1) model_backward_reduce(&m, tg, dloss, &ctx);
            else model_backward(&m, tg, dloss, &ctx);
        }
        model_update(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s + 1, 0, &ctx);
        rank_keep_loss(rr, s, m.acts.loss, m.comm, ctx.stream);
    }
    if (j->save) {
        CheckpointState st;
        memset(&st, 0, sizeof(st));
        st.step = j->to;
        snprintf(st.settings, sizeof(st.settings), "-steps %d", j->to);
        if (model_save_checkpoint(&m, j->save, &st, err, sizeof(err), &ctx) != 0) {
            fprintf(stderr, "rank %d: saving %s: %s\n", rr->rank, j->save, err);
            rr->rc = -1;
        }
    }
    OptimState o = model_optim(&m);
    rank_gather_outputs(rr, &o, ctx.stream);
    model_free(&m);
    gpu_context_free(&ctx);
    return NULL;
}

static size_t num_params(void) {
    ModelConfig c = small_config();
    return model_num_params(&c);
}

// The master weights of the init (seed 11), the base of the updates that compare_runs compares.
static void init_master(float* out) {
    Job j = job(1, 1, 0, 0);
    j.master = out;
    EXPECT(run_job(&j) == 0, "the init job failed");
}

// 1. data parallel against accumulation of `micro` micro-batches a step (4: N=2 and N=4; 2: N=2)
static void test_data_parallel(size_t n, const float* init, int micro) {
    float l1[MAX_STEPS], l2[MAX_STEPS], l4[MAX_STEPS], lz[MAX_STEPS];
    float* m1 = (float*)malloc_check(n * sizeof(float));
    float* m2 = (float*)malloc_check(n * sizeof(float));
    float* m4 = (float*)malloc_check(n * sizeof(float));
    float* mz = (float*)malloc_check(n * sizeof(float));
    Job a = job(1, micro, 0, 3), b = job(2, micro / 2, 0, 3), d = job(4, 1, 0, 3), z = job(2, micro / 2, 0, 3);
    a.losses = l1; a.master = m1;
    b.losses = l2; b.master = m2;
    d.losses = l4; d.master = m4;
    z.losses = lz; z.master = mz; z.zero = 0;
    EXPECT(run_job(&a) == 0 && run_job(&b) == 0 && (micro < 4 || run_job(&d) == 0) && run_job(&z) == 0,
           "a data-parallel run failed");
    char what[64];
    snprintf(what, sizeof(what), "N=2 x %d micro-step%s vs N=1 x %d", micro / 2, micro > 2 ? "s" : "", micro);
    compare_runs(what, l2, l1, 0, 3, m2, m1, init, n);
    if (micro == 4) compare_runs("N=4 x 1 micro-step  vs N=1 x 4", l4, l1, 0, 3, m4, m1, init, n);
    compare_runs("N=2 -zero 0 vs ZeRO-1", lz, l2, 0, 3, mz, m2, init, n);
    free(mz); free(m4); free(m2); free(m1);
}

// 2. Sharded AdamW: every rank's gradient is G/world (exact: a power of two) and its loss 3/world, so the
// reduced gradient is exactly G and the total loss 3 on every side. ZeRO-1 without clipping (its norm
// sums the ranks' parts in rank order and may differ from one rank's in its last bit; a clip scale of
// exactly 1 keeps it out). -zero 0 with clipping at half of ‖G‖: every rank sums the whole gradient on
// one rank's grid and takes rank 0's sum, so its norm, clip scale and update are one rank's bitwise (a
// norm counted once per rank, or a rank that clips by its own, is not). The one-rank run is also
// checked against AdamW computed here in fp32 from its init: master weights, m and v within 64 ulps of
// the magnitude of the terms that made them (the GPU's fast-math division and square root and its fused
// multiply-adds round differently, by an ulp or so of the terms; where m or w comes out near zero from
// terms ~1e-3 apart, that is thousands of ulps of the result, so ulps of the result do not measure it;
// a lost or misplaced remainder of the split master weights, llmc/optim/master_split.h, is up to 2^15 ulps
// of w, half a bf16 ulp), and its bf16 parameters must be the split's high halves of its master weights.
#define SHARD_LR 1e-3f
#define SHARD_WD 0.1f
typedef struct {
    CommLocal* group;
    int rank, world, zero;
    const float* grads[2];
    float* out[4];
    size_t shard_size;       // out: the elements of the state this rank kept
    float* init;             // out, or NULL: the master weights before the updates
    unsigned char* decay;    // out, or NULL: 1 where weight decay applies
    float clip;              // gradient clipping's threshold, 0: none
    float norm[3];           // out: the last step's gradient norm, clip scale and skip flag
} ShardRun;

#define SHARD_STEPS 2
static const float shard_beta1 = 0.9f, shard_beta2 = 0.95f, shard_eps = 1e-8f;

// AdamW as llmc/optim/adamw.cuh states it, in fp32 on the host: w, m, v (n) updated in place for gradient g
// at step t; sw and sm (n) the running largest magnitude of the terms that made w and m (the rounding
// errors of a sum are ulps of its terms, not of its result)
static void host_adamw(float* w, float* m, float* v, const float* g, const unsigned char* decay, size_t n, int t,
                       float* sw, float* sm) {
    float bc1 = 1.0f - powf(shard_beta1, (float)t), bc2 = 1.0f - powf(shard_beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float mi = shard_beta1 * m[i] + (1.0f - shard_beta1) * g[i];
        float vi = shard_beta2 * v[i] + (1.0f - shard_beta2) * g[i] * g[i];
        float step = SHARD_LR * ((mi / bc1) / (sqrtf(vi / bc2) + shard_eps) + (decay[i] ? SHARD_WD : 0.0f) * w[i]);
        sm[i] = fmaxf(sm[i], shard_beta1 * fabsf(m[i]) + (1.0f - shard_beta1) * fabsf(g[i]));
        sw[i] = fmaxf(sw[i], fabsf(w[i]) + fabsf(step));
        w[i] -= step;
        m[i] = mi;
        v[i] = vi;
    }
}

// the largest |a - b| in fp32 ulps of the larger of |b| and scale (NULL: of |b|; of 1e-30 where both
// are smaller)
static double max_ulps(const float* a, const float* b, const float* scale, size_t n, size_t* where) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        float mag = fabsf(b[i]);
        if (scale && scale[i] > mag) mag = scale[i];
        if (mag < 1e-30f) mag = 1e-30f;
        double ulp = (double)nextafterf(mag, INFINITY) - mag, u = fabs((double)a[i] - b[i]) / ulp;
        if (!(u <= worst)) { worst = u; *where = i; }
    }
    return worst;
}

static void* shard_main(void* arg) {
    ShardRun* sr = (ShardRun*)arg;
    GpuContext ctx;
    Comm comm;
    Model m;
    rank_build(&m, &ctx, &comm, sr->group, sr->rank, sr->zero);
    sr->shard_size = m.zero.shard_size;  // checked by the caller (EXPECT's counters are not for threads)
    model_init_params(&m, 5, &ctx);
    OptimState o = model_optim(&m);
    if (sr->init) {  // one rank: the init and where weight decay applies, for the host's AdamW
        const float* full = optim_gather(&o, OPTIM_MASTER, ctx.stream);
        cuda_check(cudaMemcpyAsync(sr->init, full, m.num_params * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
        cuda_check(cudaStreamSynchronize(ctx.stream));
        for (int s = 0; s < m.zero.n_slices; s++)
            memset(sr->decay + m.zero.slices[s].offset, m.zero.slices[s].decay, m.zero.slices[s].size);
    }
    float loss = 3.0f / sr->world;
    for (int t = 1; t <= SHARD_STEPS; t++) {
        // on the model's stream: a plain cudaMemcpy (legacy stream) is not ordered with it, and from pageable
        // memory may return before its copy has landed
        cuda_check(cudaMemcpyAsync(m.grads_memory, sr->grads[t - 1], m.num_params * sizeof(float),
                                   cudaMemcpyHostToDevice, ctx.stream));
        cuda_check(cudaMemcpyAsync(m.acts.loss, &loss, sizeof(float), cudaMemcpyHostToDevice, ctx.stream));
        zero_reduce(&m.zero, m.comm, m.grads_memory, -2, ctx.stream);
        model_update(&m, SHARD_LR, shard_beta1, shard_beta2, shard_eps, SHARD_WD, sr->clip, t, 0, &ctx);
    }
    cuda_check(cudaMemcpyAsync(sr->norm, m.acts.norm, sizeof(sr->norm), cudaMemcpyDeviceToHost, ctx.stream));
    for (int k = 0; k < 3; k++) {  // OPTIM_MASTER, OPTIM_M, OPTIM_V
        const float* full = optim_gather(&o, k, ctx.stream);
        comm_sync(m.comm, ctx.stream);
        cuda_check(cudaMemcpyAsync(sr->out[k], full, m.num_params * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
        comm_sync(m.comm, ctx.stream);  // no rank gathers the next tensor into grads before all have read this one
    }
    cuda_check(cudaMemcpyAsync(sr->out[3], m.params_memory, m.num_params * sizeof(bf16), cudaMemcpyDeviceToHost,
                               ctx.stream));
    cuda_check(cudaStreamSynchronize(ctx.stream));
    if (sr->group) pthread_barrier_wait(&sr->group->barrier);
    model_free(&m);
    gpu_context_free(&ctx);
    return NULL;
}

static void test_sharded_adamw(size_t n) {
    float* g[2];
    float* g_part[2];
    uint64_t rng = 77;
    for (int t = 0; t < 2; t++) {
        g[t] = (float*)malloc_check(n * sizeof(float));
        g_part[t] = (float*)malloc_check(n * sizeof(float));
        for (size_t i = 0; i < n; i++) g[t][i] = i % 97 == 0 ? 0.0f : (float)(0.01 * rand_normal(&rng));
    }
    float* ref[4];
    for (int k = 0; k < 4; k++) ref[k] = (float*)malloc_check(n * sizeof(float));
    float* w = (float*)malloc_check(n * sizeof(float));
    float* mv = (float*)calloc_check(2 * n, sizeof(float));
    float* scale = (float*)calloc_check(2 * n, sizeof(float));  // the terms' magnitudes of w, then of m
    unsigned char* decay = (unsigned char*)malloc_check(n);
    ShardRun one = {NULL, 0, 1, 1, {g[0], g[1]}, {ref[0], ref[1], ref[2], ref[3]}, 0, w, decay, 0.0f, {0, 0, 0}};
    shard_main(&one);
    for (int t = 1; t <= SHARD_STEPS; t++) host_adamw(w, mv, mv + n, g[t - 1], decay, n, t, scale, scale + n);
    const float* host[3] = {w, mv, mv + n};
    const float* scales[3] = {scale, scale + n, NULL};  // v: a sum of non-negative terms, its own scale
    const char* state[3] = {"master", "m", "v"};
    for (int k = 0; k < 3; k++) {
        size_t where = 0;
        double u = max_ulps(ref[k], host[k], scales[k], n, &where);
        printf("AdamW, one rank: %-6s against fp32 AdamW on the host: max %.1f ulps of the terms (at %zu: %.9g vs "
               "%.9g, terms up to %.3g; tol 64)\n", state[k], u, where, ref[k][where], host[k][where],
               scales[k] ? scales[k][where] : fabsf(host[k][where]));
        EXPECT(u <= 64.0, "one rank's %s after AdamW is %.1f ulps of its terms from the host's AdamW at %zu", state[k], u,
               where);
    }
    const uint16_t* p16 = (const uint16_t*)ref[3];
    size_t split_bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t hi;
        int16_t lo;
        master_split(ref[0][i], &hi, &lo);
        split_bad += hi != p16[i];
    }
    printf("AdamW, one rank: bf16 parameters the split's high halves of the master weights: %zu of %zu differ\n",
           split_bad, n);
    EXPECT(split_bad == 0, "%zu bf16 parameters are not their master weights' high halves", split_bad);
    free(decay); free(scale); free(mv); free(w);
    // the reference of the -zero 0 runs: one rank clipping at half the smaller of the steps' norms
    double norm2[2] = {0, 0};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < n; i++) norm2[t] += (double)g[t][i] * g[t][i];
    float clip = (float)(0.5 * sqrt(norm2[0] < norm2[1] ? norm2[0] : norm2[1]));
    float* ref_clip[4];
    for (int k = 0; k < 4; k++) ref_clip[k] = (float*)malloc_check(n * sizeof(float));
    ShardRun one_clip = {NULL, 0, 1, 1, {g[0], g[1]}, {ref_clip[0], ref_clip[1], ref_clip[2], ref_clip[3]}, 0, NULL,
                         NULL, clip, {0, 0, 0}};
    shard_main(&one_clip);
    printf("one rank clipping at %.4f: norm %.6f, clip scale %.6f\n", clip, one_clip.norm[0], one_clip.norm[1]);
    EXPECT(one_clip.norm[1] < 0.75f && one_clip.norm[1] > 0.25f, "clipping at half the norm gives the scale %.4f",
           one_clip.norm[1]);
    const char* names[4] = {"master", "m", "v", "bf16 params"};
    for (int run = 0; run < 4; run++) {
        int world = run % 2 ? 4 : 2, zero = run < 2;  // N=2 and N=4, ZeRO-1 then -zero 0
        const ShardRun* base = zero ? &one : &one_clip;
        float* const* want_out = zero ? ref : ref_clip;
        for (int t = 0; t < 2; t++)
            for (size_t i = 0; i < n; i++) g_part[t][i] = g[t][i] / world;
        CommLocal group;
        comm_local_build(&group, world);
        ShardRun sr[COMM_LOCAL_MAX];
        pthread_t th[COMM_LOCAL_MAX];
        float* out[COMM_LOCAL_MAX][4];
        for (int r = 0; r < world; r++) {
            for (int k = 0; k < 4; k++) out[r][k] = (float*)malloc_check(n * sizeof(float));
            ShardRun s = {&group, r, world, zero, {g_part[0], g_part[1]}, {out[r][0], out[r][1], out[r][2], out[r][3]},
                          0, NULL, NULL, base->clip, {0, 0, 0}};
            sr[r] = s;
            pthread_create(&th[r], NULL, shard_main, &sr[r]);
        }
        for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
        comm_local_free(&group);
        for (int r = 0; r < world; r++) {
            size_t want = zero ? n / world : n;
            EXPECT(sr[r].shard_size == want, "N=%d zero %d: rank %d keeps %zu elements of the state, not %zu", world,
                   zero, r, sr[r].shard_size, want);
        }
        for (int k = 0; k < 4; k++) {
            size_t bytes = n * (k == 3 ? sizeof(bf16) : sizeof(float)), where = 0;
            int same = 1;
            for (int r = 0; r < world; r++) same &= memcmp(out[r][k], want_out[k], bytes) == 0;
            float d = k == 3 ? 0.0f : max_abs_diff(out[0][k], want_out[k], n, &where);
            printf("%s AdamW N=%d: %-11s on every rank %s one rank's (rank 0 max |diff| %.1e)\n",
                   zero ? "sharded" : "-zero 0", world, names[k], same ? "bitwise equal to" : "DIFFERENT from", d);
            EXPECT(same, "N=%d zero %d: %s after AdamW differs from one rank's update", world, zero, names[k]);
        }
        if (!zero) {  // the norm, clip scale and skip flag: one rank's on every rank
            int same = 1;
            for (int r = 0; r < world; r++) same &= memcmp(sr[r].norm, base->norm, sizeof(base->norm)) == 0;
            printf("-zero 0 AdamW N=%d: norm %.6f, clip scale %.6f on every rank %s one rank's\n", world, sr[0].norm[0],
                   sr[0].norm[1], same ? "bitwise equal to" : "DIFFERENT from");
            EXPECT(same, "N=%d -zero 0: the norm or clip scale differs from one rank's on some rank", world);
        }
        for (int r = 0; r < world; r++)
            for (int k = 0; k < 4; k++) free(out[r][k]);
    }
    for (int k = 0; k < 4; k++) { free(ref[k]); free(ref_clip[k]); }
    for (int t = 0; t < 2; t++) { free(g[t]); free(g_part[t]); }
}

// 3. checkpoints across world sizes; all: also N=1 -> N=2 and N=2 -> N=2 -zero 0 round trips, v bitwise
// after the resume at the same N, and the resume at the other N
static void test_checkpoints(size_t n, const float* init, int all) {
    char dir[] = "/tmp/test_dist.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(EXIT_FAILURE); }
    char pa[256], pb[256], pc[256], pd[256], pe[256];
    snprintf(pa, sizeof(pa), "%s/a_n2.bin", dir);
    snprintf(pb, sizeof(pb), "%s/b_n1.bin", dir);
    snprintf(pc, sizeof(pc), "%s/c_n1.bin", dir);
    snprintf(pd, sizeof(pd), "%s/d_n2.bin", dir);
    snprintf(pe, sizeof(pe), "%s/e_n2_zero0.bin", dir);
    float lf[MAX_STEPS], lr2[MAX_STEPS], lr1[MAX_STEPS];
    float* mf = (float*)malloc_check(n * sizeof(float));
    float* mr2 = (float*)malloc_check(n * sizeof(float));
    float* mr1 = (float*)malloc_check(n * sizeof(float));
    float* vf = (float*)malloc_check(n * sizeof(float));
    float* vr2 = (float*)malloc_check(n * sizeof(float));

    Job a = job(2, 1, 0, 2);  a.save = pa;
    Job b = job(1, 2, 2, 2);  b.load = pa; b.save = pb;   // no steps: load at N=1, write back
    Job c = job(1, 2, 0, 2);  c.save = pc;
    Job d = job(2, 1, 2, 2);  d.load = pc; d.save = pd;   // load at N=2, write back
    Job e = job(2, 1, 2, 2);  e.load = pa; e.save = pe; e.zero = 0;  // load at N=2 unsharded, write back
    EXPECT(run_job(&a) == 0 && run_job(&b) == 0 && (!all || (run_job(&c) == 0 && run_job(&d) == 0 && run_job(&e) == 0)),
           "a checkpoint job failed");
    int ab = files_equal(pa, pb);
    printf("checkpoint written at N=2, loaded at N=1 and written again: %s\n", ab ? "byte-identical" : "DIFFERENT");
    EXPECT(ab, "N=2 -> N=1 round trip changed the checkpoint");
    if (all) {
        int cd = files_equal(pc, pd), ae = files_equal(pa, pe);
        printf("checkpoint written at N=1, loaded at N=2 and written again: %s\n", cd ? "byte-identical" : "DIFFERENT");
        printf("checkpoint written at N=2, loaded at N=2 with -zero 0 and written again: %s\n",
               ae ? "byte-identical" : "DIFFERENT");
        EXPECT(cd, "N=1 -> N=2 round trip changed the checkpoint");
        EXPECT(ae, "N=2 -> N=2 -zero 0 round trip changed the checkpoint");
    }

    Job full = job(2, 1, 0, 4);        full.losses = lf; full.master = mf; full.v = all ? vf : NULL;
    Job same = job(2, 1, 2, 4);        same.load = pa; same.losses = lr2; same.master = mr2; same.v = all ? vr2 : NULL;
    Job other = job(1, 2, 2, 4);       other.load = pa; other.losses = lr1; other.master = mr1;
    EXPECT(run_job(&full) == 0 && run_job(&same) == 0 && (!all || run_job(&other) == 0), "a resumed job failed");
    int bitwise = memcmp(lf + 2, lr2 + 2, 2 * sizeof(float)) == 0 && memcmp(mf, mr2, n * sizeof(float)) == 0 &&
                  (!all || memcmp(vf, vr2, n * sizeof(float)) == 0);
    printf("resume at N=2 of an N=2 checkpoint: losses %.7f %.7f vs uninterrupted %.7f %.7f; master%s %s\n",
           lr2[2], lr2[3], lf[2], lf[3], all ? " and v" : "", bitwise ? "bitwise equal" : "DIFFERENT");
    EXPECT(bitwise, "resuming at the same N is not bitwise the uninterrupted run");
    if (all) compare_runs("resume at N=1 of an N=2 checkpoint vs N=2 uninterrupted", lr1, lf, 2, 4, mr1, mf, init, n);
    free(mf); free(mr2); free(mr1); free(vf); free(vr2);
    remove(pa); remove(pb); remove(pc); remove(pd); remove(pe);
    rmdir(dir);
}

int main(void) {
    test_require_cuda("test_dist");
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int f = 0; f < MODEL_NUM_FAMILIES; f++) {
        int gpt2 = f == MODEL_FAMILY_GPT2;
        the_config = gpt2 ? gpt2_config() : llama_config();
        T_ = the_config.max_seq_len;
        printf("--- %s, B=%d, T=%d per rank\n", model_spec(f)->name, B_, T_);
        size_t n = num_params();
        float* init = (float*)malloc_check(n * sizeof(float));
        init_master(init);
        test_data_parallel(n, init, gpt2 ? 4 : 2);
        if (gpt2) test_sharded_adamw(n);
        test_checkpoints(n, init, gpt2);
        free(init);
    }
    return test_summary("test_dist");
}
