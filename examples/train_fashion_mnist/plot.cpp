#include "plot.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <kiln/runtime/error.hpp>

namespace fmnist {
namespace {

constexpr double kPanelW = 420, kPanelH = 300, kMarginL = 60, kMarginB = 45, kMarginT = 62;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about 5 ticks.
double tick_step(double span) {
  const double raw = span / 5;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// One panel at horizontal offset x0: axes, ticks, the series as a polyline with
// a marker per epoch.
// The y range stays inside [floor, ceiling] (accuracy: 0-100%); a flat
// series (one epoch) gets a margin of 5% of its value around it.
void panel(std::ostream& svg, double x0, const std::string& title, const std::string& color,
           const std::vector<double>& ys, double floor_value = -HUGE_VAL,
           double ceiling = HUGE_VAL) {
  const double left = x0 + kMarginL, right = x0 + kPanelW - 25;
  const double top = kMarginT, bottom = kPanelH - kMarginB;
  double lo = *std::min_element(ys.begin(), ys.end());
  double hi = *std::max_element(ys.begin(), ys.end());
  if (hi - lo < 1e-9) {
    lo -= 0.05 * std::max(std::abs(lo), 1e-3);
    hi += 0.05 * std::max(std::abs(hi), 1e-3);
  }
  const double step = tick_step(hi - lo);
  lo = std::max(std::floor(lo / step) * step, floor_value);
  hi = std::min(std::ceil(hi / step) * step, ceiling);
  const std::size_t n = ys.size();
  auto px = [&](std::size_t i) {
    return n == 1 ? (left + right) / 2 : left + (right - left) * double(i) / double(n - 1);
  };
  auto py = [&](double y) { return bottom - (bottom - top) * (y - lo) / (hi - lo); };

  svg << "<text x='" << (left + right) / 2 << "' y='" << top - 14
      << "' text-anchor='middle' font-size='14'>" << escape(title) << "</text>\n";
  svg << "<rect x='" << left << "' y='" << top << "' width='" << right - left << "' height='"
      << bottom - top << "' fill='none' stroke='#888'/>\n";
  for (double t = lo; t <= hi + step / 2; t += step) {
    svg << "<line x1='" << left << "' x2='" << right << "' y1='" << py(t) << "' y2='" << py(t)
        << "' stroke='#eee'/>\n<text x='" << left - 6 << "' y='" << py(t) + 4
        << "' text-anchor='end' font-size='11'>" << std::defaultfloat << std::setprecision(4) << t
        << std::fixed << std::setprecision(1) << "</text>\n";
  }
  const std::size_t every = std::max<std::size_t>(1, n / 10);
  for (std::size_t i = 0; i < n; i += every) {
    svg << "<text x='" << px(i) << "' y='" << bottom + 16
        << "' text-anchor='middle' font-size='11'>" << i + 1 << "</text>\n";
  }
  svg << "<text x='" << (left + right) / 2 << "' y='" << bottom + 34
      << "' text-anchor='middle' font-size='12'>epoch</text>\n";
  svg << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
  for (std::size_t i = 0; i < n; ++i) svg << px(i) << "," << py(ys[i]) << " ";
  svg << "'/>\n";
  for (std::size_t i = 0; i < n; ++i) {
    svg << "<circle cx='" << px(i) << "' cy='" << py(ys[i]) << "' r='3' fill='" << color
        << "'/>\n";
  }
}

}  // namespace

void write_plot_svg(const std::filesystem::path& path, const std::string& title,
                    const std::vector<double>& train_loss,
                    const std::vector<double>& test_accuracy) {
  if (train_loss.empty() || train_loss.size() != test_accuracy.size()) {
    throw kiln::ValueError("[plot] need one loss and one accuracy per epoch");
  }
  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << 2 * kPanelW << "' height='"
      << kPanelH + 20 << "' font-family='sans-serif'>\n<rect width='100%' height='100%' "
      << "fill='white'/>\n<text x='" << kPanelW << "' y='22' text-anchor='middle' "
      << "font-size='15' font-weight='bold'>" << escape(title) << "</text>\n";
  std::vector<double> acc_percent;
  for (double a : test_accuracy) acc_percent.push_back(100 * a);
  panel(svg, 0, "training loss", "#1f77b4", train_loss);
  panel(svg, kPanelW, "test accuracy (%)", "#d62728", acc_percent, 0.0, 100.0);
  svg << "</svg>\n";

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << svg.str();
    if (!f.flush()) {
      throw kiln::ValueError("[plot] cannot write " + tmp.string());
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw kiln::ValueError("[plot] cannot write " + path.string() + ": " + ec.message());
}

}  // namespace fmnist
