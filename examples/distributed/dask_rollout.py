#!/usr/bin/python3
"""Distributed rollouts on Dask: a learner compiles its policy once, scatters it to the workers,
and every iteration sends only new weights (Policy.set_weights on each worker); the workers step
vectorised CartPoles (examples/rollout) and return trajectories; the learner takes a REINFORCE
step on them in PyTorch. Reports env-steps/s for 1 and 2 workers, the weight broadcast time, and
the same loop with the PyTorch policy pickled to the workers instead.

    PYTHONPATH=build/python /usr/bin/python3 examples/distributed/dask_rollout.py [--iterations 8]
    ... --scheduler tcp://HOST:8786     # workers started with `dask scheduler` / `dask worker` (see README)
    ... --kill-worker                   # a worker dies mid-rollout: Dask reruns its rollout elsewhere

Checks on every iteration that each worker's actions are the learner's for the same observations
(the learner recomputes the logits in PyTorch); exits 1 if they ever differ.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch

import policyc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rollout"))
import rollout as cartpole  # noqa: E402  (examples/rollout: CartPole, make_policy)


# ---- what runs on the workers (pickled by value: a worker needs only policyc, numpy and torch)

def run_rollout(policy, weights, version, seed, envs, steps, crash_marker=None):
    """Steps `envs` CartPoles `steps` times with `policy` (set to `weights` first unless it already
    has that version); actions are sampled by Gumbel-max on the logits. Returns the trajectory,
    the noise that chose each action (so the learner can check it), and where and how fast it ran.
    With crash_marker: the first attempt (the marker file absent) creates it and kills this worker
    halfway through, as a machine failing mid-rollout would."""
    from distributed import get_worker

    # Which weights this worker's copy of the policy has (a worker keeps a scattered policy in
    # memory). The entry holds the policy too, so that its id is not reused by a later one.
    versions = get_worker().__dict__.setdefault("policy_weight_versions", {})
    if versions.get(id(policy), (None, None))[1] != version:
        if isinstance(policy, torch.nn.Module):
            policy.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        else:
            policy.set_weights(weights)
        versions[id(policy)] = (policy, version)
    if isinstance(policy, torch.nn.Module):
        torch.set_num_threads(1)

        def logits_of(obs):
            with torch.no_grad():
                return policy(torch.from_numpy(obs)).numpy()
    else:
        def logits_of(obs):
            return policy(obs)[0]

    env = cartpole.CartPole(envs, seed)
    rng = np.random.default_rng(seed + 1)
    obs_t, act_t, rew_t, done_t, noise_t = [], [], [], [], []
    obs = env.state
    start = time.perf_counter()
    for step in range(steps):
        if crash_marker and step == steps // 2 and not os.path.exists(crash_marker):
            open(crash_marker, "w").close()
            os._exit(1)  # the worker process dies; its nanny starts a new one
        noise = rng.gumbel(size=(envs, 2)).astype(np.float32)
        action = (logits_of(obs) + noise).argmax(1)
        obs_t.append(obs)
        act_t.append(action)
        noise_t.append(noise)
        obs, reward, done = env.step(action)
        rew_t.append(reward)
        done_t.append(done)
    seconds = time.perf_counter() - start
    return {"obs": np.stack(obs_t), "actions": np.stack(act_t), "rewards": np.stack(rew_t), "dones": np.stack(done_t),
            "noise": np.stack(noise_t), "seconds": seconds, "worker": get_worker().address, "pid": os.getpid()}


# ---- the learner

def reinforce_step(model, optimiser, batches, gamma=0.99):
    """One REINFORCE update (returns-to-go, a mean baseline) on the workers' trajectories."""
    obs, actions, returns = [], [], []
    for b in batches:
        g = np.zeros(b["rewards"].shape[1], np.float32)
        ret = np.zeros_like(b["rewards"])
        for t in range(len(b["rewards"]) - 1, -1, -1):
            g = b["rewards"][t] + gamma * g * (1.0 - b["dones"][t])
            ret[t] = g
        obs.append(b["obs"].reshape(-1, 4))
        actions.append(b["actions"].reshape(-1))
        returns.append(ret.reshape(-1))
    obs, actions, returns = (torch.from_numpy(np.concatenate(x)) for x in (obs, actions, returns))
    advantage = (returns - returns.mean()) / (returns.std() + 1e-6)
    logp = torch.log_softmax(model(obs), dim=1).gather(1, actions.long().unsqueeze(1)).squeeze(1)
    loss = -(logp * advantage).mean()
    optimiser.zero_grad()
    loss.backward()
    optimiser.step()


def disagreements(model, batch):
    """Actions of a worker's trajectory that the learner's own logits (PyTorch) with the same
    noise would not have chosen; near-ties (within 1e-4) may go either way."""
    obs = batch["obs"].reshape(-1, 4)
    with torch.no_grad():
        logits = model(torch.from_numpy(obs)).numpy()
    scores = logits + batch["noise"].reshape(-1, 2)
    tie = np.abs(scores[:, 0] - scores[:, 1]) < 1e-4
    return int(((scores.argmax(1) != batch["actions"].reshape(-1)) & ~tie).sum())


def weights_of(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def local_cluster(n_workers):
    """A LocalCluster of `n_workers` single-thread process workers whose scheduler keeps every
    replica of the broadcast policy and weights: its active memory manager (on by default) would
    drop all but one, so that most rollouts fetch the policy from a peer and a dying worker can
    take the only copy with it."""
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None)


def gather_rollouts(client, futures, submit, policy, remote, weights, attempts=3):
    """The rollouts' results, in order. A rollout is cancelled when data it needed was lost with a
    worker that died (the only replica left, as a scheduler with its active memory manager on
    keeps one): scatter the policy and the weights again to the workers alive and resubmit it.
    Returns (results, the future of the policy that the next iterations should use)."""
    from concurrent.futures import CancelledError

    from distributed import wait

    results = [None] * len(futures)
    for _ in range(attempts):
        while True:  # until every future is done or cancelled (wait raises at the first cancelled one)
            try:
                wait([f for f in futures if f.status != "cancelled"])
                break
            except CancelledError:
                pass
        lost = [w for w, f in enumerate(futures) if f.status == "cancelled"]
        for w, f in enumerate(futures):
            if w not in lost and results[w] is None:
                results[w] = f.result()  # raises what the task raised
        if not lost:
            return results, remote
        client.wait_for_workers(len(futures))
        alive = sorted(client.scheduler_info()["workers"])
        print("  rollout(s) %s lost their data with a dead worker; scattering the policy and weights again"
              % ", ".join(map(str, lost)))
        remote = client.scatter(policy, broadcast=True, workers=alive)
        [again] = client.scatter([weights], broadcast=True, workers=alive, hash=False)
        for w in lost:
            futures[w] = submit(w, remote, again)
    raise RuntimeError("rollouts %s were lost %d times in a row" % (lost, attempts))


def run_loop(client, model, policy, workers, args, label, crash_dir=None):
    """`args.iterations` iterations of: broadcast the weights, one rollout per worker, one update.
    Returns (env-steps/s of the rollouts, median broadcast ms, disagreements, reruns seen)."""
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    remote = client.scatter(policy, broadcast=True, workers=workers)
    steps_total, seconds_total, broadcast_ms, bad, reruns = 0, 0.0, [], 0, 0
    for it in range(args.iterations):
        # A worker that died was replaced by its nanny under a new address (it fetches the
        # policy from a peer when a task needs it).
        client.wait_for_workers(len(workers))
        alive = set(client.scheduler_info()["workers"])
        replaced = [w for w in workers if w not in alive]
        if replaced:
            fresh = sorted(alive - set(workers))
            workers = [w if w in alive else fresh.pop(0) for w in workers]
        if isinstance(policy, policyc.Policy):
            policy.set_weights(weights_of(model))  # the learner's own copy, for the check below
        start = time.perf_counter()
        # One future for the whole dict (a dict given to scatter becomes one future per key, named
        # by the key: the next iteration's weights would then be taken for data already there).
        current = weights_of(model)
        [weights] = client.scatter([current], broadcast=True, workers=workers, hash=False)
        broadcast_ms.append((time.perf_counter() - start) * 1e3)
        crash = None
        if crash_dir and it == 1:
            crash = os.path.join(crash_dir, "crash-%s-%d" % (label, it))

        def submit(w, remote, weights):
            return client.submit(run_rollout, remote, weights, it, 1000 * it + w, args.envs, args.steps,
                                 crash if w == 0 else None, workers=[workers[w]], allow_other_workers=True, pure=False)

        futures = [submit(w, remote, weights) for w in range(len(workers))]
        wall = time.perf_counter()
        batches, remote = gather_rollouts(client, futures, submit, policy, remote, current)
        wall = time.perf_counter() - wall
        for w, b in enumerate(batches):
            if b["worker"] != workers[w]:
                reruns += 1
                print("  iteration %d: worker %s died mid-rollout; Dask ran its rollout again on %s (pid %d)"
                      % (it, workers[w], b["worker"], b["pid"]))
            bad += disagreements(model, b)
        if it > 0:  # the first iteration pays for loading the policy on the workers
            steps_total += args.envs * args.steps * len(workers)
            seconds_total += wall
        reinforce_step(model, optimiser, batches)
    return steps_total / seconds_total, float(np.median(broadcast_ms)), bad, reruns


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--envs", type=int, default=16, help="environments per worker")
    parser.add_argument("--steps", type=int, default=5000, help="steps per rollout")
    parser.add_argument("--workers", default="1,2", help="worker counts to measure (a LocalCluster of process workers)")
    parser.add_argument("--scheduler", help="address of a running Dask scheduler (instead of a LocalCluster)")
    parser.add_argument("--kill-worker", action="store_true", help="kill one worker mid-rollout in iteration 1")
    parser.add_argument("--no-torch-baseline", action="store_true", help="skip the loop with the pickled PyTorch policy")
    args = parser.parse_args()

    import cloudpickle
    from distributed import Client

    cloudpickle.register_pickle_by_value(cartpole)  # workers need not find examples/rollout

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = cartpole.make_policy()
    policy = policyc.from_torch(model, torch.zeros(1, 4), input_names=["obs"], output_names=["logits"],
                                updatable_weights=True, target="x86-64-v3")
    missing = [w["name"] for w in policy.weights if w["name"] not in model.state_dict()]
    if missing:
        print("the exported weights are not named as the module's parameters: %s" % ", ".join(missing))
        return 1
    print("compiled %s: %d weights, %d bytes pickled" % (policy.name, len(policy.weights), len(policy.to_bytes())))

    counts = [int(n) for n in args.workers.split(",")]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="policyc-distributed-") as crash_dir:
        for n in counts:
            if args.scheduler:
                client = Client(args.scheduler)
                cluster = None
            else:
                cluster = local_cluster(n)
                client = Client(cluster)
            try:
                workers = sorted(client.scheduler_info()["workers"])[:n]
                torch.manual_seed(0)
                model = cartpole.make_policy()
                rate, bcast, bad, reruns = run_loop(client, model, policy, workers, args, "policyc-%d" % n,
                                                    crash_dir if args.kill_worker else None)
                print("policyc  %d worker%s: %9.0f env-steps/s, weight broadcast %.1f ms (median), actions %s%s"
                      % (n, "" if n == 1 else "s", rate, bcast, "agree" if bad == 0 else "DIFFER at %d steps" % bad,
                         ", %d rollout(s) rerun after a worker died" % reruns if reruns else ""))
                failed += bad
                if args.kill_worker and reruns == 0:
                    print("  no rollout was rerun although a worker was killed")
                    failed += 1
                if not args.no_torch_baseline:
                    torch.manual_seed(0)
                    model = cartpole.make_policy()
                    torch_rate, torch_bcast, bad, _ = run_loop(client, model, cartpole.make_policy(), workers, args,
                                                               "torch-%d" % n)
                    print("pytorch  %d worker%s: %9.0f env-steps/s, weight broadcast %.1f ms (median)"
                          % (n, "" if n == 1 else "s", torch_rate, torch_bcast))
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
