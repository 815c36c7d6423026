"""Build the policy zoo in examples/zoo/ (RL policies shaped like the defaults of common RL libraries) and its PyTorch reference data in tests/data/zoo/."""

# Run with Debian's python (it has torch 1.13, numpy and onnx 1.12):
#     /usr/bin/python3 examples/zoo/make_zoo.py
# Everything is deterministic: fixed seeds, CPU, one thread. The weights are random (no training),
# but output heads are initialised at the scale of a trained policy so that clamps, squashing and
# greedy actions actually depend on the input instead of sitting at their untrained values.

import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# the export steps are shared with examples/models/make_models.py, which keeps them next to it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from export_common import REPO, ResidualBlock, deterministic_torch, export_spec, write_manifest  # noqa: E402

ZOO_DIR = REPO / "examples" / "zoo"
DATA_DIR = REPO / "tests" / "data" / "zoo"
BATCHES = (1, 3)
SQRT2 = math.sqrt(2.0)


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------
def ortho(layer, gain=SQRT2, bias=0.0):
    """SB3/CleanRL-style orthogonal init of a Linear/Conv layer."""
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.constant_(layer.bias, bias)
    return layer


def mlp(sizes, act, gain=SQRT2):
    """Linear+activation stack; `sizes` includes the input width. No activation after the last layer
    is added here: heads are separate modules, as in the libraries mirrored."""
    layers = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        layers += [ortho(nn.Linear(i, o), gain), act()]
    return nn.Sequential(*layers)


def head(i, o, std=1.0):
    """Output layer at trained-policy scale: N(0, std/sqrt(fan_in)) weights, small random bias."""
    layer = nn.Linear(i, o)
    nn.init.normal_(layer.weight, std=std / math.sqrt(i))
    nn.init.normal_(layer.bias, std=0.1)
    return layer


class RunningNorm(nn.Module):
    """Observation normalisation with frozen running statistics (VecNormalize, rl_games
    RunningMeanStd, Brax running_statistics, SimBa RSNorm): clip((x - mean) / sqrt(var + eps))."""

    def __init__(self, dim, clip=None, eps=1e-8):
        super().__init__()
        g = torch.Generator().manual_seed(dim * 7919)  # statistics "measured" on the task
        self.register_buffer("mean", 0.5 * torch.randn(dim, generator=g))
        self.register_buffer("var", torch.exp(0.5 * torch.randn(dim, generator=g)))
        self.clip, self.eps = clip, eps

    def forward(self, x):
        x = (x - self.mean) / torch.sqrt(self.var + self.eps)
        return x if self.clip is None else torch.clamp(x, -self.clip, self.clip)


class NatureCNN(nn.Module):
    """SB3 NatureCNN features extractor: uint8 pixels / 255, three convs, Linear to features_dim."""

    def __init__(self, in_ch, hw, features_dim):
        super().__init__()
        self.cnn = nn.Sequential(
            ortho(nn.Conv2d(in_ch, 32, 8, stride=4)), nn.ReLU(),
            ortho(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            ortho(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten())
        with torch.no_grad():
            n_flat = self.cnn(torch.zeros(1, in_ch, hw, hw)).shape[1]
        self.linear = nn.Sequential(ortho(nn.Linear(n_flat, features_dim)), nn.ReLU())

    def forward(self, obs):
        return self.linear(self.cnn(obs.float() / 255.0))


# --------------------------------------------------------------------------------------------
# MLP actor-critics
# --------------------------------------------------------------------------------------------
class SB3PPODiscrete(nn.Module):
    """SB3 PPO MlpPolicy (LunarLander-v2): separate 64x64 tanh policy and value networks, Categorical logits."""

    def __init__(self, obs_dim=8, n_actions=4):
        super().__init__()
        self.policy_net = mlp([obs_dim, 64, 64], nn.Tanh)
        self.value_net_body = mlp([obs_dim, 64, 64], nn.Tanh)
        self.action_net = head(64, n_actions, 2.0)
        self.value_net = head(64, 1)

    def forward(self, obs):
        return self.action_net(self.policy_net(obs)), self.value_net(self.value_net_body(obs))


class CleanRLPPOContinuous(nn.Module):
    """CleanRL ppo_continuous_action Agent (HalfCheetah): 64x64 tanh actor mean and critic, state-independent log-std."""

    def __init__(self, obs_dim=17, act_dim=6):
        super().__init__()
        self.critic = nn.Sequential(mlp([obs_dim, 64, 64], nn.Tanh), head(64, 1))
        self.actor_mean = nn.Sequential(mlp([obs_dim, 64, 64], nn.Tanh), head(64, act_dim))
        self.actor_logstd = nn.Parameter(torch.linspace(-1.0, 0.2, act_dim).unsqueeze(0))

    def forward(self, obs):
        mean = self.actor_mean(obs)
        # As CleanRL writes it: Expand of the [1,A] parameter to Shape(mean), a batch-sized value
        # made from a constant (the exported std does not depend on the observation).
        std = torch.exp(self.actor_logstd.expand_as(mean))
        return mean, std, self.critic(obs)


class RLlibPPOShared(nn.Module):
    """RLlib PPO FullyConnectedNetwork with fcnet_activation=relu, vf_share_layers=True (BipedalWalker):
    shared 256x256 ReLU trunk, action_dist_inputs = DiagGaussian mean and log-std, value [B]."""

    def __init__(self, obs_dim=24, act_dim=4):
        super().__init__()
        self.trunk = mlp([obs_dim, 256, 256], nn.ReLU)
        self.logits = head(256, 2 * act_dim)
        self.value_branch = head(256, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        return self.logits(h), self.value_branch(h).squeeze(1)


class BraxPPO(nn.Module):
    """Brax PPO defaults (Ant): running observation normalisation, 4x32 swish policy and 5x256 swish
    value networks, normal-tanh distribution: scale = softplus(raw) + 0.001, action = tanh(loc)."""

    def __init__(self, obs_dim=27, act_dim=8):
        super().__init__()
        self.norm = RunningNorm(obs_dim, clip=5.0)
        self.policy = nn.Sequential(mlp([obs_dim] + [32] * 4, nn.SiLU), head(32, 2 * act_dim))
        self.value = nn.Sequential(mlp([obs_dim] + [256] * 5, nn.SiLU), head(256, 1))
        self.act_dim = act_dim

    def forward(self, obs):
        x = self.norm(obs)
        loc, raw_scale = torch.split(self.policy(x), self.act_dim, dim=1)
        scale = F.softplus(raw_scale) + 0.001
        return torch.tanh(loc), loc, scale, self.value(x)


class RLGamesA2C(nn.Module):
    """rl_games A2C continuous (IsaacGymEnvs Ant): normalize_input with obs clipped to +-5, shared
    [256,128,64] ELU MLP, mu head, fixed sigma parameter broadcast as mu * 0 + sigma, value head."""

    def __init__(self, obs_dim=60, act_dim=8):
        super().__init__()
        self.running_mean_std = RunningNorm(obs_dim, clip=5.0, eps=1e-5)
        self.actor_mlp = mlp([obs_dim, 256, 128, 64], nn.ELU)
        self.mu = head(64, act_dim)
        self.sigma = nn.Parameter(torch.full((act_dim,), -0.5))
        self.value = head(64, 1)

    def forward(self, obs):
        h = self.actor_mlp(self.running_mean_std(obs))
        mu = self.mu(h)
        return mu, mu * 0.0 + self.sigma, self.value(h)


class WideMLP(nn.Module):
    """Wide deterministic actor: 2x1024 ReLU (the width of CrossQ/BRO-sized networks), tanh action."""

    def __init__(self, obs_dim=64, act_dim=16):
        super().__init__()
        self.net = mlp([obs_dim, 1024, 1024], nn.ReLU)
        self.mu = head(1024, act_dim)

    def forward(self, obs):
        return (torch.tanh(self.mu(self.net(obs))),)


class DeepMLP(nn.Module):
    """Deep actor-critic: 8 ReLU layers of 256 (net_arch=[256]*8), logits and value heads."""

    def __init__(self, obs_dim=32, n_actions=8):
        super().__init__()
        self.net = mlp([obs_dim] + [256] * 8, nn.ReLU)
        self.pi = head(256, n_actions, 2.0)
        self.vf = head(256, 1)

    def forward(self, obs):
        h = self.net(obs)
        return self.pi(h), self.vf(h)


# --------------------------------------------------------------------------------------------
# Value-based and categorical heads
# --------------------------------------------------------------------------------------------
class SB3DQN(nn.Module):
    """SB3 DQN QNetwork (CartPole-v1): 64x64 ReLU, Q-values and the greedy action."""

    def __init__(self, obs_dim=4, n_actions=2):
        super().__init__()
        self.q_net = nn.Sequential(mlp([obs_dim, 64, 64], nn.ReLU), head(64, n_actions, 2.0))

    def forward(self, obs):
        q = self.q_net(obs)
        return q, q.argmax(dim=1)


class RLlibDuelingDQN(nn.Module):
    """RLlib DQN defaults (dueling=True, hiddens=[256], fcnet [256,256] ReLU): Q = V + A - mean(A)."""

    def __init__(self, obs_dim=8, n_actions=4):
        super().__init__()
        self.trunk = mlp([obs_dim, 256, 256], nn.ReLU)
        self.advantage = nn.Sequential(mlp([256, 256], nn.ReLU), head(256, n_actions, 2.0))
        self.state_value = nn.Sequential(mlp([256, 256], nn.ReLU), head(256, 1))

    def forward(self, obs):
        h = self.trunk(obs)
        a = self.advantage(h)
        q = self.state_value(h) + (a - a.mean(dim=1, keepdim=True))
        return q, q.argmax(dim=1)


class TianshouCategorical(nn.Module):
    """Tianshou discrete Actor (Net hidden_sizes=[128,128], ReLU, softmax_output): Categorical
    probabilities, log-probabilities, entropy and the greedy action."""

    def __init__(self, obs_dim=16, n_actions=6):
        super().__init__()
        self.preprocess = mlp([obs_dim, 128, 128], nn.ReLU)
        self.last = head(128, n_actions, 3.0)

    def forward(self, obs):
        logits = self.last(self.preprocess(obs))
        probs = torch.softmax(logits, dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
        entropy = -(probs * logp).sum(dim=-1)
        return probs, logp, entropy, logits.argmax(dim=-1)


class HybridActionPolicy(nn.Module):
    """Parameterised-action actor-critic (H-PPO / P-DQN style, Tuple(Discrete, Box) action space):
    shared 256x256 ReLU trunk, discrete action-type logits and greedy choice, tanh continuous
    parameters, value."""

    def __init__(self, obs_dim=20, n_types=5, n_params=3):
        super().__init__()
        self.trunk = mlp([obs_dim, 256, 256], nn.ReLU)
        self.type_head = head(256, n_types, 3.0)
        self.param_head = head(256, n_params, 2.0)
        self.vf = head(256, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        logits = self.type_head(h)
        return logits.argmax(dim=1), logits, torch.tanh(self.param_head(h)), self.vf(h)


# --------------------------------------------------------------------------------------------
# Off-policy continuous control
# --------------------------------------------------------------------------------------------
class SB3SACActor(nn.Module):
    """SB3 SAC Actor (HalfCheetah): 256x256 ReLU, mu and log_std heads, log_std clamped to [-20, 2],
    std = exp(log_std), deterministic action = tanh(mu)."""

    def __init__(self, obs_dim=17, act_dim=6):
        super().__init__()
        self.latent_pi = mlp([obs_dim, 256, 256], nn.ReLU)
        self.mu = head(256, act_dim, 2.0)
        self.log_std = head(256, act_dim, 4.0)  # wide enough that the upper clamp is hit
        nn.init.constant_(self.log_std.bias, 0.5)

    def forward(self, obs):
        h = self.latent_pi(obs)
        mu = self.mu(h)
        log_std = torch.clamp(self.log_std(h), -20.0, 2.0)
        return mu, torch.exp(log_std), torch.tanh(mu)


class TD3Actor(nn.Module):
    """TD3 actor (Fujimoto et al. 400x300 ReLU, Hopper) with CleanRL's action_scale/action_bias
    rescaling of the tanh output to asymmetric action bounds."""

    def __init__(self, obs_dim=11, act_dim=3):
        super().__init__()
        self.net = mlp([obs_dim, 400, 300], nn.ReLU)
        self.fc_mu = head(300, act_dim, 2.0)
        low, high = torch.tensor([-1.0, -0.5, 0.0]), torch.tensor([1.0, 1.5, 2.0])
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, obs):
        return (torch.tanh(self.fc_mu(self.net(obs))) * self.action_scale + self.action_bias,)


class SB3TwinQ(nn.Module):
    """SB3 SAC/TD3 ContinuousCritic with n_critics=2: cat(obs, action) into two 256x256 ReLU Q-networks,
    and the clipped double-Q target min(q1, q2)."""

    def __init__(self, obs_dim=17, act_dim=6):
        super().__init__()
        self.qf0 = nn.Sequential(mlp([obs_dim + act_dim, 256, 256], nn.ReLU), head(256, 1))
        self.qf1 = nn.Sequential(mlp([obs_dim + act_dim, 256, 256], nn.ReLU), head(256, 1))

    def forward(self, obs, action):
        x = torch.cat([obs, action], dim=1)
        q1, q2 = self.qf0(x), self.qf1(x)
        return q1, q2, torch.min(q1, q2)


# --------------------------------------------------------------------------------------------
# LayerNorm MLPs
# --------------------------------------------------------------------------------------------
class DreamerV3Actor(nn.Module):
    """DreamerV3 discrete actor on the RSSM state: cat(deter, flattened one-hot stoch) through
    3x [Linear(no bias) -> LayerNorm(eps 1e-3) -> SiLU] of 256, logits mixed with 1% uniform (unimix)."""

    def __init__(self, deter=128, stoch=64, n_actions=6, units=256, layers=3, unimix=0.01):
        super().__init__()
        blocks, width = [], deter + stoch
        for _ in range(layers):
            blocks += [nn.Linear(width, units, bias=False), nn.LayerNorm(units, eps=1e-3), nn.SiLU()]
            width = units
        self.mlp = nn.Sequential(*blocks)
        self.out = head(units, n_actions, 3.0)
        self.n_actions, self.unimix = n_actions, unimix

    def forward(self, deter, stoch):
        logits = self.out(self.mlp(torch.cat([deter, stoch], dim=1)))
        probs = (1.0 - self.unimix) * torch.softmax(logits, dim=-1) + self.unimix / self.n_actions
        return probs, probs.argmax(dim=-1)


class TDMPC2Policy(nn.Module):
    """TD-MPC2 encoder and policy prior: [Linear -> LayerNorm -> Mish] layers, latent SimNorm (softmax
    over groups of 8), squashed-Gaussian pi with log_std rescaled from tanh into [-10, 2]."""

    def __init__(self, obs_dim=39, act_dim=6, enc_dim=256, latent_dim=128, mlp_dim=256, simnorm_dim=8):
        super().__init__()
        self.enc0 = nn.Linear(obs_dim, enc_dim)
        self.enc0_ln = nn.LayerNorm(enc_dim)
        self.enc1 = nn.Linear(enc_dim, latent_dim)
        self.enc1_ln = nn.LayerNorm(latent_dim)
        self.pi0 = nn.Linear(latent_dim, mlp_dim)
        self.pi0_ln = nn.LayerNorm(mlp_dim)
        self.pi1 = nn.Linear(mlp_dim, mlp_dim)
        self.pi1_ln = nn.LayerNorm(mlp_dim)
        self.pi2 = head(mlp_dim, 2 * act_dim, 2.0)
        self.simnorm_dim, self.act_dim = simnorm_dim, act_dim
        self.log_std_min, self.log_std_max = -10.0, 2.0

    def simnorm(self, x):
        g = x.view(x.shape[0], -1, self.simnorm_dim)
        return torch.softmax(g, dim=-1).view(x.shape[0], -1)

    def forward(self, obs):
        z = F.mish(self.enc0_ln(self.enc0(obs)))
        z = self.simnorm(self.enc1_ln(self.enc1(z)))
        h = F.mish(self.pi0_ln(self.pi0(z)))
        h = F.mish(self.pi1_ln(self.pi1(h)))
        mu, log_std = torch.split(self.pi2(h), self.act_dim, dim=1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(log_std) + 1)
        return z, torch.tanh(mu), torch.exp(log_std)


class SimBaActor(nn.Module):
    """SimBa SAC actor (its defaults: 1 block of width 128): running-statistics obs norm, Linear embedding,
    pre-LayerNorm residual MLP block (x + W2 relu(W1 LN(x)), 4x expansion), post-LayerNorm, tanh-squashed Gaussian head."""

    def __init__(self, obs_dim=17, act_dim=6, width=128, blocks=1):
        super().__init__()
        self.norm = RunningNorm(obs_dim, eps=1e-8)
        self.embed = ortho(nn.Linear(obs_dim, width), 1.0)
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            self.blocks.append(nn.ModuleDict(dict(
                ln=nn.LayerNorm(width), fc1=ortho(nn.Linear(width, 4 * width)), fc2=ortho(nn.Linear(4 * width, width), 1.0))))
        self.post_ln = nn.LayerNorm(width)
        self.mean = head(width, act_dim, 2.0)
        self.log_std = head(width, act_dim, 2.0)
        self.act_dim = act_dim

    def forward(self, obs):
        x = self.embed(self.norm(obs))
        for b in self.blocks:
            x = x + b["fc2"](F.relu(b["fc1"](b["ln"](x))))
        x = self.post_ln(x)
        log_std = -10.0 + 0.5 * (2.0 + 10.0) * (torch.tanh(self.log_std(x)) + 1.0)
        return torch.tanh(self.mean(x)), torch.exp(log_std)


# --------------------------------------------------------------------------------------------
# Dict observations
# --------------------------------------------------------------------------------------------
class RLlibDictObs(nn.Module):
    """RLlib ComplexInputNetwork-style Dict policy: proprio [24], goal [3] and lidar [64] each through
    their own encoder, concatenated, a 256 ReLU post-FC layer, DiagGaussian inputs and value [B]."""

    def __init__(self, act_dim=2):
        super().__init__()
        self.proprio_enc = mlp([24, 64], nn.Tanh)
        self.goal_enc = mlp([3, 16], nn.Tanh)
        self.lidar_enc = mlp([64, 64, 32], nn.ReLU)
        self.post_fc = mlp([64 + 16 + 32, 256], nn.ReLU)
        self.logits = head(256, 2 * act_dim)
        self.value_branch = head(256, 1)

    def forward(self, proprio, goal, lidar):
        h = torch.cat([self.proprio_enc(proprio), self.goal_enc(goal), self.lidar_enc(lidar)], dim=1)
        h = self.post_fc(h)
        return self.logits(h), self.value_branch(h).squeeze(1)


class SB3MultiInput(nn.Module):
    """SB3 PPO MultiInputPolicy with CombinedExtractor: NatureCNN (256 features) on a uint8 3x36x36
    image, the 7-d vector flattened as is, concatenated into 64x64 tanh policy and value networks."""

    def __init__(self, n_actions=5):
        super().__init__()
        self.image_extractor = NatureCNN(3, 36, 256)
        self.policy_net = mlp([256 + 7, 64, 64], nn.Tanh)
        self.value_net_body = mlp([256 + 7, 64, 64], nn.Tanh)
        self.action_net = head(64, n_actions, 2.0)
        self.value_net = head(64, 1)

    def forward(self, image, vector):
        f = torch.cat([self.image_extractor(image), torch.flatten(vector, 1)], dim=1)
        return self.action_net(self.policy_net(f)), self.value_net(self.value_net_body(f))


# --------------------------------------------------------------------------------------------
# Convolutional encoders
# --------------------------------------------------------------------------------------------
class SB3NatureCNNPPO(nn.Module):
    """SB3 PPO CnnPolicy (Atari, 4 stacked 84x84 uint8 frames): NatureCNN with 512 features shared by
    the action and value heads."""

    def __init__(self, n_actions=6):
        super().__init__()
        self.features_extractor = NatureCNN(4, 84, 512)
        self.action_net = head(512, n_actions, 2.0)
        self.value_net = head(512, 1)

    def forward(self, obs):
        f = self.features_extractor(obs)
        return self.action_net(f), self.value_net(f)


class ConvSequence(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.res_block0 = ResidualBlock(out_ch)
        self.res_block1 = ResidualBlock(out_ch)

    def forward(self, x):
        x = F.max_pool2d(self.conv(x), 3, stride=2, padding=1)
        return self.res_block1(self.res_block0(x))


class CleanRLImpalaCNN(nn.Module):
    """CleanRL ppo_procgen Agent: uint8 NHWC 64x64x3 frames permuted to NCHW and scaled by 1/255,
    IMPALA stacks of 16/32/32 channels (conv, 3x3/2 max-pool, two residual blocks), 256 ReLU, heads."""

    def __init__(self, n_actions=15):
        super().__init__()
        self.seq0 = ConvSequence(3, 16)
        self.seq1 = ConvSequence(16, 32)
        self.seq2 = ConvSequence(32, 32)
        self.fc = nn.Linear(32 * 8 * 8, 256)
        self.actor = head(256, n_actions, 2.0)
        self.critic = head(256, 1)

    def forward(self, obs):
        x = obs.permute(0, 3, 1, 2) / 255.0
        x = self.seq2(self.seq1(self.seq0(x)))
        h = F.relu(self.fc(torch.flatten(F.relu(x), 1)))
        return self.actor(h), self.critic(h)


class GAPCNN(nn.Module):
    """All-convolutional encoder with global average pooling (resolution-independent custom extractor,
    e.g. for MiniGrid/Crafter-like 3x48x48 float observations): 3 strided convs, AdaptiveAvgPool2d(1)."""

    def __init__(self, n_actions=7):
        super().__init__()
        self.convs = nn.Sequential(
            ortho(nn.Conv2d(3, 32, 3, stride=2, padding=1)), nn.ReLU(),
            ortho(nn.Conv2d(32, 64, 3, stride=2, padding=1)), nn.ReLU(),
            ortho(nn.Conv2d(64, 64, 3, stride=2, padding=1)), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = mlp([64, 128], nn.ReLU)
        self.pi = head(128, n_actions, 2.0)
        self.vf = head(128, 1)

    def forward(self, obs):
        h = self.fc(torch.flatten(self.pool(self.convs(obs)), 1))
        return self.pi(h), self.vf(h)


class RMAAdaptation(nn.Module):
    """RMA adaptation module: a 50-step history of 30-d state-action vectors [B, 30, 50], per-step
    embedding (1x1 Conv1d), three temporal Conv1d layers (k8/s4, k5, k5), Linear to an 8-d extrinsics latent."""

    def __init__(self, ch=30, steps=50, latent=8):
        super().__init__()
        self.net = nn.Sequential(
            ortho(nn.Conv1d(ch, 32, 1)), nn.ReLU(),
            ortho(nn.Conv1d(32, 32, 8, stride=4)), nn.ReLU(),
            ortho(nn.Conv1d(32, 32, 5)), nn.ReLU(),
            ortho(nn.Conv1d(32, 32, 5)), nn.ReLU(),
            nn.Flatten())
        with torch.no_grad():
            n_flat = self.net(torch.zeros(1, ch, steps)).shape[1]
        self.out = head(n_flat, latent)

    def forward(self, history):
        return (self.out(self.net(history)),)


# --------------------------------------------------------------------------------------------
# Recurrent policies, one step with the state passed in and out
# --------------------------------------------------------------------------------------------
class SampleFactoryGRU(nn.Module):
    """Sample Factory default actor-critic (rnn_type=gru), one step: ELU MLP encoder, a GRU of 128,
    action logits, value and the new RNN state."""

    def __init__(self, obs_dim=16, hidden=128, n_actions=6):
        super().__init__()
        self.encoder = mlp([obs_dim, 128], nn.ELU)
        # nn.GRU over a sequence of one step, as Sample Factory runs it: exports as the ONNX GRU
        # operator with Unsqueeze before and Gather after it.
        self.core = nn.GRU(128, hidden)
        self.action_parameterization = head(hidden, n_actions, 2.0)
        self.critic_linear = head(hidden, 1)

    def forward(self, obs, rnn_state):
        _, h = self.core(self.encoder(obs).unsqueeze(0), rnn_state.unsqueeze(0))
        h = h[0]
        return self.action_parameterization(h), self.critic_linear(h), h


class SB3RecurrentPPO(nn.Module):
    """sb3-contrib RecurrentPPO MlpLstmPolicy (shared_lstm=True), one step: an LSTM of 128 on the raw
    observation, 64x64 tanh policy and value networks on its output, the new (h, c) state."""

    def __init__(self, obs_dim=8, hidden=128, n_actions=4):
        super().__init__()
        # nn.LSTM over a sequence of one step, as sb3-contrib runs it: exports as the ONNX LSTM
        # operator with Unsqueeze before and Gather after it.
        self.lstm_actor = nn.LSTM(obs_dim, hidden)
        self.policy_net = mlp([hidden, 64, 64], nn.Tanh)
        self.value_net_body = mlp([hidden, 64, 64], nn.Tanh)
        self.action_net = head(64, n_actions, 2.0)
        self.value_net = head(64, 1)

    def forward(self, obs, h, c):
        _, (h_out, c_out) = self.lstm_actor(obs.unsqueeze(0), (h.unsqueeze(0), c.unsqueeze(0)))
        h_out, c_out = h_out[0], c_out[0]
        return (self.action_net(self.policy_net(h_out)), self.value_net(self.value_net_body(h_out)),
                h_out, c_out)


# --------------------------------------------------------------------------------------------
# Attention policies over a window of the last observations
# --------------------------------------------------------------------------------------------
class TransformerWindow(nn.Module):
    """A transformer over the last 8 observations (decision-transformer / TrXL-style actors):
    linear token embedding plus a learned position embedding, nn.TransformerEncoder of 2 pre-norm
    layers (d=64, 4 heads, GELU feed-forward of 128) with a causal mask, a final LayerNorm, and the
    last token's features to action logits and a value."""

    def __init__(self, obs_dim=17, window=8, d=64, heads=4, n_actions=6):
        super().__init__()
        self.embed = nn.Linear(obs_dim, d)
        self.pos = nn.Parameter(torch.randn(1, window, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.register_buffer("causal", torch.triu(torch.full((window, window), float("-inf")), 1))
        self.norm = nn.LayerNorm(d)
        self.pi = head(d, n_actions, 2.0)
        self.vf = head(d, 1)

    def forward(self, obs_window):
        x = self.encoder(self.embed(obs_window) + self.pos, mask=self.causal)
        h = self.norm(x[:, -1])
        return self.pi(h), self.vf(h)


class EinsumAttention(nn.Module):
    """RLlib's attention-net style (GTrXL): multi-head attention written with torch.einsum over
    [batch, time, heads, dim], a lower-triangular mask from torch.tril, a GRU-style gate of the
    residual, and a tanh MLP head on the last step."""

    def __init__(self, obs_dim=12, window=8, d=32, heads=2, n_actions=4):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.inp = nn.Linear(obs_dim, d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("allowed", torch.tril(torch.ones(window, window)).bool())
        self.mlp = mlp([d, 64], nn.Tanh)
        self.logits = head(64, n_actions, 2.0)
        self.value = head(64, 1)

    def forward(self, obs_window):
        x = self.inp(obs_window)
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, self.dh).unbind(2)
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.dh)
        scores = scores.masked_fill(~self.allowed, float("-inf"))
        att = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v).reshape(b, t, -1)
        y = self.out(att)
        g = torch.sigmoid(self.gate(torch.cat([x, y], -1)))
        h = self.mlp((g * x + (1 - g) * y)[:, -1])
        return self.logits(h), self.value(h)


# --------------------------------------------------------------------------------------------
# Input tweaks: reference inputs shaped like what the policy sees in deployment
# --------------------------------------------------------------------------------------------
def _onehot_stoch(arrs, batch, rng):
    """DreamerV3's stoch is 8 one-hot categoricals of 8 classes, flattened."""
    idx = rng.integers(0, 8, size=(batch, 8))
    arrs["stoch"] = np.eye(8, dtype=np.float32)[idx].reshape(batch, 64)
    return arrs


def _bounded_state(*names):
    """Recurrent states live in (-1, 1) (GRU h, LSTM h) or a few units (LSTM c)."""
    def tweak(arrs, batch, rng):
        for n in names:
            arrs[n] = np.tanh(arrs[n]).astype(np.float32)
        return arrs
    return tweak


def _sac_actions(arrs, batch, rng):
    """Actions fed to the critic come out of a tanh: keep them in [-1, 1]."""
    arrs["action"] = np.tanh(arrs["action"]).astype(np.float32)
    return arrs


# --------------------------------------------------------------------------------------------
# Model table. "argmax_of" names the scores each int64 greedy output is taken from, so that the
# reference data can be checked for near-ties; "seed" overrides the default weight seed (5000 + index)
# where the default gave the same greedy action for every row of the batch-3 reference.
# --------------------------------------------------------------------------------------------
F32 = "float32"
U8 = "uint8"
MODELS = [
    dict(name="sb3_ppo_discrete", cls=SB3PPODiscrete, kind="mlp", opset=13,
         inputs=[("obs", F32, [8])], outputs=["logits", "value"]),
    dict(name="cleanrl_ppo_continuous", cls=CleanRLPPOContinuous, kind="mlp", opset=13,
         inputs=[("obs", F32, [17])], outputs=["mean", "std", "value"]),
    dict(name="rllib_ppo_relu256", cls=RLlibPPOShared, kind="mlp", opset=13,
         inputs=[("obs", F32, [24])], outputs=["action_dist_inputs", "vf"]),
    dict(name="brax_ppo_silu", cls=BraxPPO, kind="mlp", opset=13,
         inputs=[("obs", F32, [27])], outputs=["action", "loc", "scale", "value"]),
    dict(name="rlgames_a2c_elu", cls=RLGamesA2C, kind="mlp", opset=13,
         inputs=[("obs", F32, [60])], outputs=["mu", "sigma", "value"]),
    dict(name="wide_mlp", cls=WideMLP, kind="mlp", opset=13,
         inputs=[("obs", F32, [64])], outputs=["action"]),
    dict(name="deep_mlp", cls=DeepMLP, kind="mlp", opset=13,
         inputs=[("obs", F32, [32])], outputs=["logits", "value"]),
    dict(name="sb3_dqn", cls=SB3DQN, kind="dqn", opset=13,
         inputs=[("obs", F32, [4])], outputs=["q_values", "action"], argmax_of={"action": "q_values"}, seed=5107),
    dict(name="rllib_dueling_dqn", cls=RLlibDuelingDQN, kind="dqn", opset=13,
         inputs=[("obs", F32, [8])], outputs=["q_values", "action"], argmax_of={"action": "q_values"}, seed=5208),
    dict(name="tianshou_categorical", cls=TianshouCategorical, kind="categorical", opset=13,
         inputs=[("obs", F32, [16])], outputs=["probs", "logp", "entropy", "action"],
         argmax_of={"action": "logp"}),
    dict(name="hybrid_action", cls=HybridActionPolicy, kind="multi_head", opset=13,
         inputs=[("obs", F32, [20])], outputs=["action_type", "type_logits", "params", "value"],
         argmax_of={"action_type": "type_logits"}),
    dict(name="sb3_sac_actor", cls=SB3SACActor, kind="sac", opset=13,
         inputs=[("obs", F32, [17])], outputs=["mean", "std", "action"]),
    dict(name="td3_actor", cls=TD3Actor, kind="td3", opset=13,
         inputs=[("obs", F32, [11])], outputs=["action"]),
    dict(name="sb3_sac_twin_q", cls=SB3TwinQ, kind="critic", opset=13,
         inputs=[("obs", F32, [17]), ("action", F32, [6])], outputs=["q1", "q2", "min_q"],
         tweak_inputs=_sac_actions),
    dict(name="dreamerv3_actor", cls=DreamerV3Actor, kind="layernorm_mlp", opset=17,
         inputs=[("deter", F32, [128]), ("stoch", F32, [64])], outputs=["probs", "action"],
         argmax_of={"action": "probs"}, tweak_inputs=_onehot_stoch),
    dict(name="tdmpc2_policy", cls=TDMPC2Policy, kind="layernorm_mlp", opset=13,
         inputs=[("obs", F32, [39])], outputs=["z", "action", "std"]),
    dict(name="simba_actor", cls=SimBaActor, kind="layernorm_mlp", opset=17,
         inputs=[("obs", F32, [17])], outputs=["action", "std"]),
    dict(name="rllib_dict_obs", cls=RLlibDictObs, kind="dict_obs", opset=13,
         inputs=[("proprio", F32, [24]), ("goal", F32, [3]), ("lidar", F32, [64])],
         outputs=["action_dist_inputs", "vf"]),
    dict(name="sb3_multi_input", cls=SB3MultiInput, kind="dict_obs", opset=13,
         inputs=[("image", U8, [3, 36, 36]), ("vector", F32, [7])], outputs=["logits", "value"]),
    dict(name="sb3_nature_cnn", cls=SB3NatureCNNPPO, kind="cnn", opset=13,
         inputs=[("obs", U8, [4, 84, 84])], outputs=["logits", "value"]),
    dict(name="cleanrl_impala_cnn", cls=CleanRLImpalaCNN, kind="cnn", opset=13,
         inputs=[("obs", U8, [64, 64, 3])], outputs=["logits", "value"]),
    dict(name="gap_cnn", cls=GAPCNN, kind="cnn", opset=13,
         inputs=[("obs", F32, [3, 48, 48])], outputs=["logits", "value"]),
    dict(name="rma_conv1d", cls=RMAAdaptation, kind="conv1d", opset=13,
         inputs=[("history", F32, [30, 50])], outputs=["extrinsics"]),
    dict(name="sample_factory_gru", cls=SampleFactoryGRU, kind="recurrent", opset=13,
         inputs=[("obs", F32, [16]), ("rnn_state", F32, [128])], outputs=["logits", "value", "new_rnn_state"],
         tweak_inputs=_bounded_state("rnn_state")),
    dict(name="sb3_recurrent_ppo", cls=SB3RecurrentPPO, kind="recurrent", opset=13,
         inputs=[("obs", F32, [8]), ("h", F32, [128]), ("c", F32, [128])],
         outputs=["logits", "value", "h_out", "c_out"], tweak_inputs=_bounded_state("h")),
    dict(name="transformer_window", cls=TransformerWindow, kind="attention", opset=17,
         inputs=[("obs_window", F32, [8, 17])], outputs=["logits", "value"]),
    dict(name="rllib_attention_einsum", cls=EinsumAttention, kind="attention", opset=14,
         inputs=[("obs_window", F32, [8, 12])], outputs=["logits", "value"]),
]


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def n_params(model):
    return sum(p.numel() for p in model.parameters())


def _check_greedy(spec, batch, outs):
    """A greedy action must not hinge on rounding in the compiled model."""
    name = spec["name"]
    for act, scores in spec.get("argmax_of", {}).items():
        s = np.sort(outs[scores], axis=1)
        assert np.all(s[:, -1] - s[:, -2] > 1e-3), f"{name}: {act} too close to a tie; change the seed"
        assert np.array_equal(outs[act], outs[scores].argmax(axis=1)), (name, act)
        # a constant greedy action would not show a compiled model that ignores its input
        assert batch == 1 or len(set(outs[act].tolist())) > 1, f"{name}: {act} is the same for every row"


def main():
    deterministic_torch(ZOO_DIR, DATA_DIR)
    names = [s["name"] for s in MODELS]
    assert len(set(names)) == len(names)
    entries = []
    sizes = {}
    report = []

    for idx, spec in enumerate(MODELS):
        name = spec["name"]
        torch.manual_seed(spec.get("seed", 5000 + idx))
        model = spec["cls"]().eval()
        # the "zoo/" namespace keeps these inputs apart from make_models.py's for a model of the same name
        entry, files = export_spec(spec, model, ZOO_DIR, DATA_DIR, BATCHES, namespace="zoo/", example_tag="export",
                                   check=_check_greedy, fields={"kind": spec["kind"], "params": n_params(model)})
        entries.append(entry)
        sizes.update(files)
        report.append((name, spec["kind"], entry["opset"], entry["params"], sizes[entry["onnx"]],
                       sum(v for k, v in sizes.items() if k.startswith(f"tests/data/zoo/{name}/")), entry["ops"]))

    # stale outputs of models that were renamed or dropped would otherwise linger unnoticed
    for d in DATA_DIR.iterdir():
        if d.is_dir() and d.name not in names:
            print(f"warning: {d.relative_to(REPO)} belongs to no zoo model", file=sys.stderr)
    for f in ZOO_DIR.glob("*.onnx"):
        if f.stem not in names:
            print(f"warning: {f.relative_to(REPO)} belongs to no zoo model", file=sys.stderr)

    sizes["tests/data/zoo/manifest.json"] = write_manifest(DATA_DIR / "manifest.json", "examples/zoo/make_zoo.py",
                                                           BATCHES, entries)

    # --- report ---------------------------------------------------------------------------------
    print(f"{'model':24s} {'kind':14s} opset {'params':>9s} {'onnx KiB':>9s} {'data KiB':>9s}  ops")
    for name, kind, opset, params, onnx_size, data_size, ops in report:
        print(f"{name:24s} {kind:14s} {opset:5d} {params:9d} {onnx_size / 1024:9.1f} {data_size / 1024:9.1f}  {' '.join(ops)}")
    union = sorted(set().union(*(r[6] for r in report)))
    print(f"{len(report)} models; ops used ({len(union)}): {' '.join(union)}")
    print(f"total {sum(sizes.values()) / 1024 / 1024:.2f} MiB in {len(sizes)} files")


if __name__ == "__main__":
    main()
