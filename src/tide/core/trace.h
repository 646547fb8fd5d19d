#pragma once
// Tracing real execution as Chrome-trace events (chrome://tracing, https://ui.perfetto.dev).
//
// Why a Tracer object and not a global: whoever runs work (the engine today, the pipeline
// executor later) is handed a `Tracer*` explicitly, through the execution context it already
// passes around (MicroBatch::tracer for block parts, ChunkStore::set_tracer for chunk moves and
// the placement policies' communication). nullptr means "not traced", and every hook is then a
// pointer test and nothing else, so untraced steps cost nothing and traced steps compute
// exactly the same bits (tracing only reads a clock).
//
// Events are complete ("X") events: a name, a category, a lane (Chrome's tid) and a
// [start, start + duration) interval in microseconds. Lane 0 is the thread that runs the step;
// spans on it nest (step > block part > chunk fetch). Asynchronous work that overlaps lane 0
// (a collective in flight) gets a lane of its own from take_lane() for as long as it runs, so
// spans on one lane never overlap. Times are the steady clock (CLOCK_MONOTONIC on Linux), which
// all processes on one machine share, so the traces of several ranks line up.
//
// The JSON writing is chrome_trace_json(), the one writer for real traces and for the pipeline
// simulator's (pipeline/timeline.h).

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tide {

struct TraceArg {
  const char* key;  // a string literal
  int64_t value;
};

struct TraceEvent {
  std::string name;
  std::string cat;  // category: "step", "compute", "optimizer", "comm", "memory", ...
  int pid = 0;      // the process: a rank (real traces) or 0 (simulated schedules)
  int tid = 0;      // the lane within it
  double ts_us = 0, dur_us = 0;
  std::vector<std::pair<std::string, int64_t>> args;  // shown when the event is selected
};

// A lane (Chrome's thread) or a process, by name: metadata events.
struct LaneName {
  int pid = 0, tid = 0;
  std::string name;
};
// One part of a trace file: thread_name metadata for `lane_names`, process_name metadata for
// `process_names`, then the events, as comma-separated JSON objects (names JSON-escaped).
std::string chrome_trace_events_json(std::span<const TraceEvent> events,
                                     std::span<const LaneName> lane_names = {},
                                     std::span<const LaneName> process_names = {});
// The trace file {"traceEvents": [...], "displayTimeUnit": "ms"} of `parts` (each from
// chrome_trace_events_json, e.g. one per rank; empty parts are skipped).
std::string chrome_trace_file(std::span<const std::string> parts);
// Both in one: the file of one part.
std::string chrome_trace_json(std::span<const TraceEvent> events,
                              std::span<const LaneName> lane_names = {},
                              std::span<const LaneName> process_names = {});

class Tracer {
 public:
  // `pid`: the rank the events belong to.
  explicit Tracer(int pid = 0) : pid_(pid) {}

  int pid() const { return pid_; }
  // Microseconds on the steady clock.
  static double now_us();

  // Records one complete event on lane `tid`.
  void add(std::string_view name, std::string_view cat, int tid, double ts_us, double dur_us,
           std::span<const TraceArg> args);
  void add(std::string_view name, std::string_view cat, int tid, double ts_us, double dur_us,
           std::initializer_list<TraceArg> args = {}) {
    add(name, cat, tid, ts_us, dur_us, std::span<const TraceArg>(args.begin(), args.size()));
  }
  // A lane for asynchronous work: the lowest lane >= 1 not held by another; give it back when
  // the work is done. Lanes are named "<label> <n>" in the trace.
  int take_lane(std::string_view label);
  void give_lane(int tid);

  const std::vector<TraceEvent>& events() const { return events_; }
  // "main" for lane 0, then the async lanes that were used.
  std::vector<LaneName> lane_names() const;
  void clear() { events_.clear(); }

 private:
  int pid_;
  std::vector<TraceEvent> events_;
  std::vector<bool> lane_busy_;          // [tid - 1]
  std::vector<std::string> lane_label_;  // [tid - 1]
};

// A span on lane 0 (or `tid`) from construction to destruction; nothing at all when `t` is
// nullptr. The arguments are copied only when tracing.
class TraceSpan {
 public:
  TraceSpan(Tracer* t, const char* name, const char* cat, std::initializer_list<TraceArg> args = {},
            int tid = 0);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer* t_;
  const char* name_;
  const char* cat_;
  int tid_;
  double start_ = 0;
  TraceArg args_[3] = {};
  int nargs_ = 0;
};

// An asynchronous operation (a collective in flight): start() when it is issued, finish() when
// the caller has seen it complete (after its wait). The span is drawn on a lane of its own,
// from issue to the moment the rank knew it was done (an upper bound on its real duration).
// Default-constructed or started with a null tracer, it records nothing.
class AsyncTrace {
 public:
  AsyncTrace() = default;
  static AsyncTrace start(Tracer* t, const char* name, std::initializer_list<TraceArg> args = {});
  void finish();

 private:
  Tracer* t_ = nullptr;
  const char* name_ = nullptr;
  int tid_ = 0;
  double start_ = 0;
  TraceArg args_[3] = {};
  int nargs_ = 0;
};

}  // namespace tide
