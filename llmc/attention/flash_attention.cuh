// flash_attention.cuh: causal multi-head self-attention on the tensor cores, FlashAttention-2 style
// (mma.sync m16n8k16, bf16 in, fp32 accumulate; sm_80 and later), forward and backward, exact, with
// grouped-query attention (NKV key/value heads shared by NH query heads, NH % NKV == 0):
//   qkv (B, T, (NH + 2·NKV)·hs) bf16: query head h at channel h·hs, key head j at NH·hs + j·hs, value
//        head j at (NH + NKV)·hs + j·hs; query head h reads kv head j = h / (NH / NKV)
//   out (B, T, C = NH·hs) bf16: out[b, t, h·hs + d] = Σ_{t2 ≤ t} softmax_t2(q·k[t2] / √hs) · v[t2, d]
// NKV == NH is GPT-2's multi-head attention, qkv (B, T, 3C) with k at C + h·hs and v at 2C + h·hs: the
// same code with j = h (and in dkdv a group of one query head).
// Never materialized: the (B, NH, T, T) scores, not even per head. The forward keeps a 64 x 64 score
// tile in registers, folds it into a running (max, Σexp) per row (online softmax, fp32, base-2
// exponent with the 1/√hs scale folded in), and saves only lse (B, NH, T) fp32. P is rounded to bf16
// before P·V (as in FlashAttention); every sum over keys or queries is in fp32 registers.
//
// Backward (llmc/attention/flash_attention_backward.cuh), three kernels, no atomics (bitwise repeatable):
//   dot:  D = rowsum(dO ∘ O) (B, NH, T) fp32 from the forward's bf16 out
//   dkdv: block per (b, kv head j, 64 keys), loops over the group's query heads in order and, for each,
//         over its query tiles at or below the diagonal: recompute Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ − lse);
//         dV += Pᵀ·dO; dPᵀ = V·dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − D); dK += dSᵀ·Q (dK, dV of kv head j are sums over
//         its NH/NKV query heads, kept in registers: no atomics, a fixed order)
//   dq:   block per (b, h, 64 queries), loops over the key tiles up to the diagonal:
//         recompute S, P, dP = dO·Vᵀ, dS; dQ += dS·K
// The dq kernel recomputes S and dP (7 tile GEMMs in all instead of FlashAttention-2's 5 with dQ
// atomics): ~1.4x the backward FLOPs, bought for determinism and a write-once dqkv.
//
// Tiling: 128 threads = 4 warps; each warp owns 16 rows (queries, or keys in dkdv) of a 64-row tile
// and all of its columns, so softmax rows never cross warps. Tiles are [rows][hs + 8] bf16 in shared
// memory (16-byte pad: ldmatrix conflict-free), loaded with cp.async two stages deep, zero-filled past T.
// The S accumulator fragment is reused as the A operand of P·V without going through shared memory.
// dkdv uses 32-query steps at hs = 128 so that dK, dV, Pᵀ, dPᵀ fit the 255 registers of a thread.
//
// Napkin (causal, F = 4·B·NH·T²·hs / 2 for the forward's two GEMMs; the backward counts 2.5F by
// convention, executes 3.5F here): GPT-2 124M, B=64 T=1024 NH=12 hs=64: F = 103 GFLOP, so ~0.2 ms at
// 500 TF/s, against ~0.4 GB of compulsory HBM traffic (qkv, out: 0.08 ms at 4.8 TB/s): compute-bound;
// K/V tiles are re-read ~T/128 times per head, from L2 (a head's K and V are 256 KB).
// GQA changes no FLOP count (it is per query head) and shrinks K/V by NH/NKV: in the forward and dq the
// blocks of a group's query heads are adjacent in the grid (blockIdx.y = b·NH + h), so they share kv
// tiles in L2; dkdv has B·NKV·T/64 blocks, each NH/NKV times the work (B=4 NKV=8 T=4096: 2,048 blocks).
// RoPE (Llama-style models; a cos/sin table from llmc/layers/rope.cuh, NULL for none: GPT-2): the forward first
// rotates the k heads in place (rope_keys_forward, a pass over NKV heads), then each block loads its
// query tile by pairs (channels i and i + hs/2 by the same thread), rotates it in shared memory once
// that thread's copies have landed (no extra barrier), and writes it back rotated: qkv then holds the
// rotated q and k, as a separate pass would have left it. The backward reads them as they are; dq and
// dk, gradients with respect to the rotated q and k, are rotated back in registers before they are
// written (a thread holds both channels of each of its pairs: accumulator columns c and c + hs/2). The
// forward gives the unfused pass's bits exactly (the same rotation, llmc/layers/rope.cuh's rope_rotate8, on
// the same inputs); dq and dk skip one bf16 rounding that the unfused pass adds. llmc/layers/rope.cuh says why
// the keys are rotated by a pass and not in the kernel.
// Limits: hs ∈ {64, 128}, T ≥ 1 (any value; masked), NKV ≥ 1 dividing NH.
#pragma once
#include "../core/cuda_common.cuh"
#include "../layers/rope.cuh"
#include "../ptx/sm80_mma.cuh"

#define FA_THREADS 128  // 4 warps x 16 rows
#define FA_BQ 64        // forward and dq: query rows per block
#define FA_BKV 64       // forward and dq: keys per step; dkdv: keys per block
#define FA_PAD 8        // bf16 per smem row: a row of hs + 8 is an odd number of 16-byte units
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

template <int HS> struct FaCfg {
    static constexpr int LD = HS + FA_PAD;        // smem row stride (elements)
    static constexpr int BQ_DKV = HS <= 64 ? 64 : 32;  // dkdv: queries per step
    static constexpr size_t fwd_smem = (size_t)(FA_BQ + 4 * FA_BKV) * LD * 2;           // Q, 2x (K, V)
    static constexpr size_t dq_smem = (size_t)(2 * FA_BQ + 4 * FA_BKV) * LD * 2;        // Q, dO, 2x (K, V)
    static constexpr size_t dkdv_smem = (size_t)(2 * FA_BKV + 4 * BQ_DKV) * LD * 2 + 4 * BQ_DKV * 4;  // + 2x (lse, D)
};

typedef struct {
    bf16* out;         // (B, T, NH·hs)
    float* lse;        // (B, NH, T) natural-log logsumexp of the scaled scores
    bf16* qkv;         // (B, T, (NH + 2·NKV)·hs): NH q heads, NKV k heads, NKV v heads (with RoPE, the q
                       // heads are written back rotated; the k heads come rotated)
    const float* rope; // (>= T, hs/2, 2) RoPE's cos and sin (llmc/layers/rope.cuh), or NULL: no RoPE
    int B, T, NH, NKV;
} FlashFwdArgs;

// --- kernels ---------------------------------------------------------------------------------

// Where batch b's heads start in qkv (B, T, ld), ld = (NH + 2·NKV)·HS: query head h, and kv head j's keys
// and values.
typedef struct { size_t ld; const bf16 *q, *k, *v; } FaHeads;

template <int HS>
__device__ __forceinline__ FaHeads fa_heads(const bf16* qkv, int NH, int NKV, int T, int b, int h, int j) {
    FaHeads g;
    g.ld = (size_t)(NH + 2 * NKV) * HS;
    const bf16* row = qkv + (size_t)b * T * g.ld;
    g.q = row + h * HS;
    g.k = row + (NH + j) * HS;
    g.v = g.k + NKV * HS;
    return g;
}

__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lower column) in the low half
    return *(unsigned*)&v;
}

// Tile loads: rows row0.. of a (T, stride) matrix, hs columns, into [R][LD] smem; rows ≥ T are zeros.
template <int R, int HS>
__device__ __forceinline__ void fa_load_tile(bf16* s, const bf16* g, size_t stride, int row0, int T) {
    constexpr int CH = HS / 8;
    for (int c = threadIdx.x; c < R * CH; c += FA_THREADS) {
        int r = c / CH, col = (c % CH) * 8, row = row0 + r;
        cp_async16(s + r * FaCfg<HS>::LD + col, g + (size_t)(row < T ? row : 0) * stride + col, row < T);
    }
}

// RoPE's query-tile load: as fa_load_tile, but slot c of the tile's R·HS/16 takes row c / (HS/16) and both
// halves of pair group g = c % (HS/16): the 16-byte chunks at 8g and at HS/2 + 8g. fa_rope_tile walks the
// same slots, so each thread rotates exactly what it copied, after its own cp_async_wait: no barrier in
// between.
template <int R, int HS>
__device__ __forceinline__ void fa_load_tile_pairs(bf16* s, const bf16* g, size_t stride, int row0, int T) {
    constexpr int PG = HS / 16;
    for (int c = threadIdx.x; c < R * PG; c += FA_THREADS) {
        int r = c / PG, col = (c % PG) * 8, row = row0 + r;
        const bf16* src = g + (size_t)(row < T ? row : 0) * stride + col;
        bf16* dst = s + r * FaCfg<HS>::LD + col;
        cp_async16(dst, src, row < T);
        cp_async16(dst + HS / 2, src + HS / 2, row < T);
    }
}

// Rotates rows row0.. of a tile loaded by fa_load_tile_pairs (this thread's slots) at their positions,
// in shared memory and back to g (the rows it was loaded from); rows ≥ T stay zeros.
template <int R, int HS>
__device__ __forceinline__ void fa_rope_tile(bf16* s, bf16* g, size_t stride, const float* cos_sin, int row0, int T) {
    constexpr int PG = HS / 16;
    for (int c = threadIdx.x; c < R * PG; c += FA_THREADS) {
        int r = c / PG, col = (c % PG) * 8, row = row0 + r;
        if (row >= T) continue;
        bf16* p = s + r * FaCfg<HS>::LD + col;
        Bf16x8 x1 = load128(p), x2 = load128(p + HS / 2);
        rope_rotate8(&x1, &x2, cos_sin + ((size_t)row * (HS / 2) + col) * 2, 0);
        store128(p, x1);
        store128(p + HS / 2, x2);
        bf16* q = g + (size_t)row * stride + col;
        store128(q, x1);
        store128(q + HS / 2, x2);
    }
}

// A warp's 16 x HS accumulator of dq or dk (rows row0 + 0..15) rotated back by minus its rows' angles.
// The thread holding column c = 8·nd + 2·(lane & 3) + e (nd < HS/16) holds its partner c + HS/2 in
// acc[nd + HS/16]; the (cos, sin) of pairs c and c + 1 are one float4.
template <int HS>
__device__ __forceinline__ void fa_rope_acc_back(float (*acc)[4], const float* cos_sin, int row0, int T, int lane) {
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int row = row0 + (lane >> 2) + hh * 8;
        if (row >= T) continue;
        #pragma unroll
        for (int nd = 0; nd < HS / 16; nd++) {
            float4 v = *(const float4*)(cos_sin + ((size_t)row * (HS / 2) + nd * 8 + (lane & 3) * 2) * 2);
            rope_rotate(&acc[nd][hh * 2], &acc[nd + HS / 16][hh * 2], v.x, -v.y);
            rope_rotate(&acc[nd][hh * 2 + 1], &acc[nd + HS / 16][hh * 2 + 1], v.z, -v.w);
        }
    }
}

// acc (16 rows x NCOL columns per warp) += A·Bᵀ with A = 16 rows of sa, B = NCOL rows of sb
// (both [rows][LD] in smem, contraction over HS columns): the S = Q·Kᵀ pattern.
template <int HS, int NCOL>
__device__ __forceinline__ void fa_gemm_abt(float (*acc)[4], const bf16* sa, const bf16* sb, int lane) {
    constexpr int LD = FaCfg<HS>::LD;
    #pragma unroll
    for (int kk = 0; kk < HS; kk += 16) {
        unsigned a[4], r[4];
        ldmatrix_x4(a, sa + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk + (lane >> 4) * 8);
        #pragma unroll
        for (int nj = 0; nj < NCOL / 16; nj++) {
            ldmatrix_x4(r, sb + (nj * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(acc[2 * nj], a, r[0], r[1]);
            mma_bf16_16816(acc[2 * nj + 1], a, r[2], r[3]);
        }
    }
}

// acc (16 x HS per warp) += P·V with P (16 x K) in accumulator fragments p (K/8 tiles of 16 x 8),
// rounded to bf16 here, and V = K rows of sv ([K][LD] smem, read transposed): the O += P·V pattern.
template <int HS, int K>
__device__ __forceinline__ void fa_gemm_pv(float (*acc)[4], const float (*p)[4], const bf16* sv, int lane) {
    constexpr int LD = FaCfg<HS>::LD;
    #pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        unsigned a[4] = {fa_pack(p[2 * kk][0], p[2 * kk][1]), fa_pack(p[2 * kk][2], p[2 * kk][3]),
                         fa_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), fa_pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
        #pragma unroll
        for (int nd = 0; nd < HS / 16; nd++) {
            unsigned r[4];
            ldmatrix_x4_trans(r, sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + nd * 16 + (lane >> 4) * 8);
            mma_bf16_16816(acc[2 * nd], a, r[0], r[1]);
            mma_bf16_16816(acc[2 * nd + 1], a, r[2], r[3]);
        }
    }
}

// Writes a warp's 16 x HS fp32 accumulator (times scale) as bf16 rows row0 + 0..15 of dst (row stride
// `stride`), skipping rows ≥ T.
template <int HS>
__device__ __forceinline__ void fa_store_rows(bf16* dst, size_t stride, const float (*acc)[4], float scale,
                                              int row0, int T, int lane) {
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int row = row0 + (lane >> 2) + hh * 8;
        if (row >= T) continue;
        bf16* p = dst + (size_t)row * stride + (lane & 3) * 2;
        #pragma unroll
        for (int nd = 0; nd < HS / 8; nd++)
            *(__nv_bfloat162*)(p + nd * 8) = __floats2bfloat162_rn(acc[nd][hh * 2] * scale, acc[nd][hh * 2 + 1] * scale);
    }
}

// Block per (b·NH + h, query tile), reading kv head h / (NH/NKV); a head's heaviest (last) query tile
// is launched first (fa_grid). ROPE: the query tile rotated as it arrives (a.rope the table) and
// written back; the keys come rotated.
template <int HS, bool ROPE>
__global__ void __launch_bounds__(FA_THREADS) flash_forward_kernel(const FlashFwdArgs a) {
    constexpr int LD = FaCfg<HS>::LD;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    bf16* sQ = (bf16*)fa_smem;       // (BQ, LD)
    bf16* sK = sQ + FA_BQ * LD;      // (2, BKV, LD)
    bf16* sV = sK + 2 * FA_BKV * LD; // (2, BKV, LD)
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH, T = a.T;
    int q0 = (gridDim.x - 1 - blockIdx.x) * FA_BQ;
    FaHeads g = fa_heads<HS>(a.qkv, a.NH, a.NKV, T, b, h, h / (a.NH / a.NKV));
    int nkv = ceil_div(min(q0 + FA_BQ, T), FA_BKV);
    float sl2 = rsqrtf((float)HS) * FA_LOG2E;

    if (ROPE) fa_load_tile_pairs<FA_BQ, HS>(sQ, g.q, g.ld, q0, T);
    else fa_load_tile<FA_BQ, HS>(sQ, g.q, g.ld, q0, T);
    cp_async_commit();
    fa_load_tile<FA_BKV, HS>(sK, g.k, g.ld, 0, T);
    fa_load_tile<FA_BKV, HS>(sV, g.v, g.ld, 0, T);
    cp_async_commit();

    float o[HS / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int i = 0; i < HS / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    for (int j = 0; j < nkv; j++) {
        __syncthreads();  // every warp is done with the buffer that step j-1 read
        if (j + 1 < nkv) {
            int nb = (j + 1) & 1;
            fa_load_tile<FA_BKV, HS>(sK + nb * FA_BKV * LD, g.k, g.ld, (j + 1) * FA_BKV, T);
            fa_load_tile<FA_BKV, HS>(sV + nb * FA_BKV * LD, g.v, g.ld, (j + 1) * FA_BKV, T);
        }
        cp_async_commit();  // possibly empty: keeps "all but the newest group" meaning "tile j is here"
        cp_async_wait<1>();
        if (ROPE && j == 0)  // this thread's copies of the query tile are here
            fa_rope_tile<FA_BQ, HS>(sQ, (bf16*)g.q, g.ld, a.rope, q0, T);
        __syncthreads();
        const bf16* tK = sK + (j & 1) * FA_BKV * LD;
        const bf16* tV = sV + (j & 1) * FA_BKV * LD;
        float s[FA_BKV / 8][4];
        #pragma unroll
        for (int i = 0; i < FA_BKV / 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        fa_gemm_abt<HS, FA_BKV>(s, sQ + warp * 16 * LD, tK, lane);

        int k0 = j * FA_BKV, diag = k0 + FA_BKV > q0;
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int q = q0 + warp * 16 + (lane >> 2) + hh * 8;
            float mx = -INFINITY;
            #pragma unroll
            for (int ni = 0; ni < FA_BKV / 8; ni++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float v = s[ni][hh * 2 + e] * sl2;
                    if (diag && k0 + ni * 8 + (lane & 3) * 2 + e > q) v = -INFINITY;
                    s[ni][hh * 2 + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // finite: key 0 (first step) or the row's own key (diagonal step) is never masked
            float mnew = fmaxf(m[hh], mx), alpha = exp2f(m[hh] - mnew);
            m[hh] = mnew;
            l[hh] *= alpha;
            #pragma unroll
            for (int nd = 0; nd < HS / 8; nd++) { o[nd][hh * 2] *= alpha; o[nd][hh * 2 + 1] *= alpha; }
            #pragma unroll
            for (int ni = 0; ni < FA_BKV / 8; ni++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float p = exp2f(s[ni][hh * 2 + e] - mnew);
                    s[ni][hh * 2 + e] = p;
                    l[hh] += p;  // this lane's columns only; the quad is summed at the end
                }
        }
        fa_gemm_pv<HS, FA_BKV>(o, s, tV, lane);
    }

    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        int q = q0 + warp * 16 + (lane >> 2) + hh * 8;
        float inv = 1.0f / l[hh];
        #pragma unroll
        for (int nd = 0; nd < HS / 8; nd++) { o[nd][hh * 2] *= inv; o[nd][hh * 2 + 1] *= inv; }
        if ((lane & 3) == 0 && q < T) a.lse[(size_t)bh * T + q] = (m[hh] + log2f(l[hh])) * FA_LN2;
    }
    size_t C = (size_t)a.NH * HS;
    fa_store_rows<HS>(a.out + (size_t)b * T * C + h * HS, C, o, 1.0f, q0 + warp * 16, T, lane);
}

// --- launchers -------------------------------------------------------------------------------

// The grid of the kernels with a block per (head, tile), here and in the backwards: (tiles, heads). The
// GPU starts blocks x first, so the blocks running at once are the tiles of a few heads, which read the
// same K and V (or Q and dO) tiles, from L2 after the first; in the order (heads, tiles) each read its
// own head's from memory (dev/cuda/README.md, attention, has the bytes and the times).
static inline dim3 fa_grid(int heads, int tiles) {
    if (heads > 65535) check_fail("flash attention: B * heads is over the grid's 65535", "use a smaller batch (-b)");
    return dim3(tiles, heads);
}

static inline int flash_attention_head_size(int T, int C, int NH, int NKV) {
    int hs = NH > 0 ? C / NH : 0;
    if (T < 1 || NH < 1 || C % NH != 0 || (hs != 64 && hs != 128) || NKV < 1 || NH % NKV != 0)
        check_failf("the head size C/NH must be 64 or 128, and the kv heads NKV must divide NH",
                    "flash attention: C=%d NH=%d NKV=%d (head size %d) T=%d not supported", C, NH, NKV, hs, T);
    return hs;
}

template <int HS, bool ROPE>
static inline void flash_forward_launch(const FlashFwdArgs& a, cudaStream_t stream) {
    size_t smem = FaCfg<HS>::fwd_smem;
    auto kernel = flash_forward_kernel<HS, ROPE>;
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kernel<<<fa_grid(a.B * a.NH, ceil_div(a.T, FA_BQ)), FA_THREADS, smem, stream>>>(a);
    cuda_check_launch();
}

static inline void flash_check_rope(const float* rope) {
    if ((uintptr_t)rope % 16 != 0)
        check_fail("flash attention: the RoPE table must be 16-byte aligned", "carve it at a multiple of 16 bytes");
}

// out (B, T, C) bf16 and lse (B, NH, T) fp32 from qkv (B, T, C + 2·NKV·C/NH) bf16 (GPT-2: NKV = NH,
// qkv (B, T, 3C)). rope: RoPE's (>= T, hs/2, 2) cos/sin table from rope_table_fill, or NULL; with it,
// q and k are rotated in place (qkv afterwards holds them rotated, for the backward); without it qkv is
// only read.
static inline void flash_attention_forward(bf16* out, float* lse, bf16* qkv, const float* rope, int B, int T, int C,
                                           int NH, int NKV, cudaStream_t stream) {
    FlashFwdArgs a = {out, lse, qkv, rope, B, T, NH, NKV};
    int hs = flash_attention_head_size(T, C, NH, NKV);
    flash_check_rope(rope);
    if (rope) rope_keys_forward(qkv, rope, B, T, NH, NKV, hs, stream);
    if (hs == 64) rope ? flash_forward_launch<64, true>(a, stream) : flash_forward_launch<64, false>(a, stream);
    else rope ? flash_forward_launch<128, true>(a, stream) : flash_forward_launch<128, false>(a, stream);
}
