// Progress lines and bars (progress.h).
#include "policyc/support/progress.h"

#include <unistd.h>

#include "policyc/support/escape.h"

namespace policyc::support {

Progress::Progress(std::string label, int total, bool on, std::FILE* out)
    : label_(std::move(label)), total_(total < 0 ? 0 : total), on_(on), tty_(on && isatty(fileno(out)) != 0), out_(out) {}

void Progress::draw() {
  constexpr int kWidth = 24;
  constexpr size_t kWhat = 48;  // a redrawn line must not wrap, or \r cannot take it back
  std::string what = escape::message(what_);
  if (what.size() > kWhat) what = what.substr(0, kWhat - 3) + "...";
  std::string line = "\r" + label_ + " ";
  if (total_ > 0) {
    const int filled = done_ >= total_ ? kWidth : kWidth * done_ / total_;
    line += "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '.') + "] ";
    line += std::to_string(done_) + "/" + std::to_string(total_);
  } else {
    line += "[" + std::to_string(done_) + "]";
  }
  line += " " + what + std::string(kWhat - what.size(), ' ');
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
  drawn_ = true;
}

void Progress::step(std::string_view what) {
  ++done_;
  if (!on_) return;
  what_ = what;
  if (tty_) {
    draw();
    return;
  }
  std::string n = total_ > 0 ? std::to_string(done_) + "/" + std::to_string(total_) : std::to_string(done_);
  std::fprintf(out_, "%s %s: %s\n", label_.c_str(), n.c_str(), escape::message(what).c_str());
  std::fflush(out_);
}

void Progress::note(std::string_view line) {
  if (!on_) return;
  const bool redraw = drawn_;
  clear();
  std::fprintf(out_, "%s\n", escape::message(line).c_str());
  if (redraw) draw();
  std::fflush(out_);
}

void Progress::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
  drawn_ = false;
}

void Progress::finish() {
  if (!drawn_) return;
  std::fputs("\n", out_);
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace policyc::support
