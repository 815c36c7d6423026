"""Progress of a long benchmark run on stderr: a bar redrawn in place on a terminal, plain lines otherwise.

    bar = Progress(total, "peers")     # or `with Progress(total, "peers") as bar:`
    bar.step("ppo_mlp batch 64 ort")   # starts the next step (or the next n: step(msg, n))
    bar.clear()                        # before printing anything else on the terminal
    bar.close()                        # ends the bar's line (close(ok=False) after a failure)

On a terminal the line reads `peers [#####.....] 12/40 ppo_mlp batch 64 ort`: the count is the
step now running, the bar the steps already done. When stderr is a file or a pipe (CI logs, `2>log`)
each step is one line, `peers 12/40 ppo_mlp batch 64 ort`, since carriage returns would leave
one unreadable line in a log.
"""
import shutil
import sys


class Progress:
    WIDTH = 10  # cells of the bar: enough to see the run move, short enough to leave room for the message

    def __init__(self, total, label="", stream=None):
        self.total = max(int(total), 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.done = 0       # steps finished: every step before the ones running
        self.running = 0    # steps the last step() started
        self.msg = None     # the last step's message
        self.shown = False  # whether the bar is on the terminal now

    def step(self, msg, n=1):
        """Starts the next `n` steps (one message for steps that run together, e.g. every batch
        size of one subprocess); the steps started before are done."""
        self.done += self.running
        self.running = n
        self.msg = msg
        now = self.done + n
        if self.tty:
            self._draw(self.done, now)
        else:
            self.stream.write(f"{self._prefix()}{now}/{self.total} {msg}\n")
            self.stream.flush()

    def clear(self):
        """Takes the bar off the terminal so that other output starts on a clean line; the next
        step draws it again."""
        if self.tty and self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False

    def close(self, ok=True):
        """Ends the run: on a terminal the bar stays on its own line, with the last step counted as
        done when `ok`, as it was when not (a run that failed shows where; the error message then
        starts on a line of its own). Nothing to do for plain lines, each already ends in a newline."""
        if ok:
            self.done += self.running
            self.running = 0
        if self.tty and self.msg is not None:
            self._draw(self.done, self.done + self.running)
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False
        self.msg = None

    # `with Progress(...) as bar:` closes the bar however the block ends, so that an error
    # message raised inside it starts on a line of its own rather than after the bar.
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(ok=exc_type is None)
        return False

    def _prefix(self):
        return f"{self.label} " if self.label else ""

    def _draw(self, done, now):
        filled = min(self.WIDTH * done // self.total, self.WIDTH) if self.total else 0
        line = f"{self._prefix()}[{'#' * filled}{'.' * (self.WIDTH - filled)}] {now}/{self.total} {self.msg}"
        # A line longer than the terminal wraps, and "\r" then returns only to the wrapped part:
        # cut it to the width so that every redraw overwrites the whole bar.
        cols = shutil.get_terminal_size((80, 24)).columns
        self.stream.write("\r\033[K" + line[: max(cols - 1, 20)])
        self.stream.flush()
        self.shown = True
