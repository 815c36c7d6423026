#!/usr/bin/python3
"""Rollout benchmark: N vectorised CartPole environments (numpy) stepped by an MLP policy, once with
PyTorch eager and once with the same weights compiled by policyc; reports env-steps/s and the
speedup, and checks that both pick the same actions.

    PYTHONPATH=build/python /usr/bin/python3 examples/rollout/rollout.py [--envs 1,16] [--steps 20000]
"""
import argparse
import sys
import time

import numpy as np
import torch

import policyc


class CartPole:
    """Gym's CartPole-v1 dynamics for n environments at once (Euler integration, 500-step limit)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit, x_limit, max_steps = 12 * 2 * np.pi / 360, 2.4, 500

    def __init__(self, n, seed):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4)).astype(np.float32)
        self.steps = np.zeros(n, np.int64)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(action == 1, self.force_mag, -self.force_mag)
        cos, sin = np.cos(theta), np.sin(theta)
        total_mass = self.masspole + self.masscart
        pole_ml = self.masspole * self.length
        temp = (force + pole_ml * theta_dot**2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos**2 / total_mass))
        x_acc = temp - pole_ml * theta_acc * cos / total_mass
        self.state = np.stack([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                               theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc], axis=1).astype(np.float32)
        self.steps += 1
        done = ((np.abs(self.state[:, 0]) > self.x_limit) | (np.abs(self.state[:, 2]) > self.theta_limit)
                | (self.steps >= self.max_steps))
        if done.any():  # reset the finished environments
            self.state[done] = self.rng.uniform(-0.05, 0.05, (int(done.sum()), 4)).astype(np.float32)
            self.steps[done] = 0
        return self.state, np.ones(self.n, np.float32), done


def make_policy():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 2)).eval()


def rollout(act, envs, steps, seed=1):
    """Steps `envs` environments `steps` times with act(obs) -> actions; returns env-steps/s."""
    env = CartPole(envs, seed)
    obs = env.state
    start = time.perf_counter()
    for _ in range(steps):
        obs, _, _ = env.step(act(obs))
    return envs * steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="1,16", help="comma-separated numbers of environments per step")
    parser.add_argument("--steps", type=int, default=20000, help="steps per measurement")
    parser.add_argument("--threads", type=int, default=1, help="threads for both PyTorch and policyc")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = make_policy()
    compiled = policyc.from_torch(model, torch.zeros(1, 4), input_names=["obs"], output_names=["logits"],
                                  threads=args.threads)

    def torch_act(obs):
        with torch.no_grad():
            return model(torch.from_numpy(obs)).argmax(1).numpy()

    def policyc_act(obs):
        return compiled(obs)[0].argmax(1)

    # The same actions: both policies on the same observations, step by step.
    env = CartPole(64, 2)
    obs, disagree, close = env.state, 0, 0
    for _ in range(200):
        with torch.no_grad():
            ref = model(torch.from_numpy(obs)).numpy()
        got = compiled(obs)[0]
        close += int(np.abs(got - ref).max() <= 1e-5)
        tie = np.abs(ref[:, 0] - ref[:, 1]) < 1e-5  # a near-tie may go either way
        disagree += int(((ref.argmax(1) != got.argmax(1)) & ~tie).sum())
        obs, _, _ = env.step(ref.argmax(1))
    print("actions agree on 64 envs x 200 steps: %s (logits within 1e-5 at %d of 200 steps)"
          % ("yes" if disagree == 0 else "NO, %d differ" % disagree, close))

    print("%6s %16s %16s %8s" % ("envs", "torch steps/s", "policyc steps/s", "speedup"))
    for n in [int(v) for v in args.envs.split(",")]:
        rollout(torch_act, n, max(args.steps // 20, 10))  # warm-up
        rollout(policyc_act, n, max(args.steps // 20, 10))
        t = rollout(torch_act, n, args.steps)
        p = rollout(policyc_act, n, args.steps)
        print("%6d %16.0f %16.0f %7.2fx" % (n, t, p, p / t))
    return 0 if disagree == 0 and close == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
