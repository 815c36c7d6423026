"""Run every policy of the zoo through `policyc run` (backends llvm and cpp, every reference batch) and compare its outputs with the PyTorch references in tests/data/zoo/manifest.json."""

# Usage (any python3 with numpy; the build must have produced build/tools/policyc):
#     /usr/bin/python3 examples/zoo/check_zoo.py [--policyc PATH] [--backend llvm,cpp] [--target T] [--filter SUBSTR] [-j N]
# Prints one line per model/backend/batch and exits 1 on any mismatch or failed run.
# Compiled models go to POLICYC_CACHE_DIR, which defaults here to /tmp/zoo_cache rather than the
# user's cache, so that checking the zoo leaves no trace in it.

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "tests" / "data" / "zoo" / "manifest.json"


def check_case(policyc, model, backend, batch, ref, out_root, rtol, atol, target):
    """Returns (ok, message) for one model/backend/batch."""
    out_dir = out_root / model["name"] / f"{backend}_b{batch}"
    shutil.rmtree(out_dir, ignore_errors=True)  # never compare against outputs of an earlier run
    out_dir.mkdir(parents=True)
    cmd = [str(policyc), "run", str(REPO / model["onnx"]), "--backend", backend, "--target", target, "--output-dir", str(out_dir)]
    for name, path in ref["inputs"].items():
        cmd += ["--input", f"{name}={REPO / path}"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.monotonic() - t0
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return False, f"policyc run exited {proc.returncode}: {err}", secs
    worst = []
    for name, path in ref["outputs"].items():
        want = np.load(REPO / path)
        got_path = out_dir / f"{name}.npy"
        if not got_path.exists():
            return False, f"output {name}: policyc wrote no {got_path.name}", secs
        got = np.load(got_path)
        if got.dtype != want.dtype or got.shape != want.shape:
            return False, f"output {name}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}", secs
        if np.issubdtype(want.dtype, np.integer):
            bad = int(np.count_nonzero(got != want))
            if bad:
                return False, f"output {name}: {bad} of {want.size} integers differ", secs
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        tol = atol + rtol * np.abs(want.astype(np.float64))
        if not np.all(np.isfinite(got)) or np.any(diff > tol):
            i = np.unravel_index(np.argmax(diff - tol), diff.shape)
            return False, (f"output {name}: max abs diff {diff.max():.3g} exceeds tolerance at {list(map(int, i))} "
                           f"(got {got[i]:.7g}, want {want[i]:.7g})"), secs
        worst.append(float(diff.max()))
    return True, f"max abs diff {max(worst, default=0.0):.2e}", secs


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--policyc", default=str(REPO / "build" / "tools" / "policyc"))
    ap.add_argument("--backend", default="llvm,cpp", help="comma-separated backends (default llvm,cpp)")
    ap.add_argument("--target", default="native",
                    help="the code's target (policyc run --target): native, or x86-64-v3 for AVX2 code on any such host")
    ap.add_argument("--filter", default="", help="only models whose name contains this")
    ap.add_argument("--out-dir", default="/tmp/zoo_out", help="where policyc writes its outputs")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("-j", "--jobs", type=int, default=1, help="policyc runs at a time")
    args = ap.parse_args()

    os.environ.setdefault("POLICYC_CACHE_DIR", "/tmp/zoo_cache")
    policyc = Path(args.policyc)
    if not policyc.exists():
        sys.exit(f"check_zoo: {policyc} not found; build policyc first")
    manifest = json.loads(MANIFEST.read_text())
    backends = [b for b in args.backend.split(",") if b]
    models = [m for m in manifest["models"] if args.filter in m["name"]]
    if not models:
        sys.exit(f"check_zoo: no model matches '{args.filter}'")
    out_root = Path(args.out_dir)

    cases = [(m, b, int(batch), ref) for m in models for b in backends for batch, ref in sorted(
        m["reference"].items(), key=lambda kv: int(kv[0]))]
    start = time.monotonic()
    failures = 0

    def run(case):
        m, b, batch, ref = case
        return case, check_case(policyc, m, b, batch, ref, out_root, args.rtol, args.atol, args.target)

    # Each model's first run per backend compiles it; batches of one model share the compiled code,
    # so results are printed in table order whatever order the runs finish in.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for (m, b, batch, _), (ok, msg, secs) in pool.map(run, cases):
            failures += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {m['name']:24s} {b:5s} batch {batch}  {secs:6.2f}s  {msg}", flush=True)

    elapsed = time.monotonic() - start
    print(f"{len(cases) - failures} of {len(cases)} passed ({len(models)} models x {len(backends)} backends x "
          f"{len(manifest['batches'])} batches, target {args.target}; rtol {args.rtol:g}, atol {args.atol:g}) in {elapsed:.1f}s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
