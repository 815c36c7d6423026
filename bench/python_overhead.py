#!/usr/bin/python3
"""The binding's own cost per call: a Policy call from Python against the C ABI call it makes, at
batch 1 (median of many calls each; the clock's own cost subtracted).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [MODEL.onnx] [--calls N]
"""
import argparse
import os
import time

import numpy as np

import policyc


def median_ns(f, calls):
    for _ in range(calls // 10):
        f()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        t0 = clock()
        f()
        samples.append(clock() - t0)
    samples.sort()
    return samples[len(samples) // 2]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=os.path.join(root, "examples", "models", "ppo_mlp.onnx"))
    parser.add_argument("--calls", type=int, default=50000)
    args = parser.parse_args()
    policy = policyc.compile(args.model)
    inputs = [np.zeros([1 if d is None else d for d in i["shape"]], i["dtype"]) for i in policy.inputs]
    clock = median_ns(lambda: None, args.calls)
    call = median_ns(lambda: policy(*inputs), args.calls) - clock
    abi = policy._abi_call_ns(tuple(inputs), args.calls)
    print("%s batch 1: Policy call %.2f us, C ABI run %.2f us, binding overhead %.2f us"
          % (policy.name, call / 1e3, abi / 1e3, (call - abi) / 1e3))


if __name__ == "__main__":
    main()
