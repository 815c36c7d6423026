"""Writing a file whole or not at all, for the benchmark scripts' outputs (plots, CSV baselines).

A temporary file beside the target, renamed over it: a failure leaves no partial file, a reader
never sees half of one, and an earlier file of that name stays until the new one is complete.
"""
import os
import tempfile
from pathlib import Path


def write_atomic(path, write, binary=True):
    """Calls write(f) on a temporary file beside `path`, then renames it to `path`. Raises
    OSError (and removes the temporary file) when anything fails."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"newline": ""})) as f:
            write(f)
        # mkstemp makes the file 0600; give it the mode a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
