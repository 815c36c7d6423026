#!/usr/bin/python3
"""An attention policy end to end: a transformer over the last 8 observations in PyTorch
(nn.TransformerEncoder with a causal mask, as decision-transformer and TrXL-style actors are
written), exported and compiled by policyc, then a rollout loop over vectorised CartPoles
(examples/rollout) that keeps each environment's window of observations (cleared where an
episode ends). Checks that policyc picks PyTorch's actions with logits within 1e-5 at every step,
and reports env-steps/s for both.

    PYTHONPATH=build/python /usr/bin/python3 examples/attention/attention.py [--envs 1,16] [--steps 2000]
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

WINDOW = 8


class TransformerPolicy(torch.nn.Module):
    """[B, 8, 4] window -> linear embedding + positions -> 2 pre-norm encoder layers (d=32, 4 heads,
    GELU), causal mask -> LayerNorm of the last token -> action logits."""

    def __init__(self, obs_dim=4, d=32, heads=4, n_actions=2):
        super().__init__()
        self.embed = torch.nn.Linear(obs_dim, d)
        self.pos = torch.nn.Parameter(torch.randn(1, WINDOW, d) * 0.1)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)
        self.register_buffer("causal", torch.triu(torch.full((WINDOW, WINDOW), float("-inf")), 1))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, n_actions)

    def forward(self, window):
        x = self.encoder(self.embed(window) + self.pos, mask=self.causal)
        return self.head(self.norm(x[:, -1]))


class Windows:
    """Each environment's last WINDOW observations, oldest first; cleared to zeros on a reset."""

    def __init__(self, first_obs):
        self.data = np.zeros((first_obs.shape[0], WINDOW, first_obs.shape[1]), np.float32)
        self.data[:, -1] = first_obs

    def push(self, obs, done):
        self.data[:, :-1] = self.data[:, 1:]
        self.data[:, -1] = obs
        self.data[done, :-1] = 0


def rollout(act, envs, steps, seed=1):
    """Steps `envs` CartPoles `steps` times with act(windows) -> actions. Returns env-steps/s."""
    env = CartPole(envs, seed)
    win = Windows(env.state)
    start = time.perf_counter()
    for _ in range(steps):
        obs, _, done = env.step(act(win.data))
        win.push(obs, done)
    return envs * steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="1,16", help="comma-separated numbers of environments per step")
    parser.add_argument("--steps", type=int, default=2000, help="steps per measurement")
    parser.add_argument("--check-steps", type=int, default=200, help="steps of the PyTorch comparison")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TransformerPolicy().eval()
    compiled = policyc.from_torch(model, (torch.zeros(1, WINDOW, 4),), input_names=["window"],
                                  output_names=["logits"])
    print("compiled %s: inputs %s" % (compiled.name, ", ".join("%s %s" % (i["name"], i["shape"]) for i in compiled.inputs)))

    def torch_act(window):
        with torch.no_grad():
            return model(torch.from_numpy(window)).numpy().argmax(1)

    def policyc_act(window):
        return compiled(window)[0].argmax(1)

    # The same actions, step by step, on 64 environments (PyTorch's actions drive both).
    env = CartPole(64, 2)
    win = Windows(env.state)
    worst, disagree = 0.0, 0
    for _ in range(args.check_steps):
        with torch.no_grad():
            ref = model(torch.from_numpy(win.data)).numpy()
        got = compiled(win.data)[0]
        worst = max(worst, float(np.abs(got - ref).max()))
        tie = np.abs(ref[:, 0] - ref[:, 1]) < 1e-5
        disagree += int(((ref.argmax(1) != got.argmax(1)) & ~tie).sum())
        obs, _, done = env.step(ref.argmax(1))
        win.push(obs, done)
    print("64 envs x %d steps: actions %s, logits within %.1e of PyTorch"
          % (args.check_steps, "agree" if disagree == 0 else "DIFFER at %d" % disagree, worst))

    print("%6s %16s %16s %8s" % ("envs", "torch steps/s", "policyc steps/s", "speedup"))
    for n in [int(v) for v in args.envs.split(",")]:
        rollout(torch_act, n, max(args.steps // 20, 10))  # warm-up
        rollout(policyc_act, n, max(args.steps // 20, 10))
        t = rollout(torch_act, n, args.steps)
        p = rollout(policyc_act, n, args.steps)
        print("%6d %16.0f %16.0f %7.2fx" % (n, t, p, p / t))
    return 0 if disagree == 0 and worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
