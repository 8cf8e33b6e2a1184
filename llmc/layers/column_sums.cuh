// column_sums.cuh: column sums of row-major (rows, W) tensors into fp32 vectors, deterministic (no
// atomics): blocks write partial sums of their rows to scratch, then one kernel adds the partial rows
// in a fixed order.
//   column_sums_finish  the second half alone, for kernels that write their own partial rows (the
//                       norms' backward: dw, db and more side by side; the Hopper attention backward:
//                       the qkv bias gradient in its epilogues)
//   column_sums_bf16    out (W,) += Σ_n x[n, :] of a bf16 (N, W) tensor: COLUMN_SUMS_CHUNKS partial
//                       rows, then the finish (a linear layer's bias gradient, llmc/layers/linear.cuh)
// Napkin math: column_sums_bf16 reads x once (2·N·W bytes in 16-byte loads): ~0.1 ms for 65536 x 3072 at
// ~4 TB/s; the finish reads rows · W floats.
#pragma once
#include "../core/cuda_common.cuh"

#define COLUMN_SUMS_CHUNKS 128  // column_sums_bf16's partial rows: scratch (COLUMN_SUMS_CHUNKS, W) fp32

// --- kernels ---------------------------------------------------------------------------------

typedef struct { float* out[3]; } ColumnSumsOut;

// partial (rows, n·C) fp32: n sums of C columns side by side, added in row order into out[s][c] for
// s < n (3 at most; NULL where a caller wants none). Block (32, 16) per 32 of the n·C columns: thread
// (x, y) adds rows y, y + 16, ... in order, then thread (x, 0) adds the 16 in order (many loads in
// flight, a fixed order).
__global__ void __launch_bounds__(512)
column_sums_finish_kernel(ColumnSumsOut to, const float* partial, int rows, int C, int n) {
    __shared__ float part[16][33];
    int i = blockIdx.x * 32 + threadIdx.x, width = n * C;
    float acc = 0.0f;
    if (i < width)
        for (int k = threadIdx.y; k < rows; k += 16) acc += partial[(size_t)k * width + i];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || i >= width) return;
    float sum = 0.0f;
    for (int y = 0; y < 16; y++) sum += part[y][threadIdx.x];
    float* out = to.out[i / C];
    if (out) out[i % C] += sum;
}

// Grid (ceil(W/256), COLUMN_SUMS_CHUNKS), block 256 (8 warps): partial[chunk, o] = Σ x[n, o] over the
// chunk's rows. Lane l of every warp holds the 8 adjacent columns o0 + 8·l (one 16-byte load per row);
// warp w takes rows w, w + 8, ... of the chunk; the 8 warps are added in a fixed order.
__global__ void column_sums_bf16_kernel(float* partial, const bf16* x, int N, int W) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, chunk = blockIdx.y;
    int o = blockIdx.x * 256 + lane * 8;
    int rows = (N + COLUMN_SUMS_CHUNKS - 1) / COLUMN_SUMS_CHUNKS;
    int r0 = chunk * rows, r1 = min(N, r0 + rows);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (o < W)
        for (int r = r0 + warp; r < r1; r += 8) {
            Bf16x8 d = load128(x + (size_t)r * W + o);
            for (int e = 0; e < 8; e++) acc[e] += bf16x8_get(d, e);
        }
    __shared__ float s[8][256];
    for (int e = 0; e < 8; e++) s[warp][lane * 8 + e] = acc[e];
    __syncthreads();
    int c = threadIdx.x, oc = blockIdx.x * 256 + c;
    if (oc < W) {
        float sum = 0.0f;
        for (int k = 0; k < 8; k++) sum += s[k][c];
        partial[(size_t)chunk * W + oc] = sum;
    }
}

// --- launchers -------------------------------------------------------------------------------

static inline void column_sums_finish(ColumnSumsOut to, const float* partial, int rows, int C, int n,
                                      cudaStream_t stream) {
    column_sums_finish_kernel<<<ceil_div(n * C, 32), dim3(32, 16), 0, stream>>>(to, partial, rows, C, n);
    cuda_check_launch();
}

// out (W,) fp32 += Σ_n x[n, :], x (N, W) bf16 with W % 8 == 0; scratch (COLUMN_SUMS_CHUNKS · W) fp32.
static inline void column_sums_bf16(float* out, const bf16* x, int N, int W, float* scratch, cudaStream_t stream) {
    if (W % 8 != 0) check_fail("column_sums_bf16: the width must be a multiple of 8", "pad the tensor's rows");
    column_sums_bf16_kernel<<<dim3(ceil_div(W, 256), COLUMN_SUMS_CHUNKS), 256, 0, stream>>>(scratch, x, N, W);
    cuda_check_launch();
    ColumnSumsOut to = {{out, NULL, NULL}};
    column_sums_finish(to, scratch, COLUMN_SUMS_CHUNKS, W, 1, stream);
}
