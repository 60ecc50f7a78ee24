"""DSDPG: Distributional Sobolev Deterministic Policy Gradient, with the MMD between Sobolev return samples.

Generator critics Z(s, a, xi), xi ~ N(0, I), model the joint law of the return and its action-gradient dZ/da, trained
with that metric (multiquadric kernel) between N points (Z, dZ/da) and 2N Sobolev Bellman targets (y, dy/da),
y = r_k + gamma (1 - d) Z'_c(s'_k, a'_k) differentiated per sample through the world model, target actor and critics,
top 25 % by return dropped (TQC). Diff against td3_huber.py: the critic; between the two DSDPG scripts: the loss.

Usage, the choices the paper leaves open, the outputs and the flags: README.md.
"""

import copy
import math
import os
from dataclasses import dataclass
from typing import Literal

import run_bookkeeping  # before torch and gymnasium: from here on a stop, even during their imports, is one line

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tyro
from torch.utils.tensorboard import SummaryWriter

import noise_wrappers
import pointmass_env  # noqa: F401 (registers PointMass-v0)
import replay_buffer


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment (part of the run name)"""
    seed: int = 1
    """seed of the experiment"""
    cuda: bool = True
    """use the GPU when one is present"""
    compile: bool = False
    """torch.compile the actor and the world-model loss (the parts never differentiated twice or under vmap)"""
    cudagraphs: bool = True
    """on a GPU, capture the critic and actor updates as CUDA graphs and replay them (LeanRL-style; CPU: no effect)"""
    matmul_precision: Literal["high", "highest"] = "high"
    """float32 matmuls on a CUDA GPU: high = TF32, as JAX by default (the paper's code); highest = full float32"""

    # Environment
    env_id: str = "Walker2d-v4"
    """the id of the environment (any gymnasium MuJoCo id, PointMass-v0, or PointMass<M>-v0 with M bonus locations)"""
    obs_noise: Literal["none", "mult"] = "none"
    """observation noise: `mult` scales every observation of an episode by one factor drawn in [1-s, 1+s]"""
    obs_noise_scale: float = 0.2
    """s of the multiplicative observation noise (the paper's "large" setting is 0.3)"""
    dyn_noise: Literal["none", "gauss"] = "none"
    """dynamics noise: `gauss` adds N(0, std^2) to positions and velocities after every step"""
    dyn_noise_std: float | None = None
    """std of the dynamics noise (None: the env's reset-noise scale, see DYN_NOISE_STD)"""

    # Algorithm
    total_timesteps: int = 150_000
    """total environment steps"""
    learning_starts: int = 5_000
    """uniform-random steps before learning starts"""
    buffer_size: int = 1_000_000
    """the replay memory buffer size"""
    batch_size: int = 256
    """the batch size of samples from the replay memory"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    learning_rate: float = 1e-4
    """RAdam learning rate of the actor and the critics"""
    updates_per_step: int = 10
    """critic updates per environment step (update-to-data ratio)"""
    policy_frequency: int = 2
    """the actor and the targets are updated every `policy_frequency` critic updates"""
    exploration_noise: float = 0.1
    """std of the Gaussian exploration noise"""
    policy_noise: float = 0.2
    """std of the target-policy smoothing noise"""
    noise_clip: float = 0.5
    """clip of the target-policy smoothing noise"""
    hidden_dim: int = 400
    """width of the actor's and the critics' two hidden layers"""

    # Distributional critic
    num_samples: int = 10
    """N: samples per (s, a) of each critic, and world-model samples per target (2N target points before truncation)"""
    num_samples_policy: int = 10
    """samples of critic 1 averaged in the actor loss"""
    noise_dim: int = 64
    """dimension of the critic's input noise xi ~ N(0, I)"""
    kernel_bandwidth: float = 100.0
    """h of the multiquadric kernel k(x, y) = -sqrt(1 + h^2 |x - y|^2)"""
    mmd_estimator: Literal["biased", "unbiased"] = "biased"
    """estimator of the squared MMD"""
    truncation: float = 25.0
    """percent of the 2N target points with top returns dropped (TQC): paper's 25; 10 in benchmarks/mujoco_questions"""
    sobolev: Literal["action", "complete"] = "action"
    """bootstrap (Z, dZ/da), the paper's operator, or (Z, dZ/da, dZ/ds), its complete operator"""

    # World model (Dyna)
    world_model: Literal["cvae", "flow"] = "cvae"
    """the world model: the paper's cVAE, or a conditional RealNVP flow (the paper's world-model ablation)"""
    wm_hidden_dim: int | None = None
    """width of the world model's hidden layers (None: the paper's, 1024 for the cVAE, 512 for the flow)"""
    wm_learning_rate: float = 1e-4
    """RAdam learning rate of the world model (weight decay 1e-4)"""
    wm_updates_per_step: int = 1
    """world-model gradient steps per environment step"""
    dyna_reward: Literal["replay", "model"] = "replay"
    """Dyna target reward: `replay` = the replay row's value (as its done flag) and the model's d r^/da; `model` = r^"""

    # Evaluation, logging, checkpoints
    eval_frequency: int = 5_000
    """evaluate the deterministic policy every `eval_frequency` steps (and at the end)"""
    eval_episodes: int = 10
    """episodes per evaluation"""
    contraction_frequency: int = 1_000
    """log the contraction factor gamma kappa of the Sobolev backup every this many steps (0: never)"""
    capture_video: bool = False
    """film the first episode of every evaluation to runs/<run_name>/videos/ (MuJoCo renders headless: MUJOCO_GL)"""
    track: bool = False
    """track the run with Weights & Biases: TensorBoard scalars, hyperparameters, code and videos"""
    wandb_project_name: str = "dsdpg"
    """the W&B project"""
    wandb_entity: str | None = None
    """the W&B entity, a user or team (None: your default)"""
    save_model: bool = False
    """save the trained actor and critics to runs/<run_name>/model.pt"""
    checkpoint_frequency: int = 10_000
    """write runs/<run_name>/checkpoint.pt at the first episode end after every this many steps (0: only at the end)"""
    resume: str | None = None
    """checkpoint.pt or its run folder to resume (the run's settings; --total-timesteps, --cuda, tracking may change)"""
    evaluate: str | None = None
    """evaluate a saved policy instead of training: model.pt, checkpoint.pt or their run folder (--eval-episodes)"""


def check_args(args: Args) -> None:
    """Raise ValueError naming the first bad flag: a non-finite one, else run_bookkeeping.check_flags's checks of the
    flags every script has, with these."""
    run_bookkeeping.check_finite_flags(args)  # first: the checks below compare numbers
    run_bookkeeping.check_flags(
        args,
        [  # this script's own flags, checked after the sizes of those every script has
            (
                args.num_samples >= 2 and args.num_samples_policy >= 1,
                "--num-samples must be >= 2, --num-samples-policy >= 1",
            ),
            (args.noise_dim >= 1, "--noise-dim must be >= 1"),
            (  # below 0.01 the float32 kernel is constant for returns < 0.05 apart
                args.kernel_bandwidth >= 0.01,
                "--kernel-bandwidth must be in [0.01, 1e6]: below 0.01 the float32 kernel cannot tell returns "
                "0.05 apart",
            ),
            (  # h^2 |x - y|^2 stays finite
                args.kernel_bandwidth <= 1e6,
                "--kernel-bandwidth must be in [0.01, 1e6]: above 1e6, h^2 |x - y|^2 overflows float32 for points "
                "1e13 apart",
            ),
            (
                0 <= args.truncation
                and 2 * args.num_samples - round(2 * args.num_samples * args.truncation / 100) >= 2,
                "--truncation must be >= 0 and keep at least 2 of the 2N target points",
            ),
        ],
    )


# ENV HELPERS
def make_env(args: Args, render_mode: str | None = None) -> gym.Env:
    """The training/evaluation env: dynamics noise, episode statistics, actions in [-1, 1], observation noise,
    float32."""
    env = run_bookkeeping.make_gym_env(args.env_id, render_mode)  # ids and action spaces it cannot train on refused
    if args.dyn_noise == "gauss":
        std = (
            args.dyn_noise_std if args.dyn_noise_std is not None else noise_wrappers.default_dyn_noise_std(args.env_id)
        )
        env = noise_wrappers.GaussianDynamicsNoise(env, std)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.RescaleAction(env, np.float32(-1.0), np.float32(1.0))
    if args.obs_noise == "mult":
        env = noise_wrappers.MultiplicativeObservationNoise(env, args.obs_noise_scale)
    space = env.observation_space
    float32_space = gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
    return gym.wrappers.TransformObservation(env, lambda obs: obs.astype(np.float32), float32_space)


# NETWORKS
NOISE_EMBEDDING_DIM = 64
"""width of the critic's noise embedding m(xi)"""


class EnsembleLinear(nn.Module):
    """`num_members` independent linear layers in one batched matmul: (E', B, in) -> (E', B, out), the first E' <= E."""

    def __init__(self, num_members: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's default initialisation, per member
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == self.weight.shape[0]:  # all members: no slicing (its backward would zero-pad every gradient)
            return torch.baddbmm(self.bias, x, self.weight)
        return torch.baddbmm(self.bias[: x.shape[0]], x, self.weight[: x.shape[0]])


class Critic(nn.Module):
    """Twin generator critics Z_e(s, a, xi), e = 1..E, in one batched network: the input [s, a, m_e(xi)] goes through 2
    SiLU hidden layers and is skipped into the second; m_e, two width-64 SiLU layers, embeds the noise xi."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_dim: int, noise_dim: int, num_critics: int = 2):
        super().__init__()
        in_dim = obs_dim + act_dim + NOISE_EMBEDDING_DIM
        self.num_critics = num_critics
        self.noise_dim = noise_dim
        self.noise1 = EnsembleLinear(num_critics, noise_dim, NOISE_EMBEDDING_DIM)
        self.noise2 = EnsembleLinear(num_critics, NOISE_EMBEDDING_DIM, NOISE_EMBEDDING_DIM)
        self.fc1 = EnsembleLinear(num_critics, in_dim, hidden_dim)
        self.fc2 = EnsembleLinear(num_critics, hidden_dim + in_dim, hidden_dim)
        self.fc3 = EnsembleLinear(num_critics, hidden_dim, 1)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """obs (R, S) or (E, R, S), actions (R, A) or (E, R, A), noise (E', R, noise_dim) -> return samples (E', R) of
        the first E' <= E critics."""
        rows = (noise.shape[0], obs.shape[-2])
        embedding = F.silu(self.noise2(F.silu(self.noise1(noise))))  # (E, R, 64)
        x = torch.cat([obs.expand(*rows, -1), actions.expand(*rows, -1), embedding], -1)  # (E, R, S+A+64)
        h = F.silu(self.fc1(x))
        h = F.silu(self.fc2(torch.cat([h, x], -1)))
        return self.fc3(h).squeeze(-1)


class Actor(nn.Module):
    """Deterministic policy: 2 SiLU hidden layers, tanh output in [-1, 1]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_dim: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden_dim),
            nn.SiLU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.SiLU(),
            nn.Linear(hidden_dim, act_dim),
            nn.Tanh(),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


# WORLD MODEL
class SkipMLP(nn.Module):
    """MLP with SiLU hidden layers; the input is concatenated to the input of every hidden layer after the first."""

    def __init__(self, in_dim: int, hidden_dim: int, out_dim: int, num_hidden: int = 3):
        super().__init__()
        self.hidden = nn.ModuleList(
            [nn.Linear(in_dim, hidden_dim)]
            + [nn.Linear(hidden_dim + in_dim, hidden_dim) for _ in range(num_hidden - 1)]
        )
        self.out = nn.Linear(hidden_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.hidden[0](x))
        for layer in self.hidden[1:]:
            h = F.silu(layer(torch.cat([h, x], -1)))
        return self.out(h)


class RunningNormaliser(nn.Module):
    """Running mean and std (Chan et al.'s parallel update, float64) of a stream of vectors; std floored at
    `min_std`."""

    def __init__(self, dim: int, min_std: float = 1e-2):
        super().__init__()
        self.min_std = min_std
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("total_mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("total_m2", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, self.mean.shape[0]).double()  # (n, dim)
        n = x.shape[0]
        batch_mean = x.mean(0)
        delta = batch_mean - self.total_mean
        total = self.count + n
        self.total_mean += delta * n / total
        self.total_m2 += ((x - batch_mean) ** 2).sum(0) + delta**2 * self.count * n / total
        self.count += n
        self.mean.copy_(self.total_mean)
        self.std.copy_((self.total_m2 / self.count).sqrt().clamp_min(self.min_std))

    def normalise(self, x: torch.Tensor, part: slice = slice(None)) -> torch.Tensor:
        """x (..., d) -> (x - mean) / std, with the statistics of the coordinates `part` (d of them)."""
        return (x - self.mean[part]) / self.std[part]

    def denormalise(self, x: torch.Tensor, part: slice = slice(None)) -> torch.Tensor:
        return x * self.std[part] + self.mean[part]


class PerCopyPrior(torch.autograd.Function):
    """The cVAE prior's output for rows that come in groups of `copies` identical conditions (the per-sample copies of
    one pair that per-sample gradients need), computed once per group, while every row keeps its own gradient: the
    backward applies the group's Jacobian, taken in forward mode with one tangent per input column in `columns`, to
    each row's cotangent. The same numbers as the prior on every row, at a fraction of its cost; vmap-able, so it runs
    under batched backward passes."""

    generate_vmap_rule = True

    @staticmethod
    def forward(cond: torch.Tensor, prior: nn.Module, copies: int, columns: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """cond (G*copies, C) -> (prior output (G*copies, P), Jacobian (T, G, P) w.r.t. the T columns)."""
        group_cond = cond.detach()[::copies]  # (G, C); detached: the gradient is this Function's backward
        tangents = torch.eye(cond.shape[-1], dtype=cond.dtype, device=cond.device)[columns]  # (T, C)
        outputs, jacobian = torch.func.vmap(lambda t: torch.func.jvp(prior, (group_cond,), (t.expand_as(group_cond),)))(
            tangents
        )
        return outputs[0].repeat_interleave(copies, 0), jacobian  # the prior's output is computed once, not per tangent

    @staticmethod
    def setup_context(ctx, inputs: tuple, output: tuple) -> None:
        cond, _, ctx.copies, ctx.columns = inputs
        ctx.num_columns = cond.shape[-1]
        ctx.save_for_backward(output[1])
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _: torch.Tensor) -> tuple:
        (jacobian,) = ctx.saved_tensors  # (T, G, P)
        num_tangents, groups, width = jacobian.shape
        grad_columns = grad.reshape(groups, ctx.copies, width) @ jacobian.permute(1, 2, 0)  # (G, copies, T)
        start, stop, _ = ctx.columns.indices(ctx.num_columns)
        grad_cond = F.pad(grad_columns.reshape(groups * ctx.copies, num_tangents), (start, ctx.num_columns - stop))
        return grad_cond, None, None, None


class WorldModel(nn.Module):
    """Conditional VAE of (ds, r) = (s' - s, r) given (s, a), in normalised coordinates.

    Learned diagonal-Gaussian prior p(eps | s, a) and encoder q(eps | s, a, ds, r), deterministic decoder
    (ds, r) = D(s, a, eps); latent dim |S| + 1; each net is a 3-hidden-layer SkipMLP. Samples use the prior with the
    reparameterisation trick, so (s', r) is differentiable w.r.t. (s, a).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_dim: int, kl_weight: float = 0.1):
        super().__init__()
        self.latent_dim = obs_dim + 1
        self.kl_weight = kl_weight
        cond_dim = obs_dim + act_dim
        self.normaliser = RunningNormaliser(cond_dim + obs_dim + 1)  # statistics of (s, a, ds, r), one update per step
        self.cond_part, self.out_part = slice(0, cond_dim), slice(cond_dim, None)  # (s, a) and (ds, r)
        self.prior = SkipMLP(cond_dim, hidden_dim, 2 * self.latent_dim)
        self.encoder = SkipMLP(cond_dim + obs_dim + 1, hidden_dim, 2 * self.latent_dim)
        self.decoder = SkipMLP(cond_dim + self.latent_dim, hidden_dim, obs_dim + 1)

    def update_normaliser(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor
    ) -> None:
        """obs (..., S), actions (..., A), rewards (..., 1), next_obs (..., S)."""
        self.normaliser.update(torch.cat([obs, actions, next_obs - obs, rewards], -1))

    def condition(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.normaliser.normalise(torch.cat([obs, actions], -1), self.cond_part)

    @staticmethod
    def gaussian(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = params.chunk(2, -1)
        return mean, log_std.clamp(-10.0, 2.0)

    def loss(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        """Negative ELBO (up to constants) of a batch: obs (B, S), actions (B, A), rewards (B,), next_obs (B, S)."""
        cond = self.condition(obs, actions)  # (B, S+A)
        target = self.normaliser.normalise(torch.cat([next_obs - obs, rewards[:, None]], -1), self.out_part)  # (B, S+1)
        q_mean, q_log_std = self.gaussian(self.encoder(torch.cat([cond, target], -1)))  # (B, L) each
        p_mean, p_log_std = self.gaussian(self.prior(cond))
        eps = q_mean + q_log_std.exp() * torch.randn_like(q_mean)
        reconstruction = (self.decoder(torch.cat([cond, eps], -1)) - target).pow(2).sum(-1)  # (B,)
        kl = (
            p_log_std - q_log_std + ((2 * q_log_std).exp() + (q_mean - p_mean) ** 2) / (2 * (2 * p_log_std).exp()) - 0.5
        ).sum(-1)  # KL(q || p), (B,)
        return (reconstruction + self.kl_weight * kl).mean()

    def sample(
        self, obs: torch.Tensor, actions: torch.Tensor, n: int, noise: torch.Tensor | None = None, copies: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n samples per pair: obs (B, S), actions (B, A) -> next_obs (B, n, S), rewards (B, n); differentiable.
        `noise` (B, n, L), the standard-normal draws behind the samples, is drawn here unless given. `copies` > 1: the
        rows come in groups of that many identical pairs; the prior runs once per group (PerCopyPrior), with tangents
        for the actions, and for the states too if `obs` requires a gradient."""
        cond = self.condition(obs, actions)  # (B, S+A)
        if copies > 1:
            columns = slice(0 if obs.requires_grad else obs.shape[-1], cond.shape[-1])
            p_mean, p_log_std = self.gaussian(PerCopyPrior.apply(cond, self.prior, copies, columns)[0])  # (B, L) each
        else:
            p_mean, p_log_std = self.gaussian(self.prior(cond))  # (B, L) each
        if noise is None:
            noise = torch.randn(obs.shape[0], n, self.latent_dim, device=obs.device)
        eps = p_mean[:, None] + p_log_std.exp()[:, None] * noise  # (B, n, L)
        out = self.decoder(torch.cat([cond[:, None].expand(-1, n, -1), eps], -1))  # (B, n, S+1)
        out = self.normaliser.denormalise(out, self.out_part)
        next_obs, rewards = obs[:, None] + out[..., :-1], out[..., -1]
        return next_obs, rewards


def make_world_model(kind: str, obs_dim: int, act_dim: int, hidden_dim: int | None) -> WorldModel:
    """The world model of --world-model, at the paper's width (cVAE 1024, flow 512) unless --wm-hidden-dim is given;
    the flow (flow_world_model.py) has the cVAE's interface."""
    if kind == "flow":
        from flow_world_model import FlowWorldModel

        normaliser = RunningNormaliser(2 * obs_dim + act_dim + 1)
        return FlowWorldModel(obs_dim, act_dim, 512 if hidden_dim is None else hidden_dim, normaliser)
    return WorldModel(obs_dim, act_dim, 1024 if hidden_dim is None else hidden_dim)


# LOSSES AND TARGETS
def multiquadric_kernel(x: torch.Tensor, y: torch.Tensor, h: float) -> torch.Tensor:
    """k_h(x, y) = -sqrt(1 + h^2 |x - y|^2): x (..., n, d), y (..., m, d) -> (..., n, m)."""
    sq_dist = (x.unsqueeze(-2) - y.unsqueeze(-3)).pow(2).sum(-1)  # (..., n, m)
    return -torch.sqrt(1.0 + h**2 * sq_dist)


def mmd2(x: torch.Tensor, y: torch.Tensor, h: float, estimator: str = "biased") -> torch.Tensor:
    """Squared MMD under the multiquadric kernel between sample sets x (..., n, d) and y (..., m, d) -> (...).

    biased: the V-statistic mean k(x, x') + mean k(y, y') - 2 mean k(x, y); unbiased: the within-set means leave out
    the diagonal terms k(x_i, x_i) = k(y_j, y_j) = -1.
    """
    n, m = x.shape[-2], y.shape[-2]
    k_xx = multiquadric_kernel(x, x, h).sum((-2, -1))
    k_yy = multiquadric_kernel(y, y, h).sum((-2, -1))
    k_xy = multiquadric_kernel(x, y, h).mean((-2, -1))
    if estimator == "biased":
        return k_xx / n**2 + k_yy / m**2 - 2 * k_xy
    return (k_xx + n) / (n * (n - 1)) + (k_yy + m) / (m * (m - 1)) - 2 * k_xy


def truncate_top(samples: torch.Tensor, p: float) -> torch.Tensor:
    """Drop the round(n p / 100) points with the largest return coordinate (TQC): (..., n, d) ->
    (..., n - round(n p / 100), d)."""
    n = samples.shape[-2]
    keep = samples[..., 0].topk(n - round(n * p / 100), dim=-1, largest=False).indices  # (..., kept)
    return samples.gather(-2, keep.unsqueeze(-1).expand(*keep.shape, samples.shape[-1]))


def dyna_rewards(replay_rewards: torch.Tensor, model_rewards: torch.Tensor, source: str) -> torch.Tensor:
    """The reward of a Dyna target (broadcast): `model`: the world model's samples r^; `replay`: the replay row's value
    r exactly, with r^'s gradient (r^ - r^ is 0 in floating point), so reward and termination come from one row."""
    if source == "model":
        return model_rewards
    return model_rewards - model_rewards.detach() + replay_rewards


def sobolev_targets(
    data: replay_buffer.ReplayBatch,
    world_model: WorldModel,
    target_actor: Actor,
    target_critic: Critic,
    gamma: float,
    policy_noise: float,
    noise_clip: float,
    num_samples: int,
    dyna_reward: str = "replay",
    complete: bool = False,
) -> torch.Tensor:
    """The 2N Sobolev Bellman target points (y_ck, dy_ck/da) of each pair, critic 1's N then critic 2's N, detached
    (complete: (y_ck, dy_ck/da, dy_ck/ds)): a replay batch of B pairs -> (B, 2N, 1+A[+S]).

    (s'_k, r^_k) = g(s, a, eps_k), a'_k = clip(pi'(s'_k) + clipped smoothing noise),
    y_ck = r_k + gamma (1 - d) Z'_c(s'_k, a'_k),
    r_k the replay reward with r^_k's gradient or r^_k itself (`dyna_reward` "replay" or "model", see `dyna_rewards`).
    dy_ck/da is its total derivative: the paper's Sobolev Bellman target (Eqs. fsaret, fsaaction; g for the dynamics).
    Every sample has its own input copy, every critic its own cotangent; one torch.autograd.grad(...,
    is_grads_batched=True) vmaps the backward over the E critics' cotangents. The noise is drawn in a fixed order.
    """
    batch, n, act_dim, num_critics = data.obs.shape[0], num_samples, data.actions.shape[-1], target_critic.num_critics
    with torch.enable_grad():
        sample_actions = (
            data.actions.detach()[:, None].expand(batch, n, act_dim).clone().requires_grad_()
        )  # a leaf per sample
        sample_obs = data.obs.detach()[:, None].expand(batch, n, data.obs.shape[-1]).clone().requires_grad_(complete)
        next_obs, model_rewards = world_model.sample(
            sample_obs.flatten(0, 1), sample_actions.flatten(0, 1), 1, copies=n
        )
        next_obs, model_rewards = next_obs[:, 0], model_rewards.reshape(batch, n)  # (B*N, S), (B, N)
        next_actions = target_actor(next_obs)  # (B*N, A)
        smoothing = (torch.randn_like(next_actions) * policy_noise).clamp(-noise_clip, noise_clip)
        next_actions = (next_actions + smoothing).clamp(-1.0, 1.0)
        noise = torch.randn(num_critics, batch * n, target_critic.noise_dim, device=data.obs.device)
        critic_inputs = [
            x.detach().requires_grad_()[None].expand(num_critics, -1, -1) for x in (next_obs, next_actions)
        ]
        next_z = target_critic(*critic_inputs, noise).reshape(
            num_critics, batch, n
        )  # (E, B, N), each on its own (s', a')
        dz_ds, dz_da = torch.autograd.grad(next_z.sum(), critic_inputs)  # (E, B*N, S), (E, B*N, A): one pass, no zeros
        rewards = dyna_rewards(data.rewards[:, None], model_rewards, dyna_reward)  # (B, N)
        returns = rewards + gamma * (1.0 - data.terminations)[:, None] * next_z  # (E, B, N)
        # dy_e/da = dr/da + gamma (1 - d) (dz_e/ds' ds'/da + dz_e/da' da'/da): world model and actor batched over e
        discount = (gamma * (1.0 - data.terminations))[:, None].expand(batch, n).reshape(batch * n, 1)  # (B*N, 1)
        cotangents = (torch.ones(num_critics, batch, n, device=data.obs.device), discount * dz_ds, discount * dz_da)
        inputs = (sample_actions, sample_obs) if complete else (sample_actions,)
        grads = torch.autograd.grad((rewards, next_obs, next_actions), inputs, cotangents, is_grads_batched=True)
    targets = torch.cat([returns.detach().unsqueeze(-1), *grads], -1)  # (E, B, N, 1+A[+S])
    return targets.transpose(0, 1).reshape(batch, num_critics * n, targets.shape[-1])


def sobolev_samples(
    critic: Critic, obs: torch.Tensor, actions: torch.Tensor, num_samples: int, complete: bool = False
) -> torch.Tensor:
    """Prediction points (Z_e(s, a, xi_j), dZ_e/da(s, a, xi_j)[, dZ_e/ds]), j = 1..N, of every online critic e, graph
    kept so the loss trains each critic through its own gradients (double backprop): (B, S), (B, A) ->
    (E, B, N, 1+A[+S])."""
    batch, n, act_dim, num_critics = obs.shape[0], num_samples, actions.shape[-1], critic.num_critics
    sample_actions = actions.detach()[None, :, None].expand(num_critics, batch, n, act_dim).clone().requires_grad_()
    sample_obs = (
        obs.detach()[None, :, None].expand(num_critics, batch, n, obs.shape[-1]).clone().requires_grad_(complete)
    )
    noise = torch.randn(num_critics, batch * n, critic.noise_dim, device=obs.device)
    z = critic(sample_obs.flatten(1, 2), sample_actions.reshape(num_critics, batch * n, act_dim), noise)
    z = z.reshape(num_critics, batch, n)  # (E, B, N)
    inputs = (sample_actions, sample_obs) if complete else (sample_actions,)
    grads = torch.autograd.grad(z.sum(), inputs, create_graph=True)  # (E, B, N, A) [, (E, B, N, S)]: a leaf per sample
    return torch.cat([z.unsqueeze(-1), *grads], -1)


def critic_loss(predictions: torch.Tensor, targets: torch.Tensor, h: float, estimator: str) -> torch.Tensor:
    """MMD^2 between each critic's prediction set and the shared target set, mean over the batch, summed over the
    critics: predictions (E, B, N, 1+A[+S]), targets (B, K, 1+A[+S])."""
    return mmd2(predictions, targets, h, estimator).mean(1).sum()


def contraction_factor(
    obs: torch.Tensor, actions: torch.Tensor, world_model: WorldModel, target_actor: Actor, gamma: float
) -> torch.Tensor:
    """gamma |(df/da)^T (dpi'/ds')^T|_2 per pair: how much one Sobolev backup can stretch action-gradients, the paper's
    gamma kappa (contraction needs gamma kappa < 1). df/da follows one world-model sample path s' = f(s, a, eps) and
    dpi'/ds' is the target actor's Jacobian at s': obs (B, S), actions (B, A) -> (B,)."""
    noise = torch.randn(obs.shape[0], 1, world_model.latent_dim, device=obs.device)

    def next_state(s: torch.Tensor, a: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:  # (S,), (A,), (1, L) -> (S,)
        return world_model.sample(s[None], a[None], 1, eps[None])[0][0, 0]

    with torch.no_grad():
        dynamics_jacobian = torch.func.vmap(torch.func.jacfwd(next_state, argnums=1))(obs, actions, noise)  # (B, S, A)
        next_obs = world_model.sample(obs, actions, 1, noise)[0][:, 0]  # (B, S)
        policy_jacobian = torch.func.vmap(torch.func.jacfwd(lambda s: target_actor(s[None])[0]))(next_obs)  # (B, A, S)
    operator = gamma * dynamics_jacobian.transpose(-1, -2) @ policy_jacobian.transpose(-1, -2)  # (B, A, A)
    return torch.linalg.matrix_norm(operator, ord=2)


# TRAINING
def log_update(
    writer: SummaryWriter, args: Args, batch: dict[str, torch.Tensor], losses: dict[str, torch.Tensor], step: int
) -> None:
    """TensorBoard, every 100 steps: the last critic step's predictions and targets, and the latest losses."""
    act_dim = batch["predictions"].shape[-1] - 1 - (batch["obs"].shape[-1] if args.sobolev == "complete" else 0)
    q_values = batch["predictions"][..., 0]  # (2, B, N)
    writer.add_scalar("losses/qf1_values", q_values[0].mean().item(), step)
    writer.add_scalar("losses/qf2_values", q_values[1].mean().item(), step)
    writer.add_scalar(
        "losses/qf1_action_grad_norm", batch["predictions"][0, ..., 1 : act_dim + 1].norm(dim=-1).mean(), step
    )
    writer.add_scalar(
        "losses/target_action_grad_norm", batch["targets"][..., 1 : act_dim + 1].norm(dim=-1).mean(), step
    )
    for name, value in losses.items():
        writer.add_scalar(f"losses/{name}", value.item(), step)


def main(args: Args) -> None:
    try:  # the flags, the run's settings (--resume, --evaluate: the saved run's) and its envs; a problem is one line
        check_args(args)
        args, saved = run_bookkeeping.run_settings(args, __file__)
        env, eval_env = make_env(args), make_env(args, render_mode="rgb_array" if args.capture_video else None)
    except ValueError as error:
        run_bookkeeping.fail(__file__, str(error))
    if args.evaluate is not None:  # a saved policy evaluated, instead of training
        actor = Actor(env.observation_space.shape[0], env.action_space.shape[0], args.hidden_dim)
        run_bookkeeping.evaluate_saved_model(args, saved, actor, eval_env)
        return
    run = run_bookkeeping.Run(__file__, args, saved, env, eval_env)  # its folder, memory check, videos, W&B

    # TRY NOT TO MODIFY: seeding (and denormal floats computed as 0 on a CPU: README)
    run_bookkeeping.seed_everything(args.seed)
    device, cuda_graphs = run_bookkeeping.training_device(args)  # a GPU: CUDA graphs and TF32 matmuls by default

    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    actor = Actor(obs_dim, act_dim, args.hidden_dim).to(device)
    critic = Critic(obs_dim, act_dim, args.hidden_dim, args.noise_dim).to(device)
    target_actor = copy.deepcopy(actor).requires_grad_(False)
    target_critic = copy.deepcopy(critic).requires_grad_(False)
    # foreach: each RAdam operation runs once over all of a network's tensors (torch's CPU default loops over them)
    actor_optimizer = torch.optim.RAdam(actor.parameters(), lr=args.learning_rate, foreach=True, capturable=cuda_graphs)
    critic_optimizer = torch.optim.RAdam(
        critic.parameters(), lr=args.learning_rate, foreach=True, capturable=cuda_graphs
    )
    world_model = make_world_model(args.world_model, obs_dim, act_dim, args.wm_hidden_dim).to(device)
    wm_optimizer = torch.optim.RAdam(
        world_model.parameters(), lr=args.wm_learning_rate, weight_decay=1e-4, foreach=True
    )
    rb = replay_buffer.ReplayBuffer(obs_dim, act_dim, args.buffer_size, device)
    networks = dict(actor=actor, critic=critic, target_actor=target_actor, target_critic=target_critic)
    optimizers = dict(actor_optimizer=actor_optimizer, critic_optimizer=critic_optimizer, wm_optimizer=wm_optimizer)
    stateful = {**networks, "world_model": world_model, **optimizers, "replay_buffer": rb}  # what a checkpoint holds
    if args.compile:
        from flag_extras import compile_parts

        compile_parts(actor, world_model)

    # ALGO LOGIC: the critic and actor updates, on device tensors with no host sync inside (--cudagraphs captures each)
    def update_critic() -> dict[str, torch.Tensor]:
        """A fresh replay batch and one critic step on it: what the actor step and the logs read."""
        data = rb.sample(args.batch_size)
        targets = sobolev_targets(
            data,
            world_model,
            target_actor,
            target_critic,
            gamma=args.gamma,
            policy_noise=args.policy_noise,
            noise_clip=args.noise_clip,
            num_samples=args.num_samples,
            dyna_reward=args.dyna_reward,
            complete=args.sobolev == "complete",
        )  # (B, 2N, 1+A[+S])
        targets = truncate_top(targets, args.truncation)  # (B, K, 1+A[+S]); predictions (2, B, N, 1+A[+S]):
        predictions = sobolev_samples(critic, data.obs, data.actions, args.num_samples, args.sobolev == "complete")
        qf_loss = critic_loss(predictions, targets, args.kernel_bandwidth, args.mmd_estimator)

        critic_optimizer.zero_grad()
        qf_loss.backward()
        critic_optimizer.step()
        return dict(obs=data.obs, predictions=predictions.detach(), targets=targets.detach(), qf_loss=qf_loss.detach())

    def update_actor(obs: torch.Tensor) -> torch.Tensor:
        """One actor step on the critic step's states obs (B, S), then the target networks' Polyak step."""
        policy_obs = obs.repeat_interleave(args.num_samples_policy, 0)  # (B*M, S)
        policy_actions = actor(obs).repeat_interleave(args.num_samples_policy, 0)  # pi once per state
        critic_noise = torch.randn(1, policy_obs.shape[0], args.noise_dim, device=device)  # critic 1's alone
        actor_loss = -critic(policy_obs, policy_actions, critic_noise)[0].mean()
        actor_optimizer.zero_grad()
        actor_loss.backward(inputs=list(actor.parameters()))  # no gradients for the critic's weights
        actor_optimizer.step()
        with torch.no_grad():  # the target networks' Polyak step
            for param, target_param in zip(actor.parameters(), target_actor.parameters()):
                target_param.lerp_(param, args.tau)
            for param, target_param in zip(critic.parameters(), target_critic.parameters()):
                target_param.lerp_(param, args.tau)
        return actor_loss.detach()

    losses: dict[str, torch.Tensor] = {}
    start_step = run.start(stateful, device)  # --resume: every state as saved
    obs, _ = env.reset(seed=args.seed if run.checkpoint is None else None)  # resumed: a fresh episode, RNG as saved
    if cuda_graphs:
        from flag_extras import CudaGraphStep

        update_critic, update_actor = CudaGraphStep(update_critic), CudaGraphStep(update_actor)
    try:
        for global_step in run.progress_bar(range(start_step, args.total_timesteps)):
            # ALGO LOGIC: put action logic here
            if global_step < args.learning_starts:
                action = torch.rand(act_dim) * 2.0 - 1.0
            else:
                with torch.no_grad():
                    action = actor(torch.as_tensor(obs, device=device)[None])[0]
                    action = (action + torch.randn_like(action) * args.exploration_noise).clamp(-1.0, 1.0)
            action = action.cpu().numpy()

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminated, truncated, info = env.step(action)
            run.log_episode(info, global_step)

            # TRY NOT TO MODIFY: save data to the replay buffer; next_obs is the true final observation at episode ends
            transition = rb.add(obs, action, reward, next_obs, terminated)  # as device tensors (S,), (A,), (1,), (S,)
            world_model.update_normaliser(*transition)
            obs = next_obs

            # ALGO LOGIC: world model training
            if rb.size >= args.batch_size:
                for _ in range(args.wm_updates_per_step):
                    data = rb.sample(args.batch_size)
                    wm_loss = world_model.loss(data.obs, data.actions, data.rewards, data.next_obs)
                    wm_optimizer.zero_grad()
                    wm_loss.backward()
                    wm_optimizer.step()
                    losses["world_model_loss"] = wm_loss.detach()

            # ALGO LOGIC: training.
            if global_step >= args.learning_starts:
                for _ in range(args.updates_per_step):
                    batch = update_critic()
                    run.num_critic_updates += 1
                    losses["qf_loss"] = batch["qf_loss"]
                    if run.num_critic_updates % args.policy_frequency == 0:
                        losses["actor_loss"] = update_actor(batch["obs"])
                if global_step % 100 == 0:
                    log_update(run.writer, args, batch, losses, global_step)
            run.check_finite(losses, global_step)  # the world model's warm-up steps too
            run.log_speed(global_step)

            if run.contraction_due(global_step):  # the world model's contraction, on a side RNG
                with run.side_rng():
                    data = rb.sample(args.batch_size)
                    factors = contraction_factor(data.obs, data.actions, world_model, target_actor, args.gamma)  # (B,)
                run.log_contraction(factors, global_step)

            run.evaluate_if_due(actor, global_step)
            if terminated or truncated:
                run.checkpoint_if_due(global_step)
                obs, _ = env.reset()
    except KeyboardInterrupt:
        run.interrupted()
    run.finish({"actor": actor, "critic": critic})


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
