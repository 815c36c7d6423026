#!/usr/bin/python3
"""Tests check_html.py: builds small HTML reports in a temporary directory and checks that the
good one passes and each broken one fails for the reason it was broken for.

    test_check_html.py [--jobs N] [--chromium PATH]

A plain script (no pytest): exits 0 when every case passes, 1 with one line per failed case.
Each case starts its own headless Chromium (a few seconds each); --jobs runs cases side by side.
"""
import argparse
import concurrent.futures
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_html.py")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ beside the sources
import check_html  # noqa: E402  (for the PNG check's unit cases)

GOOD_INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>Report</title>
<style>h1 { color: #224; } .bar { fill: steelblue; }</style></head>
<body>
<h1 id="summary">Report</h1>
<svg width="240" height="80" xmlns="http://www.w3.org/2000/svg"
     xmlns:xlink="http://www.w3.org/1999/xlink">
  <defs><rect id="bar" width="40" height="60"/></defs>
  <use href="#bar" class="bar" x="10" y="10"/>
  <use xlink:href="#bar" class="bar" x="60" y="10"/>
  <a href="#summary"><text x="120" y="40">top</text></a>
</svg>
<img src="img/chart.svg" alt="chart" width="120" height="60">
<p><a href="details.html#timings">timings</a> | <a href="#summary">summary</a>
 | <a href="mailto:nobody@example.invalid">mail</a></p>
<script>document.title = "Report (" + document.images.length + " image)";</script>
</body></html>
"""

DETAILS = """<!doctype html>
<html><head><meta charset="utf-8"><title>Details</title></head>
<body><h2 id="timings">Timings</h2><p><a href="index.html#summary">back</a></p></body></html>
"""

CHART = """<svg xmlns="http://www.w3.org/2000/svg" width="120" height="60">
<rect width="120" height="60" fill="orange"/><circle cx="60" cy="30" r="20" fill="navy"/></svg>
"""


def page(body):
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>t</title></head>\n"
            f"<body><h1>Report</h1>\n{body}\n</body></html>\n")


# name -> (files, expected exit status, strings every one of which stderr must hold)
CASES = {
    "good": ({"index.html": GOOD_INDEX, "details.html": DETAILS, "img/chart.svg": CHART},
             0, []),
    "console_error": ({"index.html": page("<script>console.error('bad thing', 7)</script>")},
                      1, ["console.error: bad thing 7 (index.html:"]),
    "thrown_exception": ({"index.html": page(
        "<script>function f() { throw new Error('kaboom'); } f();</script>")},
        1, ["exception: Uncaught Error: kaboom (index.html:"]),
    "broken_link": ({"index.html": page('<a href="missing.html">x</a>')},
                    1, ['index.html:4: <a href="missing.html">: missing file missing.html']),
    "missing_anchor": ({"index.html": page('<a href="details.html#nowhere">x</a>'),
                        "details.html": page('<h2 id="timings">Timings</h2>')},
                       1, ["<a href=\"details.html#nowhere\">: no id or <a name> 'nowhere' "
                           "in details.html"]),
    "missing_img": ({"index.html": page('<img src="plots/gone.png" alt="gone">')},
                    1, ['<img src="plots/gone.png">: missing file plots/gone.png',
                        "net::ERR_FILE_NOT_FOUND (plots/gone.png)"]),
    "external_link": ({"index.html": page('<a href="https://example.com/x">x</a>')},
                      1, ['<a href="https://example.com/x">: external link']),
}


def write_report(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def run_case(name, work, chromium):
    """Runs one case; returns a list of failure lines (empty when it passed) and its time."""
    files, want_rc, want_err = CASES[name]
    root = os.path.join(work, name, "report")
    scratch = os.path.join(work, name, "tmp")  # check_html's temporary profile lands here
    os.makedirs(root)
    os.makedirs(scratch)
    write_report(root, files)
    shot = os.path.join(work, name, "shot.png")
    cmd = [sys.executable, CHECK, os.path.join(root, "index.html"), "--screenshot", shot,
           "--timeout", "90"]
    if chromium:
        cmd += ["--chromium", chromium]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                          env=dict(os.environ, TMPDIR=scratch))
    took = time.monotonic() - start
    fails = []
    out, err = proc.stdout.strip(), proc.stderr.strip()

    def fail(what):
        fails.append(f"{name}: {what}\n    stdout: {out!r}\n    stderr: {err!r}")

    if proc.returncode != want_rc:
        fail(f"exit status {proc.returncode}, expected {want_rc}")
    for s in want_err:
        if s not in err:
            fail(f"stderr lacks {s!r}")
    if want_rc == 0:
        if not (out.startswith("check_html: OK: 2 pages, ") and "no console errors" in out
                and out.endswith(f"screenshot {shot} (1280x800)")):
            fail("unexpected summary line")
        if err:
            fail("stderr not empty")
        try:
            with open(shot, "rb") as f:
                w, h, colour = check_html.png_colours(f.read())
            if (w, h) != (1280, 800) or colour is not None:
                fail(f"screenshot {w}x{h}, uniform colour {colour!r}")
        except (OSError, ValueError) as e:
            fail(f"screenshot unreadable: {e}")
    else:
        lines = err.splitlines()
        if not lines or not lines[-1].startswith("check_html: FAILED: "):
            fail("no FAILED line last on stderr")
    leftovers = os.listdir(scratch)
    if leftovers:
        fail(f"temporary files left behind: {leftovers}")
    return fails, took


def png(width, height, rows, colour_type=2, filters=None):
    """A PNG of 8-bit samples from raw rows, each row filtered with filters[y] (default 0)."""
    bpp = check_html.CHANNELS[colour_type]
    raw, prior = b"", bytes(len(rows[0]))
    for y, row in enumerate(rows):
        ftype = filters[y] if filters else 0
        out = bytearray()
        for i, v in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prior[i], (prior[i - bpp] if i >= bpp else 0)
            pred = (0, a, b, (a + b) >> 1, check_html.paeth(a, b, c))[ftype]
            out.append((v - pred) & 0xFF)
        raw += bytes([ftype]) + bytes(out)
        prior = row

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body)))

    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def png_unit_cases():
    """The screenshot's uniform-colour check on hand-made images, every filter type."""
    fails = []
    grey = bytes([200, 200, 200]) * 4
    for ftype in range(5):
        filters = [ftype] * 3
        uniform = png(4, 3, [grey] * 3, filters=filters)
        if check_html.png_colours(uniform)[2] != bytes([200, 200, 200]):
            fails.append(f"png: uniform image with filter {ftype} not seen as uniform")
        dot = [grey, grey[:6] + bytes([200, 201, 200]) + grey[9:], grey]
        if check_html.png_colours(png(4, 3, dot, filters=filters))[2] is not None:
            fails.append(f"png: image with one odd pixel (filter {ftype}) seen as uniform")
        stripe = [bytes([10, 20, 30]) + grey[3:]] * 3
        if check_html.png_colours(png(4, 3, stripe, filters=filters))[2] is not None:
            fails.append(f"png: striped image (filter {ftype}) seen as uniform")
    for broken in (b"", b"not a png", png(4, 3, [grey] * 3)[:-20]):
        try:
            check_html.png_colours(broken)
            fails.append(f"png: broken file {broken[:12]!r}... accepted")
        except ValueError:
            pass
    return fails


def usage_cases(work):
    fails = []
    for args in ([], [os.path.join(work, "nope.html"), "--screenshot", "x.png"],
                 ["--screenshot", "x.png"]):
        proc = subprocess.run([sys.executable, CHECK] + args, capture_output=True, text=True,
                              timeout=60)
        lines = proc.stderr.strip().splitlines()
        if proc.returncode != 2 or len(lines) != 1 or "usage error" not in lines[0]:
            fails.append(f"usage {args}: exit {proc.returncode}, stderr {proc.stderr!r}")
    return fails


def main():
    ap = argparse.ArgumentParser(description="Tests check_html.py.")
    ap.add_argument("--jobs", type=int, default=1, help="cases run side by side (default 1)")
    ap.add_argument("--chromium", help="Chromium binary passed on to check_html.py")
    args = ap.parse_args()
    start = time.monotonic()
    fails = png_unit_cases()
    with tempfile.TemporaryDirectory(prefix="test_check_html.") as work:
        fails += usage_cases(work)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {name: pool.submit(run_case, name, work, args.chromium)
                       for name in CASES}
            for name, fut in futures.items():
                case_fails, took = fut.result()
                print(f"{'FAIL' if case_fails else 'ok  '} {name} ({took:.1f} s)")
                fails += case_fails
    for f in fails:
        print(f"test_check_html: {f}", file=sys.stderr)
    print(f"test_check_html: {'FAILED' if fails else 'OK'}: {len(CASES)} report cases, "
          f"{time.monotonic() - start:.1f} s")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
