"""PyTorch eager's throughput on an ONNX model, as a baseline CSV for `policyc bench --baseline FILE`.

    torch_baseline.py MODEL.onnx [--batch 1,16,64] [--threads 1,2] [--min-time 1] [--min-calls 200]
                      [--warmup 50] --csv OUT.csv [--seed 0]

The model runs through bench/peers' translator (onnx_torch.OnnxModule: the torch functions PyTorch's
own modules call) under torch.no_grad(), with torch.set_num_threads(t), on random inputs of the
graph's dtypes and shapes with the batch dimension set (peers.py's model_inputs), timed like the
peers and `policyc bench` (peers.py's time_calls and quantiles). The CSV has the columns
batch,threads,samples_per_s,median_us: CsvBaseline (tools/bench.cpp) finds its columns by name, needs
'batch' and 'samples_per_s', matches rows on 'threads' when there is such a column, and ignores the
others. One progress line per (batch, threads) on stderr.
"""
import argparse
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # bench/: atomic_file.py
import torch  # noqa: E402

# peers.py's helpers, imported rather than copied so that this baseline times exactly as the peers do
# (importing peers.py runs nothing: its work is in main()).
from onnx_torch import OnnxModule, UnsupportedOp  # noqa: E402
from peers import model_inputs, quantiles, time_calls  # noqa: E402
from atomic_file import write_atomic  # noqa: E402

PROG = "torch_baseline.py"


class BaselineError(Exception):
    """Reported as one line `torch_baseline.py: error: ...`, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{PROG}: error: {message} (see {PROG} --help)", file=sys.stderr)
        sys.exit(2)


def int_list(text, what):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BaselineError(f"--{what} must be comma-separated integers, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise BaselineError(f"--{what} must be integers >= 1, got '{text}'")
    return values


def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def measure(args, batches, threads_list):
    """[(batch, threads, samples_per_s, median_us)], batch by batch, then thread count."""
    model = args.model
    if not Path(model).is_file():
        raise BaselineError(f"cannot read '{model}': no such file")
    try:
        module = OnnxModule(model).eval()
    except UnsupportedOp as e:
        # the translator names the op and the node: what would have to be added to onnx_torch.OPS
        raise BaselineError(f"the PyTorch translator cannot run it: {e}") from None
    except Exception as e:  # onnx.load on a file that is not an ONNX model
        raise BaselineError(f"cannot load '{model}' as an ONNX model: {first_line(e)}") from None
    # One intra-op pool, no inter-op threads: what peers.py sets, so that `t` threads means t.
    torch.set_num_interop_threads(1)
    rows = []
    for b in batches:
        try:
            inputs = model_inputs(model, b, seed=args.seed)
        except SystemExit as e:  # peers.py reports an input it cannot generate by exiting
            raise BaselineError(str(e.code).removeprefix("peers: ")) from None
        xs = [torch.from_numpy(a) for _, a in inputs]
        for t in threads_list:
            print(f"{PROG}: {Path(model).stem} batch {b}, {t} thread{'s' if t > 1 else ''}", file=sys.stderr, flush=True)
            torch.set_num_threads(t)
            with torch.no_grad():
                try:
                    module(*xs)  # the first call separately: a translator or shape error is reported, not timed
                except UnsupportedOp as e:
                    raise BaselineError(f"the PyTorch translator cannot run it: {e}") from None
                except Exception as e:
                    raise BaselineError(f"PyTorch failed at batch {b}: {first_line(e)}") from None
                us = time_calls(lambda: module(*xs), args)
            median = quantiles(us)[0]
            rows.append((b, t, b * 1e6 / median, median))
    return rows


def write_csv(path, rows):
    """The whole CSV or none (atomic_file)."""
    def write(f):
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["batch", "threads", "samples_per_s", "median_us"])
        for b, t, sps, median in rows:
            w.writerow([b, t, f"{sps:.1f}", f"{median:.3f}"])
    try:
        write_atomic(path, write, binary=False)
    except OSError as e:
        raise BaselineError(f"cannot write '{path}': {e.strerror or e}") from None


def main(argv=None):
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the ONNX model")
    ap.add_argument("--batch", default="1,16,64", help="batch sizes, comma-separated (default 1,16,64)")
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated (default 1)")
    # the defaults of `policyc bench`, which the baseline is compared with
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed calls per row at least (default 1)")
    ap.add_argument("--min-calls", type=int, default=200, help="timed calls per row at least (default 200)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed calls before each row (default 50)")
    ap.add_argument("--csv", required=True, help="write the baseline here")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    args = ap.parse_args(argv)
    try:
        # before minutes of timing, not after
        if not Path(args.csv).resolve().parent.is_dir():
            raise BaselineError(f"cannot write '{args.csv}': its directory does not exist")
        if args.min_calls < 1 or args.warmup < 0 or not args.min_time >= 0:
            raise BaselineError("--min-calls must be >= 1, --warmup and --min-time >= 0")
        rows = measure(args, int_list(args.batch, "batch"), int_list(args.threads, "threads"))
        write_csv(args.csv, rows)
    except BaselineError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
