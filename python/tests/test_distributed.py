"""examples/distributed on a LocalCluster of 2 process workers, short: the workers' actions are the
learner's for the same observations, a worker killed mid-rollout has its rollout rerun by Dask
(and the learner reports it), a half-written cache entry on the workers is never loaded, and a rollout
whose data was lost is resubmitted."""
import hashlib
import importlib.util
import json
import os
import struct
import sys
import tempfile
import types
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_example():
    spec = importlib.util.spec_from_file_location("distributed_example", os.path.join(ROOT, "examples", "distributed", "dask_rollout.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class DistributedRolloutTest(unittest.TestCase):
    def test_two_workers_a_killed_worker_and_a_half_written_cache_entry(self):
        import cloudpickle
        import torch
        from distributed import Client

        import policyc

        example = load_example()
        cloudpickle.register_pickle_by_value(example)
        cloudpickle.register_pickle_by_value(example.cartpole)
        with tempfile.TemporaryDirectory(prefix="policyc-distributed-test-") as tmp:
            os.environ["POLICYC_CACHE_DIR"] = os.path.join(tmp, "cache")  # the workers inherit it
            torch.manual_seed(0)
            model = example.cartpole.make_policy()
            policy = policyc.from_torch(model, torch.zeros(1, 4), input_names=["obs"], output_names=["logits"],
                                        updatable_weights=True, target="x86-64-v3")
            # Where a worker will put the policy's .so: plant half of it there, as a worker that
            # died while writing would have left it.
            data = policy.to_bytes()
            n = struct.unpack_from("<I", data, len(policyc._MAGIC))[0]
            header = json.loads(data[len(policyc._MAGIC) + 4:len(policyc._MAGIC) + 4 + n])
            so = data[len(policyc._MAGIC) + 4 + n:][:header["size"]]
            entry = os.path.join(os.environ["POLICYC_CACHE_DIR"], "loaded", "%s-%s.so" % (header["name"], header["sha256"][:32]))
            os.makedirs(os.path.dirname(entry))
            with open(entry, "wb") as f:
                f.write(so[:len(so) // 2])

            args = types.SimpleNamespace(iterations=3, envs=8, steps=300)
            with example.local_cluster(2) as cluster, Client(cluster) as client:
                workers = sorted(client.scheduler_info()["workers"])
                self.assertEqual(len(workers), 2)
                rate, broadcast_ms, bad, reruns = example.run_loop(client, model, policy, workers, args, "test",
                                                                   crash_dir=tmp)
                self.check_lost_rollouts_are_resubmitted(example, client)
            self.assertEqual(bad, 0, "worker actions differ from the learner's")
            self.assertGreaterEqual(reruns, 1, "the killed worker's rollout was not rerun elsewhere")
            self.assertGreater(rate, 0)
            with open(entry, "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).hexdigest(), header["sha256"], "the half-written entry stayed")
            # The learner's weights moved (REINFORCE steps) and its compiled copy followed them.
            obs = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
            with torch.no_grad():
                want = model(torch.from_numpy(obs)).numpy()
            policy.set_weights(example.weights_of(model))
            np.testing.assert_allclose(policy(obs)[0], want, rtol=1e-5, atol=1e-5)

    def check_lost_rollouts_are_resubmitted(self, example, client):
        """A rollout cancelled because its data went with a dead worker (here: cancelled by hand)
        is resubmitted with the policy and weights scattered again; the others are kept."""
        import time

        def task(policy, weights, w):
            time.sleep(0.5 if w == 1 else 0)
            return policy, float(weights["x"].sum()), w

        submitted = []

        def submit(w, remote, weights):
            submitted.append(w)
            return client.submit(task, remote, weights, w, pure=False)

        policy, weights = "p", {"x": np.arange(4, dtype=np.float32)}
        remote = client.scatter(policy, broadcast=True)
        [scattered] = client.scatter([weights], broadcast=True, hash=False)
        futures = [submit(w, remote, scattered) for w in range(2)]
        client.cancel(futures[1])
        results, new_remote = example.gather_rollouts(client, futures, submit, policy, remote, weights)
        self.assertEqual(results, [("p", 6.0, 0), ("p", 6.0, 1)])
        self.assertEqual(submitted, [0, 1, 1])
        self.assertEqual(new_remote.result(), policy)


if __name__ == "__main__":
    unittest.main()
