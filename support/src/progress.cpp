// Progress lines and bars (progress.h).
#include "policyc/support/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include "policyc/support/escape.h"

namespace policyc::support {

Progress::Progress(std::string label, int total, bool on, std::FILE* out)
    : label_(std::move(label)), total_(total < 0 ? 0 : total), on_(on), tty_(on && isatty(fileno(out)) != 0), out_(out) {}

void Progress::draw() {
  constexpr int kWidth = 24;
  std::string line = "\r" + label_ + " ";
  if (total_ > 0) {
    const int filled = done_ >= total_ ? kWidth : kWidth * done_ / total_;
    line += "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(kWidth - filled), '.') + "] ";
    line += std::to_string(done_) + "/" + std::to_string(total_);
  } else {
    line += "[" + std::to_string(done_) + "]";
  }
  // The line must not wrap, or \r cannot take it back: `what` gets what the terminal has left
  // (80 columns where it does not say), padded so that a shorter message covers a longer one.
  struct winsize ws {};
  const size_t columns = ioctl(fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
  const size_t used = line.size() + 1;  // the leading \r takes no column; the space before `what` does
  const size_t room = columns > used + 1 ? columns - used - 1 : 0;
  std::string what = escape::message(what_);
  if (what.size() > room) what = room > 3 ? what.substr(0, room - 3) + "..." : what.substr(0, room);
  line += " " + what + std::string(room - what.size(), ' ');
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
