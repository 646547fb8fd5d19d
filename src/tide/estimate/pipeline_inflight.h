#pragma once
// How many micro-batches' activations a pipeline stage holds at its peak, by schedule.
// A micro-batch is "in flight" on a stage from its forward until its backward frees the
// activations. Stage indices are 0 (first, embedding) .. p-1 (last, LM head); m is the number
// of micro-batches per step.
//
//   gpipe        all m forwards run before any backward:            m
//   1f1b         warm-up of p - stage forwards, then one-forward-one-backward:  min(p - stage, m)
//   zb-h1        same peak as 1f1b (Qi et al. Table 2: p M_B):      min(p - stage, m)
//   zb-h2        fills the warm-up bubble with extra forwards; peak (2p-1) M_B on the first
//                stage (Qi et al.), 2(p - stage) - 1 in general:    min(2(p - stage) - 1, m)
//   interleaved  Megatron-LM: stage holds v model chunks of L/(pv) layers; its warm-up runs
//                2(p - stage - 1) + (v - 1) p chunk-forwards, plus one in steady state, so the
//                first stage holds L (1 + (p-1)/(pv)) layers' activations (Korthikanti et al.
//                section 4.2.3).
// With one stage (p = 1) every schedule holds one micro-batch: gradient accumulation runs the
// micro-batches one after another.
//
// This module counts these numbers itself rather than asking the pipeline module, so that the
// estimate has no dependency on the schedule generators; tests of the pipeline can check their
// simulated peaks against these.

#include <cstdint>

#include "tide/estimate/train_setup.h"

namespace tide {

// Layer-micro-batches (one layer's activations for one micro-batch) that stage `stage` holds at
// its peak; layers_per_stage = L / p.
int64_t inflight_layer_microbatches(Schedule schedule, int p, int stage, int m, int v,
                                    int layers_per_stage);

// Micro-batches in flight on the stage (for the interleaved schedule: model-chunk micro-batches
// divided by v, rounded up). Used for the input and output layers' activations.
int inflight_microbatches(Schedule schedule, int p, int stage, int m, int v);

}  // namespace tide
