#!/usr/bin/python3
"""Checks a static HTML report: its links statically, and its page in headless Chromium.

    check_html.py INDEX.html --screenshot OUT.png [--timeout 60] [--chromium PATH]

Static part (html.parser): INDEX.html and every local .html page it reaches are parsed; every
reference in them (href, src, xlink:href, srcset, poster, <object data>, CSS url() and @import in
<style>, style="" and linked local .css files) must be local and name an existing file inside the
report directory, and every #fragment must name an id (or <a name>) of the page it points into
(.html and .svg targets). http(s) and other network references are errors: the report must work
with no network. mailto:, data:, javascript:, tel: and about: references are accepted as they are.

Browser part: Chromium runs headless with a throwaway profile and is driven over the DevTools
protocol on --remote-debugging-pipe (fds 3 and 4, JSON messages ended by a NUL byte). The page is
opened as a file:// URL; console.error / console.assert calls, uncaught exceptions and error log
entries (failed resource loads among them) until the load event and half a second after it are
errors. A full-page PNG screenshot is written to OUT.png and must not be a single uniform colour.

Exit status: 0 and a one-line summary when all is well; 1 and one line per problem on stderr;
2 and one line for a usage error or when Chromium cannot be started or dies. Chromium is always
killed and its profile directory removed. Python standard library only.
"""
import argparse
import base64
import fcntl
import html.parser
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zlib

PROG = "check_html"
VIEWPORT = (1280, 800)
MAX_SHOT_DIM = 16384  # Chromium cannot capture beyond its largest texture
SETTLE_S = 0.5  # how long to keep listening for late errors after the load event

# Schemes accepted without a check; http(s) and anything else not listed is an error.
INERT_SCHEMES = {"mailto", "data", "javascript", "tel", "about", "blob"}


class UsageError(Exception):
    """Bad arguments or an input that cannot be read (exit 2)."""


class BrowserError(Exception):
    """Chromium could not be started, or stopped answering or died (exit 2)."""


class Timeout(Exception):
    """The --timeout deadline passed."""


# ---------------------------------------------------------------------------------------------
# Static link check
# ---------------------------------------------------------------------------------------------

CSS_URL_RE = re.compile(r"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^)'"\s]*))\s*\)""", re.I)
CSS_IMPORT_RE = re.compile(r"""@import\s+(?:"([^"]*)"|'([^']*)')""", re.I)
CSS_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)

# Attributes that hold a single URL, by tag (None: any tag).
URL_ATTRS = {
    "href": None,  # <a>, <link>, <area>, and <use>/<image>/<a> inside inline SVG
    "xlink:href": None,
    "src": None,  # <img>, <script>, <iframe>, <source>, <embed>, <audio>, <video>, <track>
    "poster": {"video"},
    "data": {"object"},
    "action": {"form"},
    "formaction": None,
    "background": None,
}


def css_urls(text):
    """The URLs named by url(...) and @import "..." in CSS text, in order."""
    text = CSS_COMMENT_RE.sub(" ", text)
    urls = []
    for m in CSS_URL_RE.finditer(text):
        urls.append(next(g for g in m.groups() if g is not None))
    for m in CSS_IMPORT_RE.finditer(text):
        urls.append(m.group(1) if m.group(1) is not None else m.group(2))
    return urls


def srcset_urls(value):
    """The URLs of a srcset attribute (the HTML standard's candidate splitting, simplified)."""
    urls, i, n = [], 0, len(value)
    while i < n:
        while i < n and (value[i].isspace() or value[i] == ","):
            i += 1
        j = i
        while j < n and not value[j].isspace():
            j += 1
        url = value[i:j]
        if url.endswith(","):
            url = url.rstrip(",")
            i = j
        else:
            depth = 0  # skip the descriptors up to the next comma outside parentheses
            while j < n and not (value[j] == "," and depth == 0):
                depth += value[j] == "("
                depth -= value[j] == ")" and depth > 0
                j += 1
            i = j
        if url:
            urls.append(url)
    return urls


class PageParser(html.parser.HTMLParser):
    """Collects a page's ids / anchor names and its references (tag, attribute, url, line)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.refs = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        line = self.getpos()[0]
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)
            elif name in URL_ATTRS and (URL_ATTRS[name] is None or tag in URL_ATTRS[name]):
                self.refs.append((tag, name, value, line))
            elif name in ("srcset", "imagesrcset"):
                for url in srcset_urls(value):
                    self.refs.append((tag, name, url, line))
            elif name == "style":
                for url in css_urls(value):
                    self.refs.append((tag, "style url()", url, line))
        if tag == "style":
            self._in_style = True

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag == "style":
            self._in_style = False

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            line = self.getpos()[0]
            for url in css_urls(data):
                self.refs.append(("style", "url()", url, line))


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.decode("utf-8", errors="replace")


def is_html(path):
    return path.lower().endswith((".html", ".htm", ".xhtml"))


class LinkChecker:
    """Walks the local pages reachable from the index and checks every reference in them."""

    def __init__(self, index):
        self.index = os.path.realpath(index)
        self.root = os.path.dirname(self.index)
        self.problems = []
        self.pages = 0
        self.links = 0
        self._parsed = {}  # real path -> PageParser (or None when unreadable)

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def parse(self, path):
        if path not in self._parsed:
            parser = PageParser()
            try:
                text = read_text(path)
            except OSError as e:
                self._parsed[path] = None
                self.problems.append(f"{self.rel(path)}: cannot read: {e.strerror}")
                return None
            if path.lower().endswith(".css"):
                parser.refs = [("css", "url()", u, 0) for u in css_urls(text)]
            else:
                parser.feed(text)
                parser.close()
            self._parsed[path] = parser
        return self._parsed[path]

    def run(self):
        queue, seen = [self.index], {self.index}
        while queue:
            page = queue.pop(0)
            parser = self.parse(page)
            if parser is None:
                continue
            if is_html(page):
                self.pages += 1
            for tag, attr, value, line in parser.refs:
                self.links += 1
                target = self.check_ref(page, tag, attr, value, line)
                if target and (is_html(target) or target.lower().endswith(".css")) \
                        and target not in seen:
                    seen.add(target)
                    queue.append(target)
        return self.problems

    def problem(self, page, line, tag, attr, value, what):
        where = f"{self.rel(page)}:{line}" if line else self.rel(page)
        shown = value if len(value) <= 120 else value[:117] + "..."
        if attr == "url()":  # CSS: a stylesheet or <style>
            ref = f"url({shown})" + ("" if tag == "css" else f" in <{tag}>")
        elif attr == "style url()":
            ref = f"url({shown}) in <{tag} style>"
        else:
            ref = f"<{tag} {attr}=\"{shown}\">"
        self.problems.append(f"{where}: {ref}: {what}")

    def check_ref(self, page, tag, attr, value, line):
        """Checks one reference; returns the local file it names (real path) or None."""
        value = value.strip()
        try:
            url = urllib.parse.urlsplit(value)
        except ValueError as e:
            self.problem(page, line, tag, attr, value, f"malformed URL ({e})")
            return None
        scheme = url.scheme.lower()
        if scheme in INERT_SCHEMES:
            return None
        if scheme in ("http", "https") or (not scheme and url.netloc):
            self.problem(page, line, tag, attr, value,
                         "external link (the report must work without network)")
            return None
        if scheme:
            self.problem(page, line, tag, attr, value, f"unsupported URL scheme '{scheme}:'")
            return None
        if tag == "base":
            return None  # a local <base href> only moves where the others resolve from
        path = urllib.parse.unquote(url.path)
        if not path:
            target = page  # "#frag", "?q" or "": this page
        elif path.startswith("/"):
            self.problem(page, line, tag, attr, value,
                         "absolute path (must be relative to the report)")
            return None
        else:
            base = os.path.dirname(page)
            target = os.path.realpath(os.path.join(base, path))
            if os.path.commonpath([self.root, target]) != self.root:
                self.problem(page, line, tag, attr, value, "points outside the report directory")
                return None
            if not os.path.exists(target):
                self.problem(page, line, tag, attr, value,
                             f"missing file {self.rel(target)}")
                return None
            if not os.path.isfile(target):
                self.problem(page, line, tag, attr, value,
                             f"{self.rel(target)} is not a file")
                return None
        if url.fragment and page.lower().endswith(".css"):
            return target  # url(#x) inside a stylesheet names the document using it
        if url.fragment and (is_html(target) or target.lower().endswith(".svg")):
            frag = url.fragment
            parsed = self.parse(target)
            if parsed is not None and frag not in parsed.ids \
                    and urllib.parse.unquote(frag) not in parsed.ids \
                    and not (is_html(target) and frag.lower() == "top"):
                self.problem(page, line, tag, attr, value,
                             f"no id or <a name> '{urllib.parse.unquote(frag)}' "
                             f"in {self.rel(target)}")
        return target


# ---------------------------------------------------------------------------------------------
# PNG check: is the image more than one colour?
# ---------------------------------------------------------------------------------------------

ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
         (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def unfilter_row(ftype, row, prior, bpp):
    """Reverses one scanline's filter (PNG filter types 0 to 4)."""
    out = bytearray(row)
    n = len(out)
    if ftype == 0:
        pass
    elif ftype == 1:
        for i in range(bpp, n):
            out[i] = (out[i] + out[i - bpp]) & 0xFF
    elif ftype == 2:
        for i in range(n):
            out[i] = (out[i] + prior[i]) & 0xFF
    elif ftype == 3:
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + ((left + prior[i]) >> 1)) & 0xFF
    elif ftype == 4:
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            upleft = prior[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + paeth(left, prior[i], upleft)) & 0xFF
    else:
        raise ValueError(f"bad filter type {ftype}")
    return bytes(out)


def refilter_same(row, bpp):
    """For each filter type, the filtered bytes of scanline `row` when the line above is `row`
    too: a later scanline equals the one above it exactly when its filtered bytes are these
    (unfiltering is one to one given the line above), so a uniform image is checked with one
    bytes comparison per line and no per-byte Python work."""
    n = len(row)
    sub = bytes(row[:bpp]) + bytes((row[i] - row[i - bpp]) & 0xFF for i in range(bpp, n))
    avg = bytes((row[i] - (((row[i - bpp] if i >= bpp else 0) + row[i]) >> 1)) & 0xFF
                for i in range(n))
    # Paeth with left == upleft always predicts the byte above, so the result is all zeros.
    return {0: bytes(row), 1: sub, 2: bytes(n), 3: avg, 4: bytes(n)}


def row_pixels(row, width, depth, channels):
    """The pixel values of one unfiltered scanline, as a set."""
    if depth >= 8:
        size = channels * depth // 8
        return {row[i:i + size] for i in range(0, width * size, size)}
    bits = int.from_bytes(row, "big")
    total = len(row) * 8
    mask = (1 << depth) - 1
    return {(bits >> (total - depth * (i + 1))) & mask for i in range(width)}


def png_colours(data):
    """Parses a PNG; returns (width, height, uniform), uniform being the single colour's raw
    sample bytes (or palette index) when every pixel is the same, else None. Raises ValueError
    for a broken file. Different palette entries count as different colours."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError("not a PNG file")
    pos, ihdr, idat, ended = 8, None, [], False
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            raise ValueError(f"truncated {ctype!r} chunk")
        if struct.unpack(">I", crc)[0] != zlib.crc32(ctype + body):
            raise ValueError(f"bad CRC in {ctype!r} chunk")
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            ended = True
            break
        pos += 12 + length
    if ihdr is None or not idat or not ended:
        raise ValueError("missing IHDR, IDAT or IEND")
    width, height, depth, colour, _, _, interlace = ihdr
    if colour not in CHANNELS or depth not in (1, 2, 4, 8, 16) or width == 0 or height == 0:
        raise ValueError(f"unsupported IHDR {ihdr}")
    channels = CHANNELS[colour]
    bpp = max(1, channels * depth // 8)
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise ValueError(f"bad image data: {e}") from None
    if interlace:
        passes = [((width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy)
                  for x0, y0, dx, dy in ADAM7]
        passes = [(w, h) for w, h in passes if w and h]
    else:
        passes = [(width, height)]
    pos, colours, uniform = 0, set(), True
    for w, h in passes:
        stride = (w * channels * depth + 7) // 8
        if pos + h * (stride + 1) > len(raw):
            raise ValueError("image data shorter than the image")
        if not uniform:
            pos += h * (stride + 1)
            continue
        first = unfilter_row(raw[pos], raw[pos + 1:pos + 1 + stride], bytes(stride), bpp)
        colours |= row_pixels(first, w, depth, channels)
        same = refilter_same(first, bpp)
        for y in range(1, h):
            start = pos + y * (stride + 1)
            ftype = raw[start]
            if ftype > 4:
                raise ValueError(f"bad filter type {ftype}")
            if raw[start + 1:start + 1 + stride] != same[ftype]:
                uniform = False
                break
        pos += h * (stride + 1)
        if len(colours) > 1:
            uniform = False
    if uniform and len(colours) == 1:
        return width, height, next(iter(colours))
    return width, height, None


# ---------------------------------------------------------------------------------------------
# Chromium over the DevTools pipe
# ---------------------------------------------------------------------------------------------

def find_chromium(explicit):
    if explicit:
        return explicit
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    # Debian's /usr/bin/chromium is a shell wrapper that adds extension flags; prefer the binary.
    for candidate in ("/usr/lib/chromium/chromium", "chromium", "chromium-browser",
                      "google-chrome", "google-chrome-stable", "chrome"):
        path = candidate if os.path.isabs(candidate) else shutil.which(candidate)
        if path and os.access(path, os.X_OK):
            return path
    raise BrowserError("no Chromium found (set CHROMIUM or pass --chromium)")


class Browser:
    """One headless Chromium process and its DevTools pipe."""

    def __init__(self, binary, deadline):
        self.deadline = deadline
        self.tmp = tempfile.mkdtemp(prefix="check_html.")
        self.proc = None
        self.to_chrome = self.from_chrome = None
        self.buf = b""
        self.next_id = 0
        self.responses = {}
        self.on_event = None
        try:
            self._start(binary)
        except BaseException:
            self.close()
            raise

    def _start(self, binary):
        self.stderr_path = os.path.join(self.tmp, "chromium.stderr")
        profile = os.path.join(self.tmp, "profile")
        os.mkdir(profile)
        args = [
            binary,
            "--headless",
            "--no-sandbox",  # the sandbox needs namespaces a container (or root) lacks
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--disable-sync",
            "--mute-audio",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
            # Nothing resolves: a reference to the network fails at once instead of hanging.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # Chromium reads commands from fd 3 and writes replies to fd 4.
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        self.to_chrome, self.from_chrome = cmd_w, out_r
        for fd in (3, 4):  # pass_fds needs 3 and 4 open here; they are unless stdio is closed
            try:
                os.fstat(fd)
            except OSError:
                raise BrowserError(f"file descriptor {fd} is not open in this process") from None

        def to_fds_3_and_4():
            # Copies first, above 3 and 4, so that neither dup2 overwrites the other's source.
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        try:
            with open(self.stderr_path, "wb") as err:
                self.proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                    pass_fds=(3, 4), preexec_fn=to_fds_3_and_4, start_new_session=True)
        except OSError as e:
            raise BrowserError(f"cannot run {binary}: {e.strerror}") from None
        finally:
            os.close(cmd_r)
            os.close(out_w)

    def exit_status(self):
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "none: still running"

    def stderr_tail(self, lines=12):
        try:
            text = read_text(self.stderr_path)
        except OSError:
            return ""
        # D-Bus complaints are printed on every start in a container; they explain nothing.
        kept = [ln.strip() for ln in text.splitlines()
                if ln.strip() and "dbus" not in ln.lower()]
        return " | ".join(kept[-lines:])

    def _read(self, until):
        """Reads and dispatches messages until `until()` holds."""
        while not until():
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise Timeout()
            ready, _, _ = select.select([self.from_chrome], [], [], min(left, 1.0))
            if not ready:
                if self.proc.poll() is not None:
                    raise BrowserError(f"chromium exited with status {self.proc.returncode}")
                continue
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed the DevTools pipe (exit status "
                                   f"{self.exit_status()})")
            self.buf += chunk
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    self.responses[msg["id"]] = msg
                elif self.on_event is not None:
                    self.on_event(msg)

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        try:
            while data:
                data = data[os.write(self.to_chrome, data):]
        except BrokenPipeError:
            raise BrowserError(f"chromium closed the DevTools pipe (exit status "
                               f"{self.exit_status()})") from None
        return self.next_id

    def call(self, method, params=None, session=None):
        """Sends a command and waits for its reply; returns its result."""
        mid = self.send(method, params, session)
        self._read(lambda: mid in self.responses)
        reply = self.responses.pop(mid)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    def wait(self, until):
        self._read(until)

    def listen(self, seconds):
        """Keeps dispatching events for `seconds` (bounded by the deadline)."""
        end = min(time.monotonic() + seconds, self.deadline)
        try:
            self._read(lambda: time.monotonic() >= end)
        except Timeout:
            pass

    def close(self):
        """Kills Chromium and removes its profile. Nothing in the throwaway profile is worth a
        polite Browser.close, which takes most of a second."""
        if self.proc is not None:
            # The browser leads its own process group: its zygotes and renderers go with it.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for fd in (self.to_chrome, self.from_chrome):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.to_chrome = self.from_chrome = None
        # The profile's SingletonSocket links to $TMPDIR/org.chromium.Chromium.XXXXXX/, which a
        # killed browser leaves behind. (It cannot simply go under our directory: that path
        # can get longer than a Unix socket's name may be, and Chromium then aborts.)
        try:
            sock = os.readlink(os.path.join(self.tmp, "profile", "SingletonSocket"))
            sock_dir = os.path.dirname(sock)
            if os.path.basename(sock_dir).startswith("org.chromium.Chromium."):
                shutil.rmtree(sock_dir, ignore_errors=True)
        except OSError:
            pass
        # A process of the group may still be dying and writing: retry a little.
        for _ in range(20):
            shutil.rmtree(self.tmp, ignore_errors=True)
            if not os.path.exists(self.tmp):
                break
            time.sleep(0.1)


def describe_arg(arg):
    if "value" in arg:
        v = arg["value"]
        return v if isinstance(v, str) else json.dumps(v)
    if "unserializableValue" in arg:
        return arg["unserializableValue"]
    return arg.get("description", arg.get("type", "?"))


class PageErrors:
    """Turns the page session's DevTools events into error lines."""

    def __init__(self, session, root):
        self.session = session
        self.root_url = "file://" + urllib.parse.quote(root.rstrip("/") + "/")
        self.errors = []
        self.loaded = False
        self.crashed = False
        self.dialogs = []

    def where(self, url, line):
        if not url:
            return ""
        if url.startswith(self.root_url):
            url = urllib.parse.unquote(url[len(self.root_url):])
        return f" ({url}:{line + 1})" if line is not None else f" ({url})"

    def __call__(self, msg):
        if msg.get("sessionId") != self.session:
            return
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Page.loadEventFired":
            self.loaded = True
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(describe_arg(a) for a in params.get("args", []))
            if params["type"] == "assert":
                text = "Assertion failed" + (f": {text}" if text else "")
            frames = params.get("stackTrace", {}).get("callFrames", [])
            loc = self.where(frames[0]["url"], frames[0]["lineNumber"]) if frames else ""
            self.errors.append(f"console.{params['type']}: {one_line(text)}{loc}")
        elif method == "Runtime.exceptionThrown":
            det = params.get("exceptionDetails", {})
            exc = det.get("exception", {})
            text = (exc.get("description") or describe_arg(exc)) if exc else ""
            text = (text or "").split("\n")[0]
            head = det.get("text", "Uncaught")
            line = f"exception: {head}" + (f" {text}" if text and text not in head else "")
            self.errors.append(one_line(line) + self.where(det.get("url"), det.get("lineNumber")))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") == "error":
                self.errors.append(f"log ({entry.get('source', '?')}): "
                                   f"{one_line(entry.get('text', ''))}"
                                   + self.where(entry.get("url"), entry.get("lineNumber")))
        elif method == "Inspector.targetCrashed":
            self.crashed = True
            self.errors.append("the page's renderer crashed")
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(params.get("type", "dialog"))


def one_line(text):
    return " ".join(str(text).split())


def run_browser(binary, index, shot_path, deadline):
    """Opens the page; returns (errors, (width, height) of the written screenshot or None)."""
    browser = Browser(binary, deadline)
    try:
        try:
            browser.call("Browser.getVersion")
        except (BrowserError, Timeout) as e:
            what = "did not answer in time" if isinstance(e, Timeout) else str(e)
            tail = browser.stderr_tail()
            raise BrowserError(f"chromium failed to start: {what}"
                               + (f"; stderr: {tail}" if tail else "")) from None
        try:
            return drive_page(browser, index, shot_path)
        except BrowserError as e:
            tail = browser.stderr_tail()
            raise BrowserError(f"{e}" + (f"; stderr: {tail}" if tail else "")) from None
    finally:
        browser.close()


def drive_page(browser, index, shot_path):
    # The about:blank tab opened at start-up already has its renderer: use it when it is there.
    pages = [t for t in browser.call("Target.getTargets").get("targetInfos", [])
             if t.get("type") == "page"]
    if pages:
        target = pages[0]["targetId"]
    else:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.call("Target.attachToTarget",
                           {"targetId": target, "flatten": True})["sessionId"]
    page = PageErrors(session, os.path.dirname(index))
    errors = page.errors

    def on_event(msg):
        page(msg)
        if msg.get("method") == "Page.javascriptDialogOpening" \
                and msg.get("sessionId") == session:
            browser.send("Page.handleJavaScriptDialog", {"accept": True}, session)

    browser.on_event = on_event
    for domain in ("Inspector", "Runtime", "Log", "Page"):
        browser.call(f"{domain}.enable", None, session)
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1,
                  "mobile": False}, session)
    url = "file://" + urllib.parse.quote(index)
    try:
        nav = browser.call("Page.navigate", {"url": url}, session)
        if nav.get("errorText"):
            errors.append(f"navigation to {url} failed: {nav['errorText']}")
            return errors, None
        browser.wait(lambda: page.loaded or page.crashed)
    except Timeout:
        errors.append("the page did not finish loading before the --timeout")
        return errors, None
    browser.listen(SETTLE_S)
    if page.crashed:
        return errors, None
    try:
        metrics = browser.call("Page.getLayoutMetrics", None, session)
        size = metrics.get("cssContentSize") or metrics.get("contentSize") or {}
        width = min(max(int(size.get("width", 0)), 1), MAX_SHOT_DIM)
        height = min(max(int(size.get("height", 0)), 1), MAX_SHOT_DIM)
        shot = browser.call("Page.captureScreenshot",
                            {"format": "png", "captureBeyondViewport": True,
                             "clip": {"x": 0, "y": 0, "width": width, "height": height,
                                      "scale": 1}}, session)
    except Timeout:
        errors.append("the screenshot was not taken before the --timeout")
        return errors, None
    data = base64.b64decode(shot.get("data", ""))
    try:
        with open(shot_path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise UsageError(f"cannot write {shot_path}: {e.strerror}") from None
    if not data:
        errors.append(f"screenshot {shot_path} is empty")
        return errors, None
    try:
        w, h, colour = png_colours(data)
    except ValueError as e:
        errors.append(f"screenshot {shot_path} is not a valid PNG: {e}")
        return errors, None
    if colour is not None:
        shown = colour.hex() if isinstance(colour, bytes) else str(colour)
        errors.append(f"screenshot {shot_path} is a single uniform colour (#{shown}): "
                      "the page rendered nothing")
    for kind in page.dialogs:
        print(f"{PROG}: note: the page opened a JavaScript {kind} (dismissed)", file=sys.stderr)
    return errors, (w, h)


# ---------------------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def main(argv):
    ap = Parser(prog="check_html.py", add_help=True,
                description="Checks a static HTML report's links, console and rendering.")
    ap.add_argument("index", metavar="INDEX.html")
    ap.add_argument("--screenshot", metavar="OUT.png", required=True)
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds for the whole check (default 60)")
    ap.add_argument("--chromium", metavar="PATH",
                    help="Chromium binary (default: $CHROMIUM, else found on the system)")
    args = ap.parse_args(argv)
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    deadline = time.monotonic() + args.timeout
    index = os.path.realpath(args.index)
    if not os.path.isfile(index):
        raise UsageError(f"{args.index}: no such file")
    shot_dir = os.path.dirname(os.path.abspath(args.screenshot))
    if not os.path.isdir(shot_dir):
        raise UsageError(f"{args.screenshot}: directory {shot_dir} does not exist")
    binary = find_chromium(args.chromium)

    checker = LinkChecker(index)
    problems = [f"broken link: {p}" for p in checker.run()]
    try:
        errors, size = run_browser(binary, index, args.screenshot, deadline)
    except Timeout:
        errors, size = ["the check did not finish before the --timeout"], None
    problems += [f"page error: {e}" for e in errors]
    if problems:
        for p in problems:
            print(f"{PROG}: {p}", file=sys.stderr)
        print(f"{PROG}: FAILED: {len(problems)} problem(s) in {checker.pages} page(s)",
              file=sys.stderr)
        return 1
    print(f"{PROG}: OK: {checker.pages} pages, {checker.links} links, no console errors, "
          f"screenshot {args.screenshot} ({size[0]}x{size[1]})")
    return 0


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop Chromium


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"{PROG}: usage error: {e}", file=sys.stderr)
        sys.exit(2)
    except BrowserError as e:
        print(f"{PROG}: {one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
