// Progress of a long step a user waits for (autotuning, minifying): on a terminal one line
// redrawn in place, a bar when the total is known; otherwise (a log, CI) one plain line per step.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace policyc::support {

class Progress {
 public:
  // `total` 0: not known in advance (a counter instead of a bar). `on` false: prints nothing.
  Progress(std::string label, int total, bool on = true, std::FILE* out = stderr);
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void step(std::string_view what);   // one more step done; `what` says which
  void note(std::string_view line);   // a line that stays (the bar is cleared first, then redrawn)
  void finish();                      // ends the bar's line (idempotent)
  void clear();                       // takes the bar off its line (the next step draws it again)
  int done() const { return done_; }

 private:
  void draw();
  std::string label_, what_;
  int total_, done_ = 0;
  bool on_, tty_, drawn_ = false;
  std::FILE* out_;
};

}  // namespace policyc::support
