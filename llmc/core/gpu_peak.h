// gpu_peak.h: a GPU's peak dense bf16 tensor FLOP/s, the denominator of the trainer's MFU: the
// datasheet's figure for GPUs known by name, else SMs x clock x FLOP per clock per SM for the
// architectures where that is known (A100-class 8.0: 2048, Hopper 9.0: 4096), else 0 (no MFU shown).
// The clock estimate runs at the maximum clock the driver reports, above the datasheets' (1070 against
// 989 TFLOP/s on an H200), so the datasheet wins where a name matches. Plain C: dev/test/test_gpu_peak.c
// checks it without a GPU.
#pragma once
#include <string.h>

typedef struct { const char* name; double tflops; } GpuPeak;

// dense bf16, without sparsity; the first entry whose name is inside the GPU's name wins, so the
// variants come before the plain "H100"
static const GpuPeak GPU_PEAKS[] = {
    {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.4}, {"H200", 989.4}, {"A100", 312.0},
};

// TFLOP/s of the datasheet for a GPU named `name` (cudaDeviceProp.name), or 0 when none matches
static inline double gpu_peak_tflops_by_name(const char* name) {
    for (size_t i = 0; i < sizeof(GPU_PEAKS) / sizeof(GPU_PEAKS[0]); i++)
        if (strstr(name, GPU_PEAKS[i].name)) return GPU_PEAKS[i].tflops;
    return 0.0;
}

// FLOP/s from compute capability major.minor, the SM count and the clock in kHz, or 0 for an
// architecture whose FLOP per clock per SM is not known here
static inline double gpu_peak_flops_by_clock(int major, int minor, int sms, int khz) {
    double per_clock = (major == 8 && minor == 0) ? 2048.0 : (major == 9 && minor == 0) ? 4096.0 : 0.0;
    return per_clock * sms * (double)khz * 1e3;
}
