#pragma once
// How many micro-batches' activations a pipeline stage holds at its peak, by schedule.
// A micro-batch is "in flight" on a stage from its forward until its weight-gradient pass W
// frees the activations (tide's W needs what B kept; m_b = m_w = 1 in the simulator's terms). Stage
// indices are 0 (first, embedding) .. p-1 (last, LM head); m is the number of micro-batches per
// step.
//
//   gpipe        all m forwards run before any backward:            m
//   1f1b         warm-up of p - stage forwards, then one-forward-one-backward:  min(p - stage, m)
//   zb-h1        1F1B's order with stage i deferring i W: a micro-batch stays until its W, so
//                every stage holds the first stage's p M_B (Qi et al. Table 2):  min(p, m)
//   zb-h2        fills the warm-up bubble with extra forwards; peak (2p-1) M_B (Qi et al.),
//                on every stage for the same reason:                min(2p - 1, m)
//   interleaved  Megatron-LM: stage holds v model chunks of L/(pv) layers; its warm-up runs
//                2(p - stage - 1) + (v - 1) p chunk-forwards, plus one in steady state, so the
//                first stage holds L (1 + (p-1)/(pv)) layers' activations (Korthikanti et al.
//                section 4.2.3).
//   zb-1p        the zero-bubble heuristic under 1F1B's peak:       at most min(p, m)
//   zb-2p        the same under twice that:                         at most min(2p, m)
//   zb-auto      the same under pipeline.memory_limit (0: p), built from the times tide train
//                measures, so only the limit is known:               at most min(limit, m)
//   zb-v         two chunks of L/(2p) layers per stage, stage i running virtual stages i and
//                2p-1-i; counted in chunk-micro-batches (half a stage's M_B each):
//                min(2p, 2m, m + stage + 1), i.e. p M_B once m >= 2p - 1 - stage, less on the
//                early stages at m = p (the simulator's peaks with m_w = 1, tests check them).
//                The embedding and the head are both on stage 0: the first chunk holds the
//                input layer of min(m, 2p) micro-batches, the last chunk runs F, B and W of a
//                micro-batch back to back, so the output layer holds one.
// tide counts a micro-batch from its F until its W (m_b = m_w = 1 in the cost model,
// exec/pipeline_measure.cpp): B keeps what W needs.
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
                                    int layers_per_stage, double memory_limit = 0);

// Micro-batches in flight on the stage (for the interleaved schedule: model-chunk micro-batches
// divided by v, rounded up). Used for the input and output layers' activations.
// memory_limit: zb-auto's pipeline.memory_limit (0 = p).
int inflight_microbatches(Schedule schedule, int p, int stage, int m, int v,
                          double memory_limit = 0);

// Whether the stage's count is an upper bound (zb-auto, zb-1p, zb-2p) rather than the
// schedule's exact peak.
bool inflight_is_bound(Schedule schedule, int p);

// The stages that hold the input layer (embedding) and the output layer (final norm, head) and
// how many micro-batches' activations of each they keep at the peak.
int input_layer_stage(Schedule schedule, int p);
int output_layer_stage(Schedule schedule, int p);
int input_layer_microbatches(Schedule schedule, int p, int m, int v, double memory_limit = 0);
int output_layer_microbatches(Schedule schedule, int p, int m, int v, double memory_limit = 0);

}  // namespace tide
