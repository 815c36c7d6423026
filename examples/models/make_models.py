"""Build the example RL policy ONNX models in examples/models/ and their PyTorch reference data in tests/data/."""

# Run with Debian's python (it has torch 1.13, numpy and onnx 1.12):
#     /usr/bin/python3 examples/models/make_models.py
# Everything is deterministic: fixed seeds, CPU, one thread.

import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

from export_common import REPO, ResidualBlock, deterministic_torch, export_spec, make_inputs, write_manifest

MODEL_DIR = REPO / "examples" / "models"
DATA_DIR = REPO / "tests" / "data"
BATCHES = (1, 3)

# Every ONNX operator the compiler is expected to handle; the models below must cover all of them.
REQUIRED_OPS = sorted("""
Gemm MatMul Conv MaxPool AveragePool GlobalAveragePool BatchNormalization LayerNormalization
Add Sub Mul Div Pow Neg Abs Sqrt Exp Log Erf
Relu LeakyRelu Elu Selu Sigmoid HardSigmoid Tanh Softplus Clip Min Max
Where Equal Less Greater Not Softmax LogSoftmax ReduceMean ReduceSum ReduceMax ArgMax
Flatten Reshape Transpose Concat Split Slice Squeeze Unsqueeze Gather Pad Cast Identity Dropout
Shape Constant ConstantOfShape
""".split())


# --------------------------------------------------------------------------------------------
# Helpers that keep nodes torch.onnx would otherwise drop
# --------------------------------------------------------------------------------------------
class _Identity(torch.autograd.Function):
    """Identity that survives export as an ONNX Identity node (torch inlines clone/contiguous)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def symbolic(g, x):
        return g.op("Identity", x)


class _InferenceDropout(torch.autograd.Function):
    """Eval-mode dropout (a no-op) exported as an inference ONNX Dropout node with its ratio,
    as exporters of other frameworks emit it; torch.onnx itself strips eval-mode dropout."""

    @staticmethod
    def forward(ctx, x, p):
        return x.clone()

    @staticmethod
    def symbolic(g, x, p):
        ratio = g.op("Constant", value_t=torch.tensor(p, dtype=torch.float32))
        return g.op("Dropout", x, ratio, outputs=1)


class FeatureTap(nn.Module):
    def forward(self, x):
        return _Identity.apply(x)


class ExportedDropout(nn.Dropout):
    def forward(self, x):
        if self.training:
            return super().forward(x)
        return _InferenceDropout.apply(x, float(self.p))


# --------------------------------------------------------------------------------------------
# Reference models
# --------------------------------------------------------------------------------------------
class PPOMLP(nn.Module):
    """RLlib PPO default fully connected model (vf_share_layers=False): separate policy and value towers."""

    def __init__(self, obs_dim=17, n_out=12, hidden=256):
        super().__init__()
        self.pi_fc0 = nn.Linear(obs_dim, hidden)
        self.pi_fc1 = nn.Linear(hidden, hidden)
        self.pi_out = nn.Linear(hidden, n_out)
        self.vf_fc0 = nn.Linear(obs_dim, hidden)
        self.vf_fc1 = nn.Linear(hidden, hidden)
        self.vf_out = nn.Linear(hidden, 1)

    def forward(self, obs):
        pi = torch.tanh(self.pi_fc1(torch.tanh(self.pi_fc0(obs))))
        vf = torch.tanh(self.vf_fc1(torch.tanh(self.vf_fc0(obs))))
        return self.pi_out(pi), self.vf_out(vf)


class AtariCNN(nn.Module):
    """Nature-DQN / PPO Atari trunk on 4 stacked 84x84 frames with policy and value heads."""

    def __init__(self, n_actions=6):
        super().__init__()
        self.conv0 = nn.Conv2d(4, 32, 8, stride=4)
        self.conv1 = nn.Conv2d(32, 64, 4, stride=2)
        self.conv2 = nn.Conv2d(64, 64, 3, stride=1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64 * 7 * 7, 512)
        self.pi = nn.Linear(512, n_actions)
        self.vf = nn.Linear(512, 1)

    def forward(self, obs):
        x = F.relu(self.conv0(obs))
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.fc(self.flatten(x)))
        return self.pi(x), self.vf(x)


class ImpalaStack(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.res0 = ResidualBlock(out_ch)
        self.res1 = ResidualBlock(out_ch)

    def forward(self, x):
        return self.res1(self.res0(self.pool(self.conv(x))))


class ImpalaCNN(nn.Module):
    """IMPALA ResNet (Espeholt et al. 2018) as used for Procgen: 3 stacks of 16/32/32 channels."""

    def __init__(self, in_ch=3, n_actions=15):
        super().__init__()
        self.stack0 = ImpalaStack(in_ch, 16)
        self.stack1 = ImpalaStack(16, 32)
        self.stack2 = ImpalaStack(32, 32)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(32 * 8 * 8, 256)
        self.pi = nn.Linear(256, n_actions)
        self.vf = nn.Linear(256, 1)

    def forward(self, obs):
        x = self.stack2(self.stack1(self.stack0(obs)))
        x = F.relu(self.fc(self.flatten(F.relu(x))))
        return self.pi(x), self.vf(x)


# --------------------------------------------------------------------------------------------
# Operator-coverage models
# --------------------------------------------------------------------------------------------
class SACActor(nn.Module):
    """SAC Gaussian actor: LayerNorm + SiLU trunk, ELU/SELU layers with a hard-sigmoid observation
    gate, pre-tanh mean clamped, log-std soft-clamped with softplus (MBPO style), std = exp(log_std)."""

    def __init__(self, obs_dim=24, act_dim=6, hidden=128, min_log_std=-5.0, max_log_std=2.0):
        super().__init__()
        self.fc0 = nn.Linear(obs_dim, hidden)
        self.ln0 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.gate = nn.Linear(obs_dim, hidden)
        self.head = nn.Linear(hidden, 2 * act_dim)
        # head at the output scale of a trained policy, so the clamps are active on the reference inputs
        nn.init.normal_(self.head.weight, std=3.0)
        self.act_dim = act_dim
        self.min_log_std = min_log_std
        self.max_log_std = max_log_std

    def forward(self, obs):
        h = self.ln0(self.fc0(obs))
        h = h * torch.sigmoid(h)  # SiLU
        h = F.elu(self.fc1(h))
        h = F.selu(self.fc2(h)) * F.hardsigmoid(self.gate(obs))
        mean, log_std = torch.split(self.head(h), [self.act_dim, self.act_dim], dim=-1)
        mean = torch.clamp(mean, -5.0, 5.0)
        log_std = self.max_log_std - F.softplus(self.max_log_std - log_std)
        log_std = self.min_log_std + F.softplus(log_std - self.min_log_std)
        return mean, torch.exp(log_std)


class UInt8ConvBNDueling(nn.Module):
    """Dueling Q-network on raw uint8 pixels: TF-style SAME stem, Conv+BN (left unfused in the ONNX),
    depthwise dilated and grouped convs, GELU, average/max/global pooling, dueling head, greedy action."""

    def __init__(self, n_actions=6):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2)  # input padded (0,1,0,1) first: TF "SAME"
        self.bn0 = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)
        self.bn1 = nn.BatchNorm2d(16)
        self.gconv = nn.Conv2d(16, 32, 3, padding=1, groups=4, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.smooth = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=True)
        self.mpool = nn.MaxPool2d(2)
        self.down = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.drop = ExportedDropout(0.1)
        self.val = nn.Linear(32, 1)
        self.adv = nn.Linear(32, n_actions)
        nn.init.normal_(self.adv.weight, std=0.5)  # trained-policy scale: the greedy action depends on the image
        nn.init.zeros_(self.adv.bias)

    def forward(self, obs):
        x = obs.float() / 255.0
        x = F.pad(x, (0, 1, 0, 1))
        x = F.leaky_relu(self.bn0(self.stem(x)), 0.01)  # [B,16,16,16]
        x = F.gelu(self.bn1(self.dw(x)))
        x = F.relu(self.bn2(self.gconv(x)))  # [B,32,16,16]
        x = self.smooth(x)
        x = self.mpool(x)  # [B,32,8,8]
        x = self.down(x)  # [B,32,4,4]
        x = self.gap(x)
        x = x.view(x.size(0), -1)
        x = self.drop(x)
        v = self.val(x)
        a = self.adv(x)
        q = v + (a - a.mean(dim=1, keepdim=True))
        return q, q.argmax(dim=1)


class GoalAttentionPolicy(nn.Module):
    """Goal-conditioned discrete policy. obs = 4 entity-presence features + a 6-d position code,
    goal = 6-d target code. Hand-written LayerNorm, self-attention over 4 tokens with absent
    entities masked out, goal distance features, value clipped and zeroed once the goal is reached."""

    def __init__(self, obs_dim=10, goal_dim=6, n_actions=8, n_tok=4, d_tok=16):
        super().__init__()
        self.n_tok, self.d_tok = n_tok, d_tok
        self.embed = nn.Linear(obs_dim + goal_dim, n_tok * d_tok)
        self.ln_gamma = nn.Parameter(1.0 + 0.2 * torch.randn(n_tok * d_tok))
        self.ln_beta = nn.Parameter(0.1 * torch.randn(n_tok * d_tok))
        self.w_q = nn.Parameter(torch.randn(d_tok, d_tok) / d_tok ** 0.5)
        self.k = nn.Linear(d_tok, d_tok)
        self.v = nn.Linear(d_tok, d_tok)
        self.tap = FeatureTap()
        self.pi = nn.Linear(2 * d_tok + 1, n_actions)
        self.vf = nn.Linear(2 * d_tok + 1, 1)
        nn.init.normal_(self.pi.weight, std=1.0)  # trained-policy scale: peaked probs, value clip active
        nn.init.normal_(self.vf.weight, std=1.0)
        with torch.no_grad():  # value prior: 1 - log(1 + goal distance) + learned context term
            self.vf.weight[0, -1] = -1.0
            self.vf.bias.fill_(1.0)
        self.register_buffer("vf_min", torch.tensor([-0.5]))  # value range of the task's returns
        self.register_buffer("vf_max", torch.tensor([0.5]))
        self.register_buffer("temp_far", torch.tensor([2.0]))
        self.register_buffer("temp_near", torch.tensor([1.0]))
        self.register_buffer("masked_score", torch.tensor(-1e4))

    def forward(self, obs, goal):
        h = self.embed(torch.cat([obs, goal], dim=1))
        mu = h.mean(dim=-1, keepdim=True)  # LayerNorm written out by hand
        d = h - mu
        var = d.pow(2).mean(dim=-1, keepdim=True)
        h = torch.tanh(d / torch.sqrt(var + 1e-5) * self.ln_gamma + self.ln_beta)
        tok = h.view(h.size(0), self.n_tok, self.d_tok)
        q = torch.matmul(tok, self.w_q)
        k = self.k(tok)
        v = self.v(tok)
        scores = torch.matmul(q, k.transpose(1, 2)) / self.d_tok ** 0.5
        present = ~(obs[:, 0:self.n_tok].abs() < 0.2)  # entity feature ~0 means absent
        scores = torch.where(present.unsqueeze(1), scores, self.masked_score)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)  # [B,4,16]
        pos = obs[:, self.n_tok:]
        dist = torch.sqrt((pos - goal).pow(2).sum(dim=-1, keepdim=True))
        feat = torch.cat([ctx[:, 0], ctx.amax(dim=1), torch.log(dist + 1.0)], dim=1)
        feat = self.tap(feat)
        temp = torch.where(dist > 3.0, self.temp_far, self.temp_near)  # softer policy far from goal
        logits = self.pi(feat) / temp
        probs = torch.softmax(logits, dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
        entropy = -(probs * logp).sum(dim=-1)
        vf = self.vf(feat).squeeze(-1)
        vf = torch.minimum(torch.maximum(vf, self.vf_min), self.vf_max)
        at_goal = pos.argmax(dim=-1) == goal.argmax(dim=-1)
        vf = torch.where(at_goal, torch.zeros_like(vf), vf)
        return probs, logp, vf, entropy


# --------------------------------------------------------------------------------------------
# Model table
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def init_norms(model, gen, calib_inputs):
    """Non-trivial norm parameters, so that folding them actually matters: random LayerNorm/BatchNorm
    affine weights, and BatchNorm running statistics measured on a calibration batch (as after
    training) rather than the 0/1 defaults. The module is left in eval mode."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in model.modules():
        if isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)):
            n = m.weight.numel()
            m.weight.copy_(1.0 + 0.25 * torch.randn(n, generator=gen).view_as(m.weight))
            m.bias.copy_(0.1 * torch.randn(n, generator=gen).view_as(m.bias))
    model.eval()
    if bns:
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the calibration batch
            bn.train()
        model(*calib_inputs)
        for bn in bns:
            bn.momentum = 0.1
            bn.eval()


def _goal_inputs(arrs, batch, rng):
    """Let every mask take both values: absent entities (|x| < 0.2) in row 0 and in row 2 of the b3
    batch, and row 1 of the b3 batch sitting on its goal (value forced to 0)."""
    obs, goal = arrs["obs"], arrs["goal"]
    obs[0, 2] = 0.05  # entity 2 absent in row 0
    if batch >= 3:
        goal[1] = obs[1, 4:] + rng.normal(0, 0.01, size=6).astype(np.float32)  # row 1 at the goal
        assert np.argmax(goal[1]) == np.argmax(obs[1, 4:])
        obs[2, 0:2] = [0.1, -0.15]  # two absent entities in row 2
    return arrs


MODELS = [
    dict(name="ppo_mlp", cls=PPOMLP, opset=13,
         inputs=[("obs", "float32", [17])], outputs=["action_dist_inputs", "vf"]),
    dict(name="atari_cnn", cls=AtariCNN, opset=13,
         inputs=[("obs", "float32", [4, 84, 84])], outputs=["logits", "vf"]),
    dict(name="impala_cnn", cls=ImpalaCNN, opset=13,
         inputs=[("obs", "float32", [3, 64, 64])], outputs=["logits", "vf"]),
    dict(name="sac_actor", cls=SACActor, opset=17,
         inputs=[("obs", "float32", [24])], outputs=["mean", "std"]),
    # Exported in PRESERVE training mode with the module in eval(): the BNs stay real inference
    # BatchNormalization nodes instead of being folded into the Convs by torch's eval peephole.
    # torch skips constant folding in this mode, so F.pad's pads arrive as a small constant int64
    # sub-graph (ConstantOfShape/Concat/Reshape/Slice/Transpose/Reshape/Cast) for the compiler to fold.
    dict(name="uint8_convbn", cls=UInt8ConvBNDueling, opset=13,
         inputs=[("obs", "uint8", [3, 32, 32])], outputs=["q", "action"],
         training=torch.onnx.TrainingMode.PRESERVE, fuse_pad_avgpool=True),
    dict(name="multi_input", cls=GoalAttentionPolicy, opset=13,
         inputs=[("obs", "float32", [10]), ("goal", "float32", [6])],
         outputs=["probs", "logp", "vf", "entropy"], tweak_inputs=_goal_inputs),
]


# --------------------------------------------------------------------------------------------
# ONNX post-processing
# --------------------------------------------------------------------------------------------
def _const_value(graph, name):
    for init in graph.initializer:
        if init.name == name:
            return onnx.numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return onnx.numpy_helper.to_array(node.attribute[0].t)
    return None


def fuse_pad_avgpool(model):
    """torch exports AvgPool2d(count_include_pad=True, padding=p) as Pad(zeros) -> AveragePool(pads=0).
    Rewrite that pair into the equivalent single AveragePool(pads=p, count_include_pad=1)."""
    g = model.graph
    producers = {o: n for n in g.node for o in n.output}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    graph_outputs = {o.name for o in g.output}
    fused = 0
    for pool in list(g.node):
        if pool.op_type != "AveragePool":
            continue
        pad = producers.get(pool.input[0])
        if pad is None or pad.op_type != "Pad" or len(consumers[pad.output[0]]) != 1:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in pad.attribute}
        if attrs.get("mode", b"constant") not in (b"constant", "constant"):
            continue
        pads = _const_value(g, pad.input[1])
        value = _const_value(g, pad.input[2]) if len(pad.input) > 2 and pad.input[2] else np.zeros(())
        if pads is None or value is None or float(value) != 0.0 or pad.output[0] in graph_outputs:
            continue
        pads = [int(p) for p in pads]
        rank = len(pads) // 2
        begins, ends = pads[:rank], pads[rank:]
        if any(begins[:2]) or any(ends[:2]) or min(pads) < 0:
            continue
        pool_attrs = {a.name: a for a in pool.attribute}
        old_pads = onnx.helper.get_attribute_value(pool_attrs["pads"]) if "pads" in pool_attrs else [0] * (2 * (rank - 2))
        if any(old_pads) or onnx.helper.get_attribute_value(pool_attrs.get("auto_pad", onnx.helper.make_attribute("auto_pad", "NOTSET"))) not in (b"NOTSET", "NOTSET"):
            continue
        new_pads = begins[2:] + ends[2:]
        for name in ("pads", "count_include_pad"):
            if name in pool_attrs:
                pool.attribute.remove(pool_attrs[name])
        pool.attribute.extend([onnx.helper.make_attribute("pads", new_pads),
                               onnx.helper.make_attribute("count_include_pad", 1)])
        pool.input[0] = pad.input[0]
        g.node.remove(pad)
        fused += 1
    # drop constants / initializers nobody reads any more
    used = {i for n in g.node for i in n.input} | graph_outputs
    for n in list(g.node):
        if n.op_type == "Constant" and n.output[0] not in used:
            g.node.remove(n)
    for init in list(g.initializer):
        if init.name not in used:
            g.initializer.remove(init)
    return fused


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def _postprocess(spec, onnx_model):
    """Graph rewrites applied to the exported model before it is saved (see fuse_pad_avgpool)."""
    if spec.get("fuse_pad_avgpool"):
        n_fused = fuse_pad_avgpool(onnx_model)
        assert n_fused > 0, f"{spec['name']}: expected a Pad->AveragePool pair to fuse"


def _check_outputs(spec, batch, outs):
    """Checks on the PyTorch outputs of each reference batch, by output name."""
    if spec["name"] == "uint8_convbn":  # greedy action must not hinge on rounding
        q = np.sort(outs["q"], axis=1)
        assert np.all(q[:, -1] - q[:, -2] > 1e-3), "argmax too close to a tie; change the seed"


def main():
    deterministic_torch(MODEL_DIR, DATA_DIR)
    entries = []
    per_model_ops = {}
    sizes = {}

    for idx, spec in enumerate(MODELS):
        name = spec["name"]
        torch.manual_seed(1000 + idx)
        model = spec["cls"]()
        calib = make_inputs(spec, 64, tag="calibration")
        init_norms(model, torch.Generator().manual_seed(2000 + idx),
                   [torch.from_numpy(calib[n]) for n, _, _ in spec["inputs"]])
        entry, files = export_spec(spec, model, MODEL_DIR, DATA_DIR, BATCHES,
                                   postprocess=_postprocess, check=_check_outputs)
        entries.append(entry)
        per_model_ops[name] = entry["ops"]
        sizes.update(files)

    sizes["tests/data/manifest.json"] = write_manifest(DATA_DIR / "manifest.json", "examples/models/make_models.py",
                                                       BATCHES, entries)

    # --- report ---------------------------------------------------------------------------------
    print("ONNX op types per model:")
    for name, ops in per_model_ops.items():
        spec = next(s for s in MODELS if s["name"] == name)
        print(f"  {name} (opset {spec['opset']}): {' '.join(ops)}")
    union = sorted(set().union(*per_model_ops.values()))
    print(f"union ({len(union)}): {' '.join(union)}")
    missing = [op for op in REQUIRED_OPS if op not in union]
    extra = [op for op in union if op not in REQUIRED_OPS]
    print("required ops not covered:", " ".join(missing) if missing else "none")
    if extra:
        print("ops outside the required list:", " ".join(extra))
    print("file sizes:")
    for name, spec in ((s["name"], s) for s in MODELS):
        p = f"examples/models/{name}.onnx"
        data = sum(v for k, v in sizes.items() if k.startswith(f"tests/data/{name}/"))
        print(f"  {name:14s} onnx {sizes[p] / 1024:9.1f} KiB   reference data {data / 1024:7.1f} KiB")
    print(f"  total {sum(sizes.values()) / 1024 / 1024:.2f} MiB in {len(sizes)} files")
    if missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
