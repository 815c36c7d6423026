"""Tests of the Python binding (run by CTest with /usr/bin/python3 and PYTHONPATH=build/python)."""
import json
import os
import re
import tempfile
import threading
import unittest

import numpy as np

import policyc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PPO = os.path.join(ROOT, "examples", "models", "ppo_mlp.onnx")


def reference(name, batch):
    """The fixture's PyTorch inputs and outputs at a batch size (tests/data/manifest.json)."""
    with open(os.path.join(ROOT, "tests", "data", "manifest.json")) as f:
        manifest = json.load(f)
    model = next(m for m in manifest["models"] if m["name"] == name)
    ref = model["reference"][str(batch)]
    load = lambda d: {k: np.load(os.path.join(ROOT, v)) for k, v in d.items()}  # noqa: E731
    return load(ref["inputs"]), load(ref["outputs"])


class HostileInputTest(unittest.TestCase):
    """What a caller can hand the binding never crashes the interpreter (docs/security.md)."""

    @classmethod
    def setUpClass(cls):
        cls.policy = policyc.compile(PPO, backend="llvm")

    def test_huge_broadcast_views_are_errors_not_copies(self):
        huge = np.broadcast_to(np.zeros(17, np.float32), (2**40, 17))
        with self.assertRaisesRegex(ValueError, r"the batch may be at most 2147483647"):
            self.policy(huge)
        too_big_to_copy = np.broadcast_to(np.zeros(17, np.float32), (2**30, 17))
        with self.assertRaisesRegex(MemoryError, "cannot make a C-contiguous copy of input 'obs'"):
            self.policy(too_big_to_copy)

    def test_bad_threads_and_shapes(self):
        with self.assertRaisesRegex(ValueError, "threads must be between 1 and 1024, got 100000"):
            self.policy.threads = 100000
        with self.assertRaisesRegex(ValueError, r"expected f32\[batch,17\], got f32\[\]"):
            self.policy(np.float32(1.0))

    def test_truncated_and_foreign_files_are_value_errors(self):
        with tempfile.TemporaryDirectory() as d:
            with open(self.policy.path, "rb") as f:
                whole = f.read()
            cut = os.path.join(d, "cut.so")
            with open(cut, "wb") as f:
                f.write(whole[: len(whole) // 2])
            with self.assertRaisesRegex(ValueError, "is not a loadable shared object: truncated"):
                policyc.load(cut)
            fifo = os.path.join(d, "fifo.so")
            os.mkfifo(fifo)
            with self.assertRaisesRegex(ValueError, "not a regular file"):
                policyc.load(fifo)

    def test_hostile_model_names_stay_in_their_context(self):
        with tempfile.TemporaryDirectory() as d:
            marker = os.path.join(d, "PWNED")
            pir = os.path.join(d, "names.pir")
            name = "relu\\x0dstatic int x = std::system(\\x22touch " + marker + "\\x22);\\x0d//"
            with open(pir, "w") as f:
                f.write('graph g(%obs: f32[batch,4]) {\n  %"' + name + '" = relu(%obs) : f32[batch,4]\n'
                        '  return ("../out\\x0a"=%"' + name + '")\n}\n')
            p = policyc.compile(pir, backend="cpp")
            (y,) = p(np.ones((2, 4), np.float32))
            np.testing.assert_array_equal(y, np.ones((2, 4), np.float32))
            self.assertEqual(p.outputs[0]["name"], "../out\n")
            self.assertFalse(os.path.exists(marker))

    def test_weight_names_that_are_code_or_not_utf8_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            marker = os.path.join(d, "PWNED")
            pir = os.path.join(d, "weights.pir")
            name = 'w\\x22);std::system(\\x22touch ' + marker + '\\x22);//\\xff'
            with open(pir, "w") as f:
                f.write('graph g(%obs: f32[batch,4]) {\n  %"' + name + '" = param f32[4] [1, 2, 3, 4]\n'
                        '  %y = mul(%obs, %"' + name + '") : f32[batch,4]\n  return ("y\\xfe"=%y)\n}\n')
            for backend in ("cpp", "llvm"):
                p = policyc.compile(pir, backend=backend, updatable_weights=True)
                (key,) = p.get_weights()
                self.assertTrue(key.endswith("//\udcff"))  # the byte 0xff as a surrogate (PEP 383)
                self.assertEqual(p.weights[0]["name"], key)
                self.assertEqual(list(p.run_dict(obs=np.ones((1, 4), np.float32))), ["y\udcfe"])
                p.set_weights({key: np.full(4, 2.0, np.float32)})
                np.testing.assert_array_equal(p(np.ones((1, 4), np.float32))[0], np.full((1, 4), 2.0, np.float32))
            self.assertFalse(os.path.exists(marker))


class PolicyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.policy = policyc.compile(PPO)

    def test_call_matches_pytorch(self):
        inputs, outputs = reference("ppo_mlp", 3)
        logits, value = self.policy(inputs["obs"])
        np.testing.assert_allclose(logits, outputs["action_dist_inputs"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(value, outputs["vf"], rtol=1e-4, atol=1e-5)
        self.assertEqual(logits.dtype, np.float32)
        self.assertEqual(logits.shape, (3, 12))

    def test_signature(self):
        self.assertEqual(self.policy.inputs, [{"name": "obs", "dtype": "float32", "shape": (None, 17)}])
        self.assertEqual([o["name"] for o in self.policy.outputs], ["action_dist_inputs", "vf"])
        self.assertEqual(self.policy.name, "ppo_mlp")

    def test_dict_and_named_inputs(self):
        obs = np.random.default_rng(0).standard_normal((5, 17)).astype(np.float32)
        d = self.policy.run_dict(obs=obs)
        self.assertEqual(sorted(d), ["action_dist_inputs", "vf"])
        np.testing.assert_array_equal(d["action_dist_inputs"], self.policy(obs)[0])

    def test_load_the_compiled_file(self):
        again = policyc.load(self.policy.path)
        obs = np.ones((2, 17), np.float32)
        np.testing.assert_array_equal(again(obs)[1], self.policy(obs)[1])

    def test_contiguous_inputs_are_not_copied(self):
        obs = np.zeros((4, 17), np.float32)
        self.assertEqual(self.policy._input_addresses(obs), [obs.ctypes.data])
        strided = np.zeros((4, 34), np.float32)[:, ::2]  # not contiguous: one copy, same result
        self.assertNotEqual(self.policy._input_addresses(strided), [strided.ctypes.data])
        np.testing.assert_array_equal(self.policy(strided)[0], self.policy(np.ascontiguousarray(strided))[0])

    def test_batch_zero_and_large(self):
        self.assertEqual(self.policy(np.zeros((0, 17), np.float32))[0].shape, (0, 12))
        self.assertEqual(self.policy(np.zeros((4096, 17), np.float32))[1].shape, (4096, 1))

    def test_wrong_inputs_are_value_errors(self):
        with self.assertRaisesRegex(ValueError, r"input 'obs': expected f32\[batch,17\], got f32\[1,16\]"):
            self.policy(np.zeros((1, 16), np.float32))
        with self.assertRaisesRegex(ValueError, "expected dtype float32, got float64"):
            self.policy(np.zeros((1, 17)))
        with self.assertRaisesRegex(ValueError, "unknown input 'goal'"):
            self.policy(goal=np.zeros((1, 17), np.float32))
        with self.assertRaisesRegex(ValueError, "missing input 'obs'"):
            self.policy()
        with self.assertRaisesRegex(ValueError, "threads must be between 1 and 1024, got 0"):
            self.policy.threads = 0

    def test_compile_failures_are_runtime_errors(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "bad.onnx")
            with open(bad, "wb") as f:
                f.write(b"not a model")
            with self.assertRaisesRegex(RuntimeError, "bad.onnx"):
                policyc.compile(bad)
            old = os.environ.get("POLICYC_CXX")
            os.environ["POLICYC_CXX"] = "false"
            try:
                debug = os.path.join(tmp, "debug")
                with self.assertRaisesRegex(RuntimeError, re.escape("the C++ compiler failed") + ".*" + re.escape(debug)):
                    policyc.compile(PPO, backend="cpp", debug_dir=debug)
                self.assertTrue(os.path.exists(os.path.join(debug, "output_code.cpp")))
            finally:
                if old is None:
                    del os.environ["POLICYC_CXX"]
                else:
                    os.environ["POLICYC_CXX"] = old
        with self.assertRaisesRegex(ValueError, "mode must be 'default' or 'max-autotune'"):
            policyc.compile(PPO, mode="fastest")
        with self.assertRaisesRegex(ValueError, "not a loadable shared object: not an ELF file"):
            policyc.load(os.path.join(ROOT, "README.md"))

    def test_max_autotune_no_extern_cpp_and_unfused_agree_with_the_default(self):
        obs = np.random.default_rng(3).standard_normal((5, 17)).astype(np.float32)
        want = policyc.compile(PPO)(obs)
        with tempfile.TemporaryDirectory() as debug:
            tuned = policyc.compile(PPO, mode="max-autotune", tune_batch=[1, 4], debug_dir=debug)
            self.assertIn("dispatch:", open(os.path.join(debug, "autotune.txt")).read())
            self.assertIn("backend llvm", open(os.path.join(debug, "autotune.txt")).read())
            self.assertTrue(os.path.exists(os.path.join(debug, "module.ll")))  # llvm tunes its own code
        with tempfile.TemporaryDirectory() as debug:
            default = policyc.compile(PPO, debug_dir=debug)
            self.assertTrue(os.path.exists(os.path.join(debug, "module.ll")))  # the default backend is llvm
        plain = policyc.compile(PPO, extern_kernels=False)
        cpp = policyc.compile(PPO, backend="cpp")
        unfused = policyc.compile(PPO, fuse=False)
        for got in (tuned(obs), plain(obs), cpp(obs), unfused(obs), default(obs)):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)

    def test_row_blocks_give_the_whole_batchs_bits(self):
        """row_block_bytes (docs/backend_cpp.md, row blocks): a CNN's batch of 9 in blocks of 4 rows, or whole."""
        cnn = os.path.join(ROOT, "examples", "zoo", "gap_cnn.onnx")
        obs = np.random.default_rng(5).random((9, 3, 48, 48)).astype(np.float32)
        blocks, whole = policyc.compile(cnn, row_block_bytes=1), policyc.compile(cnn, row_block_bytes=0)
        for b, w in zip(blocks(obs), whole(obs)):
            np.testing.assert_array_equal(b, w)
        with self.assertRaisesRegex(ValueError, "row_block_bytes must be 0 or more"):
            policyc.compile(cnn, row_block_bytes=-1)

    def test_bad_backend_names_are_value_errors(self):
        with self.assertRaisesRegex(ValueError, "use --no-fuse \\(Python: fuse=False\\)"):
            policyc.compile(PPO, backend="nofuse")
        with self.assertRaisesRegex(ValueError, r"unknown backend 'interp' \(valid: cpp, llvm\)"):
            policyc.compile(PPO, backend="interp")

    def test_two_python_threads_share_one_policy(self):
        rng = np.random.default_rng(1)
        cases = [rng.standard_normal((b, 17)).astype(np.float32) for b in (1, 7)]
        expected = [self.policy(x) for x in cases]
        wrong = []
        self.policy.threads = 2

        def work(i):
            for _ in range(2000):
                out = self.policy(cases[i])
                if not all(np.array_equal(a, b) for a, b in zip(out, expected[i])):
                    wrong.append(i)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.policy.threads = 1
        self.assertEqual(wrong, [])


    def test_fork_after_a_threaded_run(self):
        # A child of fork() (multiprocessing, DataLoader workers) has no copy of the model's worker
        # threads: its runs must start over with new ones, not wait for the old ones.
        x = np.random.default_rng(3).standard_normal((64, 17)).astype(np.float32)
        self.policy.threads = 2
        try:
            want = self.policy(x)
            pid = os.fork()
            if pid == 0:
                try:
                    ok = all(np.array_equal(a, b) for a, b in zip(self.policy(x), want))
                    os._exit(0 if ok else 1)
                except BaseException:
                    os._exit(2)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        finally:
            self.policy.threads = 1


class PrecisionTest(unittest.TestCase):
    """precision= and keep_fp32= (docs/precision.md) on the Atari CNN, whose 3136 x 512 layer is narrowed."""

    ATARI = os.path.join(ROOT, "examples", "models", "atari_cnn.onnx")

    def test_narrower_weights_a_smaller_object_and_close_outputs(self):
        obs = np.random.default_rng(1).random((8, 4, 84, 84)).astype(np.float32)
        fp32 = policyc.compile(self.ATARI)
        self.assertEqual(fp32.precision, "fp32")
        want = fp32(obs)
        sizes = {"fp32": os.path.getsize(fp32.path)}
        for precision in ("bf16-weights", "int8-weights"):
            p = policyc.compile(self.ATARI, precision=precision, backend="cpp")
            self.assertEqual(p.precision, precision)
            self.assertEqual(policyc.load(p.path).precision, precision)
            sizes[precision] = os.path.getsize(p.path)
            for g, w in zip(p(obs), want):
                self.assertFalse(np.array_equal(g, w))  # the weights really are narrower
                np.testing.assert_allclose(g, w, rtol=0, atol=0.05 * float(np.sqrt(np.mean(w * w))) + 1e-6)
        self.assertLess(sizes["bf16-weights"], 0.6 * sizes["fp32"])
        self.assertLess(sizes["int8-weights"], 0.65 * sizes["bf16-weights"])
        # Every layer kept (the convs narrowed where generated code runs them, not on oneDNN): the
        # fp32 results exactly.
        kept = policyc.compile(self.ATARI, precision="bf16-weights",
                               keep_fp32=["/fc/Gemm", "/conv0/Conv", "/conv1/Conv", "/conv2/Conv"])
        np.testing.assert_array_equal(kept(obs)[0], want[0])

    def test_bad_precisions_and_layer_names(self):
        with self.assertRaisesRegex(ValueError, "unknown precision 'fp8'"):
            policyc.compile(self.ATARI, precision="fp8")
        with self.assertRaisesRegex(RuntimeError, "--keep-fp32: 'no_such_layer' names no linear or conv layer"):
            policyc.compile(self.ATARI, precision="int8-weights", keep_fp32=["no_such_layer"])


class ShippingTest(unittest.TestCase):
    """A compiled policy as bytes: pickle, to_bytes / load_bytes, and what a receiver checks."""

    @classmethod
    def setUpClass(cls):
        cls.policy = policyc.compile(PPO, threads=2)
        cls.obs = np.random.default_rng(3).standard_normal((5, 17)).astype(np.float32)

    def assertSameOutputs(self, a, b):
        for x, y in zip(a(self.obs), b(self.obs)):
            np.testing.assert_array_equal(x, y)  # the same code: bitwise

    def test_pickle_round_trip_in_this_and_another_process(self):
        import pickle
        import subprocess
        import sys
        data = pickle.dumps(self.policy)
        back = pickle.loads(data)
        self.assertEqual(back.threads, 2)
        self.assertEqual(back.target, self.policy.target)
        self.assertNotEqual(back.path, self.policy.path)  # the received copy, in the cache under its hash
        self.assertSameOutputs(self.policy, back)
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "p.pkl"), "wb") as f:
                f.write(data)
            np.save(os.path.join(tmp, "obs.npy"), self.obs)
            code = ("import pickle, sys, numpy as np; p = pickle.load(open(sys.argv[1] + '/p.pkl', 'rb')); "
                    "np.save(sys.argv[1] + '/out.npy', p(np.load(sys.argv[1] + '/obs.npy'))[0])")
            subprocess.run([sys.executable, "-c", code, tmp], check=True, env=dict(os.environ, POLICYC_CACHE_DIR=tmp + "/cache"))
            np.testing.assert_array_equal(np.load(os.path.join(tmp, "out.npy")), self.policy(self.obs)[0])

    def test_to_bytes_and_load_bytes(self):
        data = self.policy.to_bytes()
        back = policyc.load_bytes(data, threads=1)
        self.assertEqual(back.threads, 1)
        self.assertSameOutputs(self.policy, back)

    def test_damaged_or_foreign_bytes_are_errors_before_anything_loads(self):
        import struct
        data = self.policy.to_bytes()
        with self.assertRaisesRegex(ValueError, "not a compiled policy"):
            policyc.load_bytes(b"\x7fELF" + data[4:])
        with self.assertRaisesRegex(ValueError, "truncated"):
            policyc.load_bytes(data[:20])
        with self.assertRaisesRegex(ValueError, "does not match the size and SHA-256"):
            policyc.load_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        # A header that asks for an extension no CPU has: refused before the .so is written or loaded.
        n = struct.unpack_from("<I", data, 15)[0]
        header = json.loads(data[19:19 + n])
        # The extensions the policy really uses (this CPU has them all) and one that no CPU has.
        features = list(header["cpu_features"]) + ["no-such-extension"]
        for key, value, error, message in [
                ("cpu_features", features, RuntimeError, r"may use no-such-extension, which this CPU lacks.*x86-64-v3"),
                ("abi_version", 999, ValueError, "ABI version 999"),
                ("format", 7, ValueError, "format 7")]:
            changed = json.dumps(dict(header, **{key: value})).encode()
            forged = data[:15] + struct.pack("<I", len(changed)) + changed + data[19 + n:]
            with self.assertRaisesRegex(error, message):
                policyc.load_bytes(forged)

    def test_a_half_written_cache_entry_is_never_loaded(self):
        import hashlib
        import struct
        data = self.policy.to_bytes()
        n = struct.unpack_from("<I", data, 15)[0]
        digest = json.loads(data[19:19 + n])["sha256"]
        with tempfile.TemporaryDirectory() as cache:
            old = os.environ.get("POLICYC_CACHE_DIR")
            os.environ["POLICYC_CACHE_DIR"] = cache
            try:
                # What a writer that died mid-copy leaves at the entry's name: rewritten whole, then loaded.
                os.makedirs(os.path.join(cache, "loaded"))
                entry = os.path.join(cache, "loaded", "ppo_mlp-%s.so" % digest[:32])
                with open(entry, "wb") as f:
                    f.write(data[19 + n:19 + n + 1000])
                back = policyc.load_bytes(data)
                self.assertEqual(back.path, entry)
                with open(entry, "rb") as f:
                    self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
                self.assertSameOutputs(self.policy, back)
                self.assertEqual([f for f in os.listdir(os.path.dirname(entry)) if f.startswith(".incoming-")], [])
            finally:
                if old is None:
                    del os.environ["POLICYC_CACHE_DIR"]
                else:
                    os.environ["POLICYC_CACHE_DIR"] = old


class FromTorchTest(unittest.TestCase):
    def test_from_torch(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed for /usr/bin/python3 (apt install python3-torch)")
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
        policy = policyc.from_torch(net, torch.zeros(2, 6))
        x = np.random.default_rng(2).standard_normal((9, 6)).astype(np.float32)
        (got,) = policy(x)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        self.assertEqual(policy.inputs[0]["shape"], (None, 6))


class SetWeightsTest(unittest.TestCase):
    """Policy.set_weights / get_weights on a policy compiled with updatable_weights=True."""

    @classmethod
    def setUpClass(cls):
        cls.policy = policyc.compile(PPO, updatable_weights=True)
        cls.original = cls.policy.get_weights()
        rng = np.random.default_rng(4)
        cls.new = {k: (v * rng.uniform(0.5, 1.5, v.shape) + 0.01).astype(np.float32) for k, v in cls.original.items()}
        cls.obs = rng.standard_normal((5, 17)).astype(np.float32)

    def tearDown(self):
        self.policy.set_weights(self.original)

    def test_weights_describe_the_model_files_initializers(self):
        names = [w["name"] for w in self.policy.weights]
        self.assertEqual(sorted(names), sorted(self.original))
        for w in self.policy.weights:
            self.assertEqual(np.dtype(w["dtype"]), np.float32)
            self.assertEqual(tuple(w["shape"]), self.original[w["name"]].shape)

    def test_new_weights_give_what_a_fresh_compile_gives_bit_for_bit(self):
        import onnx
        from onnx import numpy_helper

        before = self.policy(self.obs)
        self.policy.set_weights(self.new)
        after = self.policy(self.obs)
        self.assertFalse(np.array_equal(before[0], after[0]))
        for k, v in self.policy.get_weights().items():
            np.testing.assert_array_equal(v, self.new[k])
        model = onnx.load(PPO)
        for init in model.graph.initializer:
            if init.name in self.new:
                init.CopyFrom(numpy_helper.from_array(self.new[init.name], init.name))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ppo_new.onnx")
            onnx.save(model, path)
            fresh = policyc.compile(path, updatable_weights=True)
            for a, b in zip(after, fresh(self.obs)):
                np.testing.assert_array_equal(a, b)
        self.policy.set_weights(self.original)
        for a, b in zip(before, self.policy(self.obs)):
            np.testing.assert_array_equal(a, b)

    def test_pickle_carries_the_current_weights(self):
        import pickle

        self.policy.set_weights(self.new)
        back = pickle.loads(pickle.dumps(self.policy))
        for a, b in zip(self.policy(self.obs), back(self.obs)):
            np.testing.assert_array_equal(a, b)
        data = bytearray(self.policy.to_bytes())
        data[-3] ^= 0x40  # inside the weights
        with self.assertRaisesRegex(ValueError, "its weights do not match"):
            policyc.load_bytes(bytes(data))

    def test_bad_weights_are_value_errors_that_change_nothing(self):
        before = self.policy(self.obs)
        name = next(iter(self.original))
        other = [k for k in self.original if self.original[k].shape != self.original[name].shape][0]
        cases = [({"no.such": self.new[name]}, "has no weight 'no.such'"),
                 ({name: self.new[name].astype(np.float64)}, "expected dtype float32, got float64"),
                 ({name: self.new[other]}, "weight '%s': expected f32\\[" % re.escape(name)),
                 ({name: "not numbers"}, "expected dtype float32"),
                 ({name: np.full_like(self.new[name], np.nan)}, "weights must be finite")]
        for given, message in cases:
            with self.assertRaisesRegex(ValueError, message):
                self.policy.set_weights(dict(given, **{other: self.new[other]}))
        for a, b in zip(before, self.policy(self.obs)):
            np.testing.assert_array_equal(a, b)
        fixed = policyc.compile(PPO)
        self.assertEqual(fixed.weights, [])
        with self.assertRaisesRegex(ValueError, "updatable_weights=True"):
            fixed.set_weights(self.new)


if __name__ == "__main__":
    unittest.main()
