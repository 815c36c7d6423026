#!/usr/bin/python3
"""A recurrent policy end to end: an LSTM actor in PyTorch (nn.LSTM over one step, as recurrent RL
libraries run it), exported and compiled by policyc with the state as inputs and outputs, then a
rollout loop over vectorised CartPoles (examples/rollout) that carries the state from step to step
(zeroed where an episode ends). Checks that policyc picks PyTorch's actions and keeps PyTorch's
state at every step, and reports env-steps/s for both.

    PYTHONPATH=build/python /usr/bin/python3 examples/recurrent/recurrent.py [--envs 1,16] [--steps 5000]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import policyc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rollout"))
from rollout import CartPole  # noqa: E402


class LstmPolicy(torch.nn.Module):
    """obs -> tanh encoder -> LSTM of 32 (one step) -> logits; the state (h, c) in and out as [B, 32]."""

    def __init__(self, obs_dim=4, hidden=32, n_actions=2):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(obs_dim, 32), torch.nn.Tanh())
        self.lstm = torch.nn.LSTM(32, hidden)
        self.head = torch.nn.Linear(hidden, n_actions)

    def forward(self, obs, h, c):
        y, (h1, c1) = self.lstm(self.encoder(obs).unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))
        return self.head(y[0]), h1[0], c1[0]


def rollout(step, envs, steps, hidden, seed=1):
    """Steps `envs` CartPoles `steps` times with step(obs, h, c) -> (actions, h, c); the state is
    zeroed where an episode ended. Returns env-steps/s."""
    env = CartPole(envs, seed)
    obs = env.state
    h = np.zeros((envs, hidden), np.float32)
    c = np.zeros((envs, hidden), np.float32)
    start = time.perf_counter()
    for _ in range(steps):
        action, h, c = step(obs, h, c)
        obs, _, done = env.step(action)
        h[done] = 0
        c[done] = 0
    return envs * steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="1,16", help="comma-separated numbers of environments per step")
    parser.add_argument("--steps", type=int, default=5000, help="steps per measurement")
    parser.add_argument("--check-steps", type=int, default=200, help="steps of the PyTorch comparison")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LstmPolicy().eval()
    hidden = model.lstm.hidden_size
    example = (torch.zeros(1, 4), torch.zeros(1, hidden), torch.zeros(1, hidden))
    compiled = policyc.from_torch(model, example, input_names=["obs", "h", "c"], output_names=["logits", "h_out", "c_out"])
    print("compiled %s: inputs %s" % (compiled.name, ", ".join("%s %s" % (i["name"], i["shape"]) for i in compiled.inputs)))

    def torch_step(obs, h, c):
        with torch.no_grad():
            logits, h, c = model(torch.from_numpy(obs), torch.from_numpy(h), torch.from_numpy(c))
        return logits.numpy().argmax(1), h.numpy().copy(), c.numpy().copy()

    def policyc_step(obs, h, c):
        logits, h, c = compiled(obs, h, c)
        return logits.argmax(1), h, c

    # The same actions and state, step by step, on 64 environments (PyTorch's actions drive both).
    env = CartPole(64, 2)
    obs = env.state
    h = np.zeros((64, hidden), np.float32)
    c = np.zeros((64, hidden), np.float32)
    worst, disagree = 0.0, 0
    for _ in range(args.check_steps):
        with torch.no_grad():
            ref, rh, rc = (t.numpy() for t in model(torch.from_numpy(obs), torch.from_numpy(h), torch.from_numpy(c)))
        got, gh, gc = compiled(obs, h, c)
        worst = max(worst, float(np.abs(got - ref).max()), float(np.abs(gh - rh).max()), float(np.abs(gc - rc).max()))
        tie = np.abs(ref[:, 0] - ref[:, 1]) < 1e-5
        disagree += int(((ref.argmax(1) != got.argmax(1)) & ~tie).sum())
        obs, _, done = env.step(ref.argmax(1))
        h, c = rh.copy(), rc.copy()
        h[done] = 0
        c[done] = 0
    print("64 envs x %d steps: actions %s, logits and state within %.1e of PyTorch"
          % (args.check_steps, "agree" if disagree == 0 else "DIFFER at %d" % disagree, worst))

    print("%6s %16s %16s %8s" % ("envs", "torch steps/s", "policyc steps/s", "speedup"))
    for n in [int(v) for v in args.envs.split(",")]:
        rollout(torch_step, n, max(args.steps // 20, 10), hidden)  # warm-up
        rollout(policyc_step, n, max(args.steps // 20, 10), hidden)
        t = rollout(torch_step, n, args.steps, hidden)
        p = rollout(policyc_step, n, args.steps, hidden)
        print("%6d %16.0f %16.0f %7.2fx" % (n, t, p, p / t))
    return 0 if disagree == 0 and worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
