// Timelines of a simulated schedule (see timeline.h).
#include "tide/pipeline/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tide/core/trace.h"

namespace tide::pipeline {

namespace {

char op_letter(const Action& a) {
  const char c = op_name(a.op)[0];
  return a.chunk == 1 ? static_cast<char>(c - 'A' + 'a') : c;
}

// Fill colour per op; chunk 1 (the second model chunk) is drawn lighter.
const char* op_colour(const Action& a) {
  const bool light = a.chunk % 2 == 1;
  switch (a.op) {
    case Op::F:
      return light ? "#a0c4e8" : "#4e79a7";
    case Op::B:
      return light ? "#ffc58f" : "#f28e2b";
    case Op::W:
      return light ? "#a8d89c" : "#59a14f";
    default:
      return "#bab0ac";
  }
}

}  // namespace

std::string ascii_timeline(const Schedule& s, const SimResult& r, int width) {
  if (width <= 0) {
    double shortest = r.makespan;
    for (const auto& row : r.timeline)
      for (const TimedAction& t : row) shortest = std::min(shortest, t.end - t.start);
    const double cells = shortest > 0 ? 4.0 * r.makespan / shortest : 80.0;
    width = static_cast<int>(std::min(240.0, std::ceil(cells - 1e-9)));
  }
  width = std::max(width, 10);
  const double scale = r.makespan > 0 ? width / r.makespan : 1.0;  // characters per time unit
  std::string out = fmt::format("{} (p = {}, m = {}): one character = {:.3g} time units\n", s.name,
                                s.stages, s.microbatches, 1.0 / scale);
  for (int st = 0; st < s.stages; ++st) {
    std::string row(width, '.');
    for (const TimedAction& t : r.timeline[st]) {
      // Box [start, end) in cells; every op gets at least one cell.
      const int a = std::min(width - 1, static_cast<int>(std::lround(t.start * scale)));
      const int b = std::max(a + 1, std::min(width, static_cast<int>(std::lround(t.end * scale))));
      std::string label = fmt::format("{}{}", op_letter(t.action), t.action.mb);
      if (static_cast<int>(label.size()) > b - a) label.resize(b - a);
      for (int x = a; x < b; ++x) row[x] = ' ';
      std::copy(label.begin(), label.end(), row.begin() + a);
    }
    out += fmt::format("stage {:>2} |{}|\n", st, row);
  }
  return out;
}

std::string svg_timeline(const Schedule& s, const SimResult& r) {
  const double px = 900.0 / std::max(r.makespan, 1e-9);  // pixels per time unit
  const int row_h = 28, left = 70, top = 30;
  const int w = left + 900 + 20, h = top + row_h * s.stages + 40;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"monospace\" font-size=\"11\">\n"
      "<text x=\"{}\" y=\"18\">{} (p = {}, m = {}), makespan {:.4g}, bubble rate {:.2f}%</text>\n",
      w, h, left, s.name, s.stages, s.microbatches, r.makespan, 100 * r.bubble_rate);
  for (int st = 0; st < s.stages; ++st) {
    const int y = top + st * row_h;
    out += fmt::format("<text x=\"4\" y=\"{}\">stage {}</text>\n", y + row_h / 2 + 4, st);
    for (const TimedAction& t : r.timeline[st]) {
      const double x = left + t.start * px, bw = (t.end - t.start) * px;
      out += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" "
          "stroke=\"#333\" stroke-width=\"0.5\"><title>{} start {:.4g} end {:.4g}</title></rect>\n",
          x, y + 2, bw, row_h - 4, op_colour(t.action), to_string(t.action), t.start, t.end);
      out += fmt::format("<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                         x + bw / 2, y + row_h / 2 + 4, t.action.mb);
    }
  }
  const int axis_y = top + row_h * s.stages + 14;
  out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", left,
                     axis_y - 10, left + 900, axis_y - 10);
  out += fmt::format("<text x=\"{}\" y=\"{}\">0</text>\n", left, axis_y + 4);
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.4g}</text>\n", left + 900,
                     axis_y + 4, r.makespan);
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\">F blue, B orange, W green (chunk 1 lighter); numbers are "
      "micro-batches</text>\n</svg>\n",
      left + 150, axis_y + 4);
  return out;
}

std::string chrome_trace(const Schedule& s, const SimResult& r) {
  // The same writer as the traces of real steps (core/trace.h), so both open the same way.
  std::vector<LaneName> lanes;
  std::vector<TraceEvent> events;
  for (int st = 0; st < s.stages; ++st) lanes.push_back({0, st, fmt::format("stage {}", st)});
  for (int st = 0; st < s.stages; ++st)
    for (const TimedAction& t : r.timeline[st])
      events.push_back({fmt::format("{}{}", op_letter(t.action), t.action.mb),
                        op_name(t.action.op),
                        0,
                        st,
                        t.start * 1000.0,
                        (t.end - t.start) * 1000.0,
                        {{"microbatch", t.action.mb}, {"chunk", t.action.chunk}}});
  return chrome_trace_json(events, lanes);
}

std::string summary_table(const Schedule& s, const SimResult& r) {
  std::string out = fmt::format(
      "schedule {}: makespan {:.4g}, bubble {:.4g} ({:.2f}% of the longest stage span), "
      "peak activation memory {:.4g}\n",
      s.name, r.makespan, r.bubble, 100 * r.bubble_rate, r.peak_memory);
  out += "stage     start       end      busy    bubble   rate%   peak mem\n";
  for (int st = 0; st < s.stages; ++st) {
    const StageStats& x = r.stages[st];
    out += fmt::format("{:>5} {:>9.4g} {:>9.4g} {:>9.4g} {:>9.4g} {:>7.2f} {:>10.4g}\n", st,
                       x.start, x.end, x.busy, x.bubble, 100 * x.bubble_rate, x.peak_memory);
  }
  return out;
}

}  // namespace tide::pipeline
