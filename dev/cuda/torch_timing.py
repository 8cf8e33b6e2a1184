"""The timing both PyTorch comparison scripts use: median of `reps` CUDA-event timings after two warm-ups."""
import torch


def time_ms(fn, reps):
    fn(); fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]
