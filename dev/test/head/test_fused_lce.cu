// test_fused_lce.cu: GPU test of the LM head API (llmc/head/fused_lce.cuh) against the CPU fp64 reference:
// every entry point (training, loss only, recomputing backward with per-row upstream gradients), each
// feature (ignore_index, z-loss, soft-capping, label smoothing), each path (chunks, several per call;
// blocks, several row and vocab blocks, and their default widths; unfused; auto's choice), the Hopper
// kernels and what runs without them, and the playground's experiments through the head's hooks (the
// fused backward, atomic and deterministic, several dx chunks; on Hopper our own dx/dW GEMMs), bitwise
// determinism, bad targets flagged, and bad configurations refused with an error exit. The staged path
// (Hopper) in each of its cases: one chunk, several, loss only, per-row upstream gradients, rows whose
// softmax is too peaked for their reference (their statistics and E taken again, in one chunk of several),
// determinism and auto's choice.
// the head with its experiment hooks (FusedLceHooks): the variants are tested too
#define FUSED_LCE_DEV_HOOKS
#include <vector>
#include <sys/wait.h>
#include <unistd.h>
#include "../../../llmc/head/fused_lce.cuh"
#include "../../cuda/fused_lce_variants.cuh"
#include "../../ref/fused_lce_check.cuh"
#include "../testing.h"

static FusedLceOptions options(float z_loss, float softcap, float smoothing) {
    FusedLceOptions o = fused_lce_options_default();
    o.z_loss = z_loss; o.softcap = softcap; o.label_smoothing = smoothing;
    return o;
}

// A head of the given path (or auto) for case cs: `budget` bounds its scratch (0: the default),
// vocab blocks of at most vb_max columns (0: the default), fallbacks as FusedLceConfig's
static void build(FusedLce* h, const FusedLceCase* cs, FusedLcePath path, size_t budget, int vb_max, unsigned fallbacks) {
    FusedLceConfig cfg = fused_lce_config(cs->N, cs->C, cs->V, cs->Vp);
    cfg.opt = cs->opt;
    cfg.path = path;
    cfg.scratch = budget;
    cfg.vocab_block_max = vb_max;
    cfg.fallbacks = fallbacks;
    fused_lce_build(h, &cfg);
}

// Builds the head (path chunks, or unfused when logits_fp32 == 0; `budget` bounds its scratch; variant
// 3 or 4: the playground's fused backward, atomic or deterministic; 5 the two-dimensional blocks, vocab
// blocks of at most 1024 columns; 6 those with our own dx and dW GEMMs) and checks one mode.
static void check(const FusedLceCase* cs, int logits_fp32, size_t budget, int mode, int variant, const GpuContext* ctx) {
    FusedLceInputs in = fused_lce_inputs_make(cs, 42 + cs->N + cs->V);
    FusedLceDevice d = fused_lce_device_make(cs, &in);
    FusedLce h;
    FusedLceVariantState st;
    if (variant) fused_lce_variant_build(&h, &st, fused_lce_variant(variant), cs->N, cs->C, cs->V, cs->Vp, cs->opt, budget,
                                         variant == 5 || variant == 6 ? 1024 : 0);
    else build(&h, cs, logits_fp32 ? FUSED_LCE_PATH_CHUNKS : FUSED_LCE_PATH_UNFUSED, budget, 0, 0);
    if (variant == 7) {
        printf("  (staged, chunks of %d rows)\n", h.staged.rows);
        EXPECT(h.cfg.path == FUSED_LCE_PATH_STAGED, "%s: variant 7 built path %s", cs->what, fused_lce_path_name(h.cfg.path));
    } else if (variant >= 5) {
        printf("  (blocks of %d rows x %d vocab columns, pass 1 %s%s)\n", h.blk.nb, h.blk.vb,
               h.blk.wgmma ? "by the wgmma forward, pass 2 by the wgmma gradient" : "in the blocks",
               h.blk.gemms ? ", dx and dW by wgmma_gemm" : "");
        EXPECT((h.blk.gemms != NULL) == (variant == 6 && h.sm90), "%s: own GEMMs %d with variant %d, sm90 %d",
               cs->what, h.blk.gemms != NULL, variant, h.sm90);
    } else if (variant) {
        printf("  (fused backward, variant %d)\n", variant);
    }
    int ok = fused_lce_check_mode(&h, mode, cs, &in, &d, ctx);
    EXPECT(ok, "%s (mode %d, %s head, variant %d, %d-row chunks) differs from the reference beyond tolerance", cs->what,
           mode, fused_lce_path_name(h.cfg.path), variant, h.chunks.rows);
    EXPECT(fused_lce_bad_target_row(&h, ctx) < 0, "%s: a bad target was flagged, but all are valid", cs->what);
    fused_lce_free(&h);
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// Whether the staged path runs here and for this case (an sm_90a build on Hopper, C % 64 == 0, not
// soft-capping with label smoothing)
static int staged_runs(const FusedLceCase* cs) {
    return fused_lce_wgmma_available() && cs->C % 64 == 0 && !(cs->opt.softcap > 0.0f && cs->opt.label_smoothing > 0.0f);
}

// A budget whose staged chunks hold `rows` rows of the case (as fused_lce_staged_rows counts them)
static size_t staged_budget(const FusedLceCase* cs, int rows) {
    return fused_lce_staged_budget(rows, cs->N, cs->C, cs->Vp);
}

// The row kernel without its shared-memory staging (what vocabularies wider than shared memory use,
// e.g. V = 128256): training and the recomputing backward against the reference.
static void check_unstaged(const FusedLceCase* cs, const GpuContext* ctx) {
    FusedLceInputs in = fused_lce_inputs_make(cs, 43 + cs->N + cs->V);
    FusedLceDevice d = fused_lce_device_make(cs, &in);
    FusedLce h;
    size_t budget = (size_t)64 * cs->Vp * sizeof(float);
    build(&h, cs, FUSED_LCE_PATH_CHUNKS, budget, 0, 0);
    EXPECT(h.chunks.staged > 0, "%s: expected the row kernel to stage rows of %d floats", cs->what, cs->Vp);
    fused_lce_free(&h);
    build(&h, cs, FUSED_LCE_PATH_CHUNKS, budget, 0, FUSED_LCE_NO_ROW_STAGING);
    EXPECT(h.chunks.staged == 0, "%s: FUSED_LCE_NO_ROW_STAGING, but the rows are staged", cs->what);
    printf("  (row kernel without shared-memory staging)\n");
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, cs, &in, &d, ctx), "%s: unstaged rows, training differs", cs->what);
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_BACKWARD, cs, &in, &d, ctx), "%s: unstaged rows, backward differs", cs->what);
    fused_lce_free(&h);
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// What GPUs without the Hopper kernel run (and what this one runs with it switched off): the mma.sync
// forward for loss-only calls, and the blocks' own pass 1 (a statistics kernel per block of logits).
static void check_without_wgmma(const FusedLceCase* cs, const GpuContext* ctx) {
    FusedLceInputs in = fused_lce_inputs_make(cs, 44 + cs->N + cs->V);
    FusedLceDevice d = fused_lce_device_make(cs, &in);
    FusedLce h;
    build(&h, cs, FUSED_LCE_PATH_CHUNKS, 0, 0, FUSED_LCE_NO_SM90);
    EXPECT(!h.sm90 && h.fused_forward, "%s: FUSED_LCE_NO_SM90: sm90 %d, fused forward %d", cs->what, h.sm90, h.fused_forward);
    printf("  (mma.sync forward, no wgmma)\n");
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_FORWARD, cs, &in, &d, ctx), "%s: mma.sync forward differs", cs->what);
    fused_lce_free(&h);
    build(&h, cs, FUSED_LCE_PATH_BLOCKS, (size_t)64 * cs->Vp * sizeof(float), 1024, FUSED_LCE_NO_SM90);
    printf("  (blocks of %d rows x %d vocab columns, their own pass 1)\n", h.blk.nb, h.blk.vb);
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, cs, &in, &d, ctx), "%s: blocks without wgmma differ", cs->what);
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_FORWARD, cs, &in, &d, ctx), "%s: blocks' forward without wgmma differs", cs->what);
    fused_lce_free(&h);
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// Two training calls on the same inputs give bit-identical loss, dx and dW (chunked head; the playground's
// deterministic fused backward, variant 4; the blocks, 5; the blocks with our own GEMMs, 6).
static void check_determinism(int variant, const GpuContext* ctx) {
    FusedLceCase cs = {333, 256, 5000, 5120, options(1e-4f, 0.0f, 0.0f), 9, "determinism"};
    FusedLceInputs in = fused_lce_inputs_make(&cs, 7);
    FusedLceDevice d = fused_lce_device_make(&cs, &in);
    FusedLce h;
    FusedLceVariantState st;
    size_t budget = (size_t)100 * cs.Vp * sizeof(float);
    if (variant) fused_lce_variant_build(&h, &st, fused_lce_variant(variant), cs.N, cs.C, cs.V, cs.Vp, cs.opt, budget,
                                         variant >= 5 ? 1024 : 0);
    else build(&h, &cs, FUSED_LCE_PATH_CHUNKS, budget, 0, 0);
    if (variant == 7) {  // 64-row chunks instead: several per call
        fused_lce_free(&h);
        fused_lce_variant_build(&h, &st, fused_lce_variant(7), cs.N, cs.C, cs.V, cs.Vp, cs.opt, staged_budget(&cs, 64), 0);
    }
    FusedLceOutputs run[2];
    for (int r = 0; r < 2; r++) {
        fused_lce_device_reset(&d, &cs, &in);
        fused_lce_forward_backward(&h, d.dx, d.dW, 1.0f, d.x, d.W, d.t, cs.N, ctx);
        run[r] = fused_lce_outputs_download(&h, &d, &cs, 1);
    }
    EXPECT(memcmp(&run[0].loss, &run[1].loss, sizeof(float)) == 0, "determinism: loss differs between runs");
    EXPECT(memcmp(run[0].dx, run[1].dx, (size_t)cs.N * cs.C * sizeof(float)) == 0, "determinism: dx differs between runs");
    EXPECT(memcmp(run[0].dW, run[1].dW, (size_t)cs.Vp * cs.C * sizeof(float)) == 0, "determinism: dW differs between runs");
    printf("determinism (%s): two runs of %d rows: loss, dx, dW bitwise %s\n",
           variant == 7 ? "staged, variant 7" : variant == 6 ? "blocks, own GEMMs, variant 6" : variant == 5 ? "blocks, variant 5"
           : variant ? "fused backward, variant 4" : "chunked", cs.N,
           test_failed ? "DIFFERENT" : "identical");
    for (int r = 0; r < 2; r++) fused_lce_outputs_free(&run[r]);
    fused_lce_free(&h);
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// Path auto (the trainer's -head fused): staged where it runs and a chunk holds at least
// FUSED_LCE_STAGED_ROWS_MIN rows or all of them; else the blocks while a chunk of fp32 logits would hold fewer
// than FUSED_LCE_CHUNK_ROWS_MIN rows and not all of them; else the chunks.
static void check_choice(void) {
    int sm90 = fused_lce_wgmma_available();
    struct { int max_n; size_t mib; unsigned fallbacks; FusedLcePath expect; } cases[] = {
        {4096, 64, 0, FUSED_LCE_PATH_BLOCKS},                           // 660-row staged chunks, 320 rows of fp32
        {4096, 512, 0, sm90 ? FUSED_LCE_PATH_STAGED : FUSED_LCE_PATH_CHUNKS},  // all rows staged; 2656-row fp32 chunks
        {8192, 256, 0, sm90 ? FUSED_LCE_PATH_STAGED : FUSED_LCE_PATH_CHUNKS},  // 2624-row staged chunks
        {200, 64, 0, sm90 ? FUSED_LCE_PATH_STAGED : FUSED_LCE_PATH_CHUNKS},    // one chunk holds all the rows
        {4096, 512, FUSED_LCE_NO_SM90, FUSED_LCE_PATH_CHUNKS},                // no Hopper kernels
        {65536, 0, 0, sm90 ? FUSED_LCE_PATH_STAGED : FUSED_LCE_PATH_CHUNKS},  // sized by the build: 1 GiB, 7 chunks
        {16384, 0, 0, sm90 ? FUSED_LCE_PATH_STAGED : FUSED_LCE_PATH_CHUNKS},  // a quarter of the logits: 5 chunks
    };
    for (int i = 0; i < 7; i++) {
        FusedLce h;
        FusedLceConfig cfg = fused_lce_config(cases[i].max_n, 64, 50257, 50304);
        cfg.scratch = cases[i].mib << 20;
        cfg.fallbacks = cases[i].fallbacks;
        fused_lce_build(&h, &cfg);
        EXPECT(h.cfg.path == cases[i].expect, "auto head for max_n %d and %zu MiB (fallbacks %u): %s, expected %s",
               cases[i].max_n, cases[i].mib, cases[i].fallbacks, fused_lce_path_name(h.cfg.path),
               fused_lce_path_name(cases[i].expect));
        size_t cap = cases[i].mib ? cases[i].mib << 20 : h.cfg.path == FUSED_LCE_PATH_STAGED ? FUSED_LCE_STAGED_AUTO_CAP
                   : FUSED_LCE_DEFAULT_SCRATCH;
        EXPECT(h.scratch_bytes <= cap, "auto head: scratch %zu bytes over the %zu-byte budget", h.scratch_bytes, cap);
        if (!cases[i].mib && h.cfg.path == FUSED_LCE_PATH_STAGED) {  // at most a quarter of the unfused logits' bytes
            size_t quarter = (size_t)cases[i].max_n * 50304 * 2 / 4;
            EXPECT(h.scratch_bytes + 2 * (size_t)cases[i].max_n * 4 <= quarter && h.staged.rows >= cases[i].max_n / 8,
                   "auto head sized by the build: %d-row chunks in %zu bytes (a quarter of the logits: %zu)",
                   h.staged.rows, h.scratch_bytes, quarter);
        }
        printf("auto head, max_n %d, %zu MiB: %s", cases[i].max_n, cases[i].mib, fused_lce_path_name(h.cfg.path));
        if (h.cfg.path == FUSED_LCE_PATH_BLOCKS) printf(" (blocks of %d x %d)\n", h.blk.nb, h.blk.vb);
        else if (h.cfg.path == FUSED_LCE_PATH_STAGED) printf(" (%d-row staged chunks)\n", h.staged.rows);
        else printf(" (%d-row chunks)\n", h.chunks.rows);
        fused_lce_free(&h);
    }
}

// The blocks at their default widths (path auto, as the trainer builds them): on Hopper few
// rows take vocab blocks wider than FUSED_LCE_BLOCK_VOCAB (fused_lce_plan_vocab_max), here 300 rows of V = 50257 in
// a 100-row chunk budget; training against the reference, with and without our own GEMMs.
static void check_default_width(const GpuContext* ctx) {
    FusedLceCase cs = {300, 64, 50257, 50304, options(1e-4f, 0.0f, 0.0f), 5, "blocks of the default width, V=50257"};
    FusedLceInputs in = fused_lce_inputs_make(&cs, 11);
    FusedLceDevice d = fused_lce_device_make(&cs, &in);
    for (int own = 0; own < 2; own++) {
        FusedLce h;
        FusedLceVariantState st;
        size_t budget = (size_t)100 * cs.Vp * sizeof(float);
        if (own) fused_lce_variant_build(&h, &st, fused_lce_variant(6), cs.N, cs.C, cs.V, cs.Vp, cs.opt, budget, 0);
        else build(&h, &cs, FUSED_LCE_PATH_AUTO, budget, 0, 0);
        int blocks = h.cfg.path == FUSED_LCE_PATH_BLOCKS;
        int wide = h.blk.vb > FUSED_LCE_BLOCK_VOCAB && h.blk.vb <= fused_lce_plan_vocab_max(cs.N, h.budget, cs.C, 1) + 255;
        EXPECT(blocks && (h.sm90 ? wide : h.blk.vb <= FUSED_LCE_BLOCK_VOCAB),
               "default width (sm90 %d): path %s, blocks of %d columns", h.sm90, fused_lce_path_name(h.cfg.path), h.blk.vb);
        printf("  (blocks of %d rows x %d vocab columns%s)\n", h.blk.nb, h.blk.vb, h.blk.gemms ? ", own GEMMs" : "");
        EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, &cs, &in, &d, ctx), "%s (own GEMMs %d) differs", cs.what, own);
        fused_lce_free(&h);
    }
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// Logits that grow along the vocabulary: the wgmma forward sums a tile relative to the row's running
// max without taking the tile's own, and takes it only when the sum passes 2^64 (a logit ~44 above;
// llmc/head/fused_lce_sm90.cuh). W's rows from 1024 on scaled by 3 (logits up to ~30 above the first
// tiles': summed relative to a stale max) and by 16 (~150 above: the tile summed again, some sums inf
// first); training and loss only through the blocks, against the reference.
static void check_growing_logits(const GpuContext* ctx) {
    for (int k = 0; k < 2; k++) {
        float scale = k ? 16.0f : 3.0f;
        FusedLceCase cs = {300, 256, 5000, 5120, options(0, 0, k ? 0.1f : 0.0f), 0,
                       k ? "logits x16 from column 1024, label smoothing" : "logits x3 from column 1024"};
        FusedLceInputs in = fused_lce_inputs_make(&cs, 21 + k);
        for (size_t i = (size_t)1024 * cs.C; i < (size_t)cs.Vp * cs.C; i++) in.W[i] = bf16_round(in.W[i] * scale);
        FusedLceDevice d = fused_lce_device_make(&cs, &in);
        FusedLce h;
        build(&h, &cs, FUSED_LCE_PATH_BLOCKS, 0, 1024, 0);
        printf("  (blocks of %d rows x %d columns%s)\n", h.blk.nb, h.blk.vb, h.sm90 ? ", wgmma forward" : "");
        EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, &cs, &in, &d, ctx), "%s: training differs", cs.what);
        EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_FORWARD, &cs, &in, &d, ctx), "%s: loss only differs", cs.what);
        fused_lce_free(&h);
        if (staged_runs(&cs)) {  // lse far above the rows' mean logit: the chunks are staged again
            build(&h, &cs, FUSED_LCE_PATH_STAGED, staged_budget(&cs, 128), 0, 0);
            printf("  (staged, chunks of %d rows)\n", h.staged.rows);
            EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, &cs, &in, &d, ctx), "%s: staged training differs", cs.what);
            EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_BACKWARD, &cs, &in, &d, ctx), "%s: staged backward differs", cs.what);
            fused_lce_free(&h);
        }
        fused_lce_device_free(&d);
        fused_lce_inputs_free(&in);
    }
}

// The largest gap, over rows r0 .. r1-1, between a logit and its row's mean logit R (the staged path's
// reference), in fp64 from the inputs as the head sees them
static double max_gap_above_mean(const FusedLceCase* cs, const FusedLceInputs* in, int r0, int r1) {
    std::vector<double> wmean(cs->C, 0.0);
    for (int j = 0; j < cs->V; j++)
        for (int c = 0; c < cs->C; c++) wmean[c] += in->W[(size_t)j * cs->C + c] / cs->V;
    double gap = -INFINITY;
    for (int r = r0; r < r1; r++) {
        const float* x = in->x + (size_t)r * cs->C;
        double R = 0.0, mx = -INFINITY;
        for (int c = 0; c < cs->C; c++) R += x[c] * wmean[c];
        for (int j = 0; j < cs->V; j++) {
            double s = 0.0;
            for (int c = 0; c < cs->C; c++) s += (double)x[c] * in->W[(size_t)j * cs->C + c];
            mx = fmax(mx, s);
        }
        gap = fmax(gap, mx - R);
    }
    return gap;
}

// The staged path's fallback, chunk by chunk: the first of three 128-row chunks has its rows of x scaled
// by 16 (logits ~150 above the rows' mean: the sums relative to R overflow, the chunk is flagged, its
// statistics are taken again relative to each tile's max and E again relative to lse); the other two
// are not flagged and must not be staged again (the flag is cleared between chunks).
static void check_staged_fallback(const GpuContext* ctx) {
    FusedLceCase cs = {300, 256, 5000, 5120, options(1e-4f, 0, 0), 0, "rows x16 in the first chunk, z-loss"};
    if (!staged_runs(&cs)) return;
    FusedLceInputs in = fused_lce_inputs_make(&cs, 23);
    for (size_t i = 0; i < (size_t)128 * cs.C; i++) in.x[i] = bf16_round(in.x[i] * 16.0f);
    double gap = max_gap_above_mean(&cs, &in, 0, 128);
    printf("  (first chunk: a logit %.1f above its row's mean)\n", gap);
    EXPECT(gap > 89.0, "%s: the largest logit is %.1f above its row's mean, too little to overflow a sum (> 89)",
           cs.what, gap);
    FusedLceDevice d = fused_lce_device_make(&cs, &in);
    FusedLce h;
    build(&h, &cs, FUSED_LCE_PATH_STAGED, staged_budget(&cs, 128), 0, 0);
    printf("  (staged, chunks of %d rows)\n", h.staged.rows);
    EXPECT(h.staged.rows == 128, "%s: chunks of %d rows, expected 128", cs.what, h.staged.rows);
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_TRAIN, &cs, &in, &d, ctx), "%s: training differs", cs.what);
    EXPECT(fused_lce_check_mode(&h, FUSED_LCE_MODE_BACKWARD, &cs, &in, &d, ctx), "%s: backward differs", cs.what);
    fused_lce_free(&h);
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// A target >= V (not ignore_index) is flagged with its row, and that row counts as ignored.
static void check_bad_target(FusedLcePath path, const GpuContext* ctx) {
    FusedLceCase cs = {50, 64, 500, 512, fused_lce_options_default(), 0, "bad target"};
    FusedLceInputs in = fused_lce_inputs_make(&cs, 9);
    in.t[17] = 500;  // == V
    FusedLceDevice d = fused_lce_device_make(&cs, &in);
    FusedLce h;
    build(&h, &cs, path, 0, 0, 0);
    fused_lce_device_reset(&d, &cs, &in);
    fused_lce_forward_backward(&h, d.dx, d.dW, 1.0f, d.x, d.W, d.t, cs.N, ctx);
    int row = fused_lce_bad_target_row(&h, ctx);
    EXPECT(row == 17, "bad target: flagged row %d, expected 17", row);
    FusedLceOutputs o = fused_lce_outputs_download(&h, &d, &cs, 1);
    EXPECT(o.loss_rows[17] == 0.0f, "bad target: its row has loss %g, expected 0 (treated as ignored)", o.loss_rows[17]);
    int zero = 1;
    for (int c = 0; c < cs.C; c++) zero &= o.dx[17 * cs.C + c] == 0.0f;
    EXPECT(zero, "bad target: its row has a non-zero dx");
    printf("bad target (%s): row %d flagged, loss 0, no gradient\n", fused_lce_path_name(path), row);
    fused_lce_outputs_free(&o);
    fused_lce_free(&h);
    fused_lce_device_free(&d);
    fused_lce_inputs_free(&in);
}

// Bad sizes end the process with an error before any device work: run each in a child and expect exit 1.
static void expect_exit(const char* what, int which) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FusedLce h;
        FusedLceConfig c = fused_lce_config(16, 64, 100, 128);
        if (which == 0) c.C = 12;                      // C % 8 != 0
        if (which == 1) c.V = 200;                     // V > Vp
        if (which == 2) c.max_n = 0;                   // no rows
        if (which == 3) c.opt.label_smoothing = 1.0f;
        if (which == 4) c.path = (FusedLcePath)9;          // no such path
        if (which == 5) { c.path = FUSED_LCE_PATH_CHUNKS; c.scratch = 15 * 128 * 4; }  // fewer than 16 rows of logits
        if (which == 7) { c.path = FUSED_LCE_PATH_STAGED; c.opt.softcap = 10.0f; c.opt.label_smoothing = 0.1f; }
        if (which == 6) { FusedLceHooks k = {}; k.block_gemms = fused_lce_variant_own_gemms; c.hooks = &k; c.path = FUSED_LCE_PATH_CHUNKS; fused_lce_build(&h, &c); }
        fused_lce_build(&h, &c);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == EXIT_FAILURE, "%s: expected an error exit, got status %d", what, status);
    printf("bad arguments: %s -> error exit\n", what);
}

int main(void) {
    expect_exit("C = 12 (not a multiple of 8)", 0);
    expect_exit("V = 200 > Vp = 128", 1);
    expect_exit("max_n = 0", 2);
    expect_exit("label_smoothing = 1", 3);
    expect_exit("path 9", 4);
    expect_exit("chunks in a budget of 15 rows", 5);
    expect_exit("a block GEMM hook on path chunks", 6);
    expect_exit("path staged with soft-capping and label smoothing", 7);

    GpuContext ctx;
    gpu_context_build(&ctx, 0);
    const FusedLceCase cases[] = {
        {300, 256, 5000, 5120, options(0, 0, 0), 0, "plain N=300 C=256 V=5000"},
        {1, 128, 1000, 1024, options(0, 0, 0), 0, "N=1"},
        {64, 64, 777, 784, options(0, 0, 0), 1, "all rows ignored"},
        {200, 192, 3001, 3008, options(0, 0, 0), 4, "ignore_index every 4th row"},
        {160, 128, 2000, 2048, options(1e-3f, 0, 0), 0, "z-loss"},
        {160, 128, 2000, 2048, options(0, 5.0f, 0), 0, "soft-capping at 5"},
        {160, 128, 2000, 2048, options(0, 0, 0.1f), 0, "label smoothing 0.1"},
        {257, 256, 4093, 4096, options(1e-4f, 15.0f, 0.1f), 7, "all features, V=4093"},
        {96, 200, 1000, 1024, options(0, 0, 0), 0, "C=200 (not a multiple of 64: chunked forward)"},
    };
    int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < ncases; i++) {
        const FusedLceCase* cs = &cases[i];
        size_t small = (size_t)64 * cs->Vp * sizeof(float);  // 64-row chunks: several per call
        check(cs, 1, FUSED_LCE_DEFAULT_SCRATCH, FUSED_LCE_MODE_TRAIN, 0, &ctx);
        check(cs, 1, small, FUSED_LCE_MODE_TRAIN, 0, &ctx);
        check(cs, 1, FUSED_LCE_DEFAULT_SCRATCH, FUSED_LCE_MODE_FORWARD, 0, &ctx);
        check(cs, 1, small, FUSED_LCE_MODE_BACKWARD, 0, &ctx);
        check(cs, 0, 0, FUSED_LCE_MODE_TRAIN, 0, &ctx);
        // the blocks: one row block; then 64-row budgets, i.e. several row blocks and vocab blocks
        check(cs, 1, FUSED_LCE_DEFAULT_SCRATCH, FUSED_LCE_MODE_TRAIN, 5, &ctx);
        check(cs, 1, small, FUSED_LCE_MODE_TRAIN, 5, &ctx);
        check(cs, 1, small, FUSED_LCE_MODE_FORWARD, 5, &ctx);
        check(cs, 1, small, FUSED_LCE_MODE_BACKWARD, 5, &ctx);
        if (cs->C % 64 == 0) {
            // the blocks with our own dx and dW GEMMs (Hopper)
            check(cs, 1, FUSED_LCE_DEFAULT_SCRATCH, FUSED_LCE_MODE_TRAIN, 6, &ctx);
            check(cs, 1, small, FUSED_LCE_MODE_TRAIN, 6, &ctx);
            check(cs, 1, small, FUSED_LCE_MODE_BACKWARD, 6, &ctx);
            // the fused backward; a 16-row logits budget gives dx chunks of 16·Vp/C rows
            size_t tiny = (size_t)16 * cs->Vp * sizeof(float);
            check(cs, 1, tiny, FUSED_LCE_MODE_TRAIN, 3, &ctx);
            check(cs, 1, tiny, FUSED_LCE_MODE_TRAIN, 4, &ctx);
            check(cs, 1, tiny, FUSED_LCE_MODE_BACKWARD, 3, &ctx);
            check(cs, 1, tiny, FUSED_LCE_MODE_BACKWARD, 4, &ctx);
        }
        if (staged_runs(cs)) {
            // the staged path: one chunk, then 64-row chunks (several per call)
            check(cs, 1, staged_budget(cs, 512), FUSED_LCE_MODE_TRAIN, 7, &ctx);
            check(cs, 1, staged_budget(cs, 64), FUSED_LCE_MODE_TRAIN, 7, &ctx);
            check(cs, 1, staged_budget(cs, 64), FUSED_LCE_MODE_FORWARD, 7, &ctx);
            check(cs, 1, staged_budget(cs, 64), FUSED_LCE_MODE_BACKWARD, 7, &ctx);
        } else {
            printf("%s: no staged checks (%s)\n", cs->what, fused_lce_wgmma_available() ? "not a staged case" : "no Hopper kernels");
        }
    }
    for (int i = 0; i < ncases; i++)
        if (cases[i].C % 64 == 0) check_without_wgmma(&cases[i], &ctx);
    check_unstaged(&cases[0], &ctx);
    check_unstaged(&cases[7], &ctx);  // all features
    check_determinism(0, &ctx);
    check_determinism(4, &ctx);
    check_determinism(5, &ctx);
    check_determinism(6, &ctx);
    if (fused_lce_wgmma_available()) check_determinism(7, &ctx);
    check_bad_target(FUSED_LCE_PATH_CHUNKS, &ctx);
    if (fused_lce_wgmma_available()) check_bad_target(FUSED_LCE_PATH_STAGED, &ctx);
    check_choice();
    check_default_width(&ctx);
    check_growing_logits(&ctx);
    check_staged_fallback(&ctx);
    gpu_context_free(&ctx);
    return test_summary("test_fused_lce");
}
