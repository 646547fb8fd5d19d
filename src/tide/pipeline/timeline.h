#pragma once
// Drawing a simulated schedule: ASCII for the terminal, SVG for documents, Chrome-trace JSON
// for Perfetto / chrome://tracing. All three take the SimResult of simulate().

#include <string>

#include "tide/pipeline/schedule.h"
#include "tide/pipeline/simulator.h"

namespace tide::pipeline {

// One line per stage; each box starts with the op letter and its micro-batch number ("F3",
// "B3", "W3"; lower-case for chunk 1 of two), cut to the box's width; '.' is idle time.
// `width` = characters for the whole makespan; 0 = four characters for the shortest pass, at
// most 240 in all (longer schedules then cut their labels short).
std::string ascii_timeline(const Schedule& s, const SimResult& r, int width = 0);

// One row per stage, F/B/W boxes in blue/orange/green (chunk 1 in a lighter shade) with the
// micro-batch number inside, and a time axis.
std::string svg_timeline(const Schedule& s, const SimResult& r);

// {"traceEvents": [...]} with one complete ("X") event per compute action: pid 0, tid = stage,
// ts/dur in microseconds taking one cost-model time unit as one millisecond; thread names
// "stage N" as metadata events. Written by core/trace.h's chrome_trace_json, the writer of the
// traces of real steps too.
std::string chrome_trace(const Schedule& s, const SimResult& r);

// A short table: makespan, then per stage span, busy, bubble, bubble rate and peak memory.
std::string summary_table(const Schedule& s, const SimResult& r);

}  // namespace tide::pipeline
