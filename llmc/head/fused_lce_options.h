// fused_lce_options.h: the options of the LM-head loss, shared by the CUDA head (llmc/head/fused_lce.cuh)
// and its plain-C reference (dev/ref/fused_lce_ref.h). The semantics are written in fused_lce.cuh.
#pragma once

typedef struct {
    int ignore_index;       // rows with this target have no loss and no gradient
    float z_loss;           // weight of lse² added to each row's loss (0 = off)
    float softcap;          // logits soft-capped as softcap·tanh(z/softcap) (0 = off)
    float label_smoothing;  // ε: target distribution (1−ε)·onehot + ε/V (0 = off)
} FusedLceOptions;

#define FUSED_LCE_IGNORE_INDEX (-1)  // the trainer's convention, as in llm.c

static inline FusedLceOptions fused_lce_options_default(void) {
    FusedLceOptions o;
    o.ignore_index = FUSED_LCE_IGNORE_INDEX;
    o.z_loss = 0.0f;
    o.softcap = 0.0f;
    o.label_smoothing = 0.0f;
    return o;
}
