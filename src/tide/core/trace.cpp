// Tracer and the Chrome-trace JSON writer (see trace.h).
#include "tide/core/trace.h"

#include <fmt/format.h>

#include <chrono>

#include "tide/core/error.h"

namespace tide {

namespace {

// A JSON string literal (quotes included).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string event_json(const TraceEvent& e) {
  std::string args;
  for (const auto& [k, v] : e.args)
    args += fmt::format("{}{}: {}", args.empty() ? "" : ", ", json_string(k), v);
  return fmt::format(
      "{{\"name\": {}, \"cat\": {}, \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, "
      "\"dur\": {:.3f}, \"args\": {{{}}}}}",
      json_string(e.name), json_string(e.cat), e.pid, e.tid, e.ts_us, e.dur_us, args);
}

std::string metadata_json(const char* what, const LaneName& n) {
  return fmt::format(
      "{{\"name\": \"{}\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": {{\"name\": {}}}}}",
      what, n.pid, n.tid, json_string(n.name));
}

}  // namespace

std::string chrome_trace_events_json(std::span<const TraceEvent> events,
                                     std::span<const LaneName> lane_names,
                                     std::span<const LaneName> process_names) {
  std::string out;
  auto add = [&](const std::string& e) { out += (out.empty() ? "  " : ",\n  ") + e; };
  for (const LaneName& n : process_names) add(metadata_json("process_name", n));
  for (const LaneName& n : lane_names) add(metadata_json("thread_name", n));
  for (const TraceEvent& e : events) add(event_json(e));
  return out;
}

std::string chrome_trace_file(std::span<const std::string> parts) {
  std::string body;
  for (const std::string& p : parts)
    if (!p.empty()) body += (body.empty() ? "" : ",\n") + p;
  return "{\"traceEvents\": [\n" + body + "\n], \"displayTimeUnit\": \"ms\"}\n";
}

std::string chrome_trace_json(std::span<const TraceEvent> events,
                              std::span<const LaneName> lane_names,
                              std::span<const LaneName> process_names) {
  const std::string part = chrome_trace_events_json(events, lane_names, process_names);
  return chrome_trace_file(std::span<const std::string>(&part, 1));
}

double Tracer::now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Tracer::add(std::string_view name, std::string_view cat, int tid, double ts_us, double dur_us,
                 std::span<const TraceArg> args) {
  TraceEvent e{std::string(name), std::string(cat), pid_, tid, ts_us, dur_us, {}};
  for (const TraceArg& a : args) e.args.emplace_back(a.key, a.value);
  events_.push_back(std::move(e));
}

int Tracer::take_lane(std::string_view label) {
  for (size_t i = 0; i < lane_busy_.size(); ++i)
    if (!lane_busy_[i] && lane_label_[i] == label) {
      lane_busy_[i] = true;
      return static_cast<int>(i) + 1;
    }
  lane_busy_.push_back(true);
  lane_label_.emplace_back(label);
  return static_cast<int>(lane_busy_.size());
}

void Tracer::give_lane(int tid) {
  TIDE_ASSERT(tid >= 1 && tid <= static_cast<int>(lane_busy_.size()) && lane_busy_[tid - 1]);
  lane_busy_[tid - 1] = false;
}

std::vector<LaneName> Tracer::lane_names() const {
  std::vector<LaneName> names = {{pid_, 0, "main"}};
  // Lanes of one label are numbered from 0 in the order they were first used.
  for (size_t i = 0; i < lane_label_.size(); ++i) {
    int n = 0;
    for (size_t j = 0; j < i; ++j) n += lane_label_[j] == lane_label_[i];
    names.push_back({pid_, static_cast<int>(i) + 1, fmt::format("{} {}", lane_label_[i], n)});
  }
  return names;
}

namespace {
int copy_args(std::initializer_list<TraceArg> args, TraceArg (&to)[3]) {
  TIDE_ASSERT(args.size() <= 3);
  int n = 0;
  for (const TraceArg& a : args) to[n++] = a;
  return n;
}
}  // namespace

TraceSpan::TraceSpan(Tracer* t, const char* name, const char* cat,
                     std::initializer_list<TraceArg> args, int tid)
    : t_(t), name_(name), cat_(cat), tid_(tid) {
  if (!t_) return;
  nargs_ = copy_args(args, args_);
  start_ = Tracer::now_us();
}

TraceSpan::~TraceSpan() {
  if (!t_) return;
  const double end = Tracer::now_us();
  t_->add(name_, cat_, tid_, start_, end - start_, std::span<const TraceArg>(args_, nargs_));
}

AsyncTrace AsyncTrace::start(Tracer* t, const char* name, std::initializer_list<TraceArg> args) {
  AsyncTrace a;
  if (!t) return a;
  a.t_ = t;
  a.name_ = name;
  a.nargs_ = copy_args(args, a.args_);
  a.tid_ = t->take_lane("comm");
  a.start_ = Tracer::now_us();
  return a;
}

void AsyncTrace::finish() {
  if (!t_) return;
  const double end = Tracer::now_us();
  t_->add(name_, "comm", tid_, start_, end - start_, std::span<const TraceArg>(args_, nargs_));
  t_->give_lane(tid_);
  t_ = nullptr;
}

}  // namespace tide
