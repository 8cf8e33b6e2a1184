// gpu_peak.h: a GPU's peak dense bf16 tensor FLOP/s, the denominator of the trainer's MFU: the
// datasheet's figure for GPUs known by name, else SMs x clock x FLOP per clock per SM for the
// architectures where that is known (A100-class 8.0: 2048, Hopper 9.0: 4096), else 0 (no MFU shown).
// The clock estimate runs at the maximum clock the driver reports, above the datasheets' (1070 against
// 989 TFLOP/s on an H200), so the datasheet wins where a name matches. Plain C: dev/test/core/test_gpu_peak.c
// checks it without a GPU; under nvcc, gpu_peak_bf16_flops asks the device for its name and clock.
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

// MFU in percent: tokens/s of all `world` GPUs times the model's FLOPs per token, over their peak
static inline double mfu_percent(double tokens_per_s, double flops_per_token, double peak, int world) {
    return 100.0 * tokens_per_s * flops_per_token / (peak * world);
}

#ifdef __CUDACC__
#include "check.h"
// Peak dense bf16 tensor FLOP/s of the device: the datasheet's figure for GPUs known by name, else the
// clock-based estimate; 0 when unknown. *source says which.
static inline double gpu_peak_bf16_flops(int device, const char** source) {
    cudaDeviceProp prop;
    cuda_check(cudaGetDeviceProperties(&prop, device));
    double tflops = gpu_peak_tflops_by_name(prop.name);
    if (tflops > 0.0) {
        *source = "datasheet";
        return tflops * 1e12;
    }
    int khz = 0;
    cuda_check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    *source = "SMs x clock x FLOP/clock";
    return gpu_peak_flops_by_clock(prop.major, prop.minor, prop.multiProcessorCount, khz);
}
#endif
