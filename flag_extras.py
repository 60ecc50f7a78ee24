"""What a flag adds to the RL scripts beyond their algorithm and their run's bookkeeping (run_bookkeeping.py), written
once beside them and imported only under its flag (as CleanRL imports `cleanrl_utils.evals` under `--save-model`): the
flow world model (`--world-model flow`), CUDA-graph capture (`--cudagraphs`), W&B (`--track`), video
(`--capture-video`) and compilation (`--compile`). It imports no other module of the project: run_bookkeeping.py
imports it under --track and --capture-video, the scripts under the other flags.
"""

import glob
import math
import os
import warnings
from collections.abc import Callable
from types import ModuleType

import gymnasium as gym
import torch
import torch.nn as nn


# FLOW WORLD MODEL (--world-model flow)
class InvertibleLinear(nn.Module):
    """Glow's invertible 1x1 convolution on R^D, LU-parameterised: y = W x with W = P L (U + diag(sign_s exp(log_s))).

    P is a fixed permutation, L unit lower-triangular, U strictly upper-triangular, so log|det W| = sum(log_s).
    Initialised at the QR factor of a Gaussian matrix (a random orthogonal W, drawn from torch's global RNG).
    """

    def __init__(self, dim: int):
        super().__init__()
        q = torch.linalg.qr(torch.randn(dim, dim)).Q
        perm, lower, upper = torch.linalg.lu(q)
        diagonal = upper.diagonal()
        self.register_buffer("perm", perm)
        self.register_buffer("sign_s", diagonal.sign())
        self.register_buffer("lower_mask", torch.ones(dim, dim).tril(-1))
        self.register_buffer("eye", torch.eye(dim))
        self.lower = nn.Parameter(lower)
        self.upper = nn.Parameter(upper.triu(1))
        self.log_s = nn.Parameter(diagonal.abs().log())

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """L (unit lower-triangular) and U + diag(sign_s exp(log_s)) (upper-triangular), each (D, D)."""
        lower = self.lower * self.lower_mask + self.eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign_s * self.log_s.exp())
        return lower, upper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D) -> (W x (..., D), log|det W| (...))."""
        lower, upper = self.factors()
        weight = self.perm @ lower @ upper  # (D, D)
        return x @ weight.T, self.log_s.sum().expand(x.shape[:-1])

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """y (..., D) -> W^-1 y (..., D), W^-1 = upper^-1 L^-1 P^T by two triangular solves."""
        lower, upper = self.factors()
        lower_inv = torch.linalg.solve_triangular(lower, self.eye, upper=False, unitriangular=True)
        weight_inv = torch.linalg.solve_triangular(upper, lower_inv @ self.perm.T, upper=True)  # (D, D)
        return y @ weight_inv.T


class AffineCoupling(nn.Module):
    """RealNVP affine coupling conditioned on c: the kept part of x passes unchanged, the other part becomes
    x_change * exp(log_scale) + shift, with (log_scale, shift) = MLP(x_keep, c).

    x is split into its first D // 2 and last D - D // 2 coordinates; `flip` keeps the last ones instead of the first.
    The MLP has two SiLU hidden layers, each followed by LayerNorm; its output layer starts at zero, so the coupling
    starts as the identity. The log-scale is soft-clipped to (-scale_bound, scale_bound) by a scaled tanh.
    """

    def __init__(self, dim: int, cond_dim: int, hidden_dim: int, flip: bool, scale_bound: float):
        super().__init__()
        self.sizes = [dim // 2, dim - dim // 2]
        self.flip = flip
        self.scale_bound = scale_bound
        keep_dim, change_dim = self.sizes[::-1] if flip else self.sizes
        self.net = nn.Sequential(
            nn.Linear(keep_dim + cond_dim, hidden_dim),
            nn.SiLU(),
            nn.LayerNorm(hidden_dim),
            nn.Linear(hidden_dim, hidden_dim),
            nn.SiLU(),
            nn.LayerNorm(hidden_dim),
            nn.Linear(hidden_dim, 2 * change_dim),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D) -> (kept part, changed part)."""
        first, last = x.split(self.sizes, -1)
        return (last, first) if self.flip else (first, last)

    def join(self, keep: torch.Tensor, change: torch.Tensor) -> torch.Tensor:
        return torch.cat([change, keep] if self.flip else [keep, change], -1)

    def scale_shift(self, keep: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raw_log_scale, shift = self.net(torch.cat([keep, cond], -1)).chunk(2, -1)
        return self.scale_bound * torch.tanh(raw_log_scale / self.scale_bound), shift

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D), cond (..., C) -> (y (..., D), log|det dy/dx| (...))."""
        keep, change = self.split(x)
        log_scale, shift = self.scale_shift(keep, cond)
        return self.join(keep, change * log_scale.exp() + shift), log_scale.sum(-1)

    def inverse(self, y: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """y (..., D), cond (..., C) -> x (..., D)."""
        keep, change = self.split(y)
        log_scale, shift = self.scale_shift(keep, cond)
        return self.join(keep, (change - shift) * (-log_scale).exp())


class FlowWorldModel(nn.Module):
    """Conditional RealNVP flow of x = (ds, r) = (s' - s, r) given c = (s, a), in normalised coordinates.

    The map x -> z is `num_couplings` steps of [InvertibleLinear, AffineCoupling], the couplings alternately keeping
    the first D // 2 and the last D - D // 2 coordinates of their input (D = |S| + 1 >= 2), with base N(0, I);
    log p(x | c) = log N(f(x; c); 0, I) + log|det df/dx|, and the loss is its negative batch mean. Samples are
    x = f^-1(z; c), z ~ N(0, I), so (s', r) is differentiable w.r.t. (s, a) through c. The interface is the cVAE's; the
    normaliser is the script's.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_dim: int,
        normaliser: nn.Module,
        num_couplings: int = 4,
        scale_bound: float = 2.0,
    ):
        super().__init__()
        self.latent_dim = self.dim = obs_dim + 1
        cond_dim = obs_dim + act_dim
        self.normaliser = normaliser  # the script's RunningNormaliser of (s, a, ds, r), one update per step
        self.cond_part, self.out_part = slice(0, cond_dim), slice(cond_dim, None)  # (s, a) and (ds, r)
        self.mixes = nn.ModuleList([InvertibleLinear(self.dim) for _ in range(num_couplings)])
        self.couplings = nn.ModuleList(
            [AffineCoupling(self.dim, cond_dim, hidden_dim, k % 2 == 1, scale_bound) for k in range(num_couplings)]
        )

    def update_normaliser(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor
    ) -> None:
        """obs (..., S), actions (..., A), rewards (..., 1), next_obs (..., S)."""
        self.normaliser.update(torch.cat([obs, actions, next_obs - obs, rewards], -1))

    def condition(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.normaliser.normalise(torch.cat([obs, actions], -1), self.cond_part)

    def forward_transform(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (..., D), cond (..., C) -> (z (..., D), log|det dz/dx| (...))."""
        log_det = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        for mix, coupling in zip(self.mixes, self.couplings):
            x, mix_log_det = mix(x)
            x, coupling_log_det = coupling(x, cond)
            log_det = log_det + mix_log_det + coupling_log_det
        return x, log_det

    def inverse_transform(self, z: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """z (..., D), cond (..., C) -> x (..., D)."""
        for mix, coupling in zip(reversed(self.mixes), reversed(self.couplings)):
            z = mix.inverse(coupling.inverse(z, cond))
        return z

    def log_prob(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """log p(x | c) of normalised x (..., D) given normalised cond (..., C) -> (...)."""
        z, log_det = self.forward_transform(x, cond)
        return -0.5 * (z.pow(2).sum(-1) + self.dim * math.log(2 * math.pi)) + log_det

    def loss(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor
    ) -> torch.Tensor:
        """Negative mean log-likelihood of normalised (ds, r): obs (B, S), actions (B, A), rewards (B,), next_obs
        (B, S)."""
        cond = self.condition(obs, actions)  # (B, S+A)
        target = self.normaliser.normalise(torch.cat([next_obs - obs, rewards[:, None]], -1), self.out_part)  # (B, S+1)
        return -self.log_prob(target, cond).mean()

    def sample(
        self, obs: torch.Tensor, actions: torch.Tensor, n: int, noise: torch.Tensor | None = None, copies: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n samples per pair: obs (B, S), actions (B, A) -> next_obs (B, n, S), rewards (B, n); differentiable.
        `noise` (B, n, D), the base draws z ~ N(0, I) behind the samples, is drawn here unless given. `copies` is the
        DSDPG cVAE's: every coupling of the flow conditions on its own row, so nothing can be shared between copies."""
        cond = self.condition(obs, actions)[:, None].expand(-1, n, -1)  # (B, n, S+A)
        if noise is None:
            noise = torch.randn(obs.shape[0], n, self.dim, device=obs.device)
        out = self.inverse_transform(noise, cond)  # (B, n, S+1)
        out = self.normaliser.denormalise(out, self.out_part)
        next_obs, rewards = obs[:, None] + out[..., :-1], out[..., -1]
        return next_obs, rewards


# CUDA GRAPHS (--cudagraphs)
class CudaGraphStep:
    """A training step run as one CUDA graph (--cudagraphs), LeanRL-style. Its first `warmup` calls run eagerly on a
    side stream (optimizer states, cuBLAS workspaces and autograd buffers get allocated there), the next call is
    captured, and every later call replays the capture. The step may not sync with the host; tensor arguments are copied
    into the captured ones (nothing to copy when they are the same tensors), and the outputs are the same tensors at
    every call, overwritten by each replay."""

    def __init__(self, step: Callable, warmup: int = 3):
        self.step, self.warmup, self.graph = step, warmup, None

    def __call__(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor] | torch.Tensor:
        if self.graph is not None:
            for captured, given in zip(self.inputs, inputs):
                if given is not captured:
                    captured.copy_(given)
            self.graph.replay()
            return self.outputs
        if self.warmup > 0:
            self.warmup -= 1
            side_stream = torch.cuda.Stream()
            side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side_stream):
                outputs = self.step(*inputs)
            torch.cuda.current_stream().wait_stream(side_stream)
            return outputs
        self.graph, self.inputs = torch.cuda.CUDAGraph(), inputs
        with torch.cuda.graph(self.graph):
            self.outputs = self.step(*inputs)
        self.graph.replay()
        return self.outputs


# TRACKING (--track) AND VIDEO (--capture-video)
def start_tracking(args, run_dir: str) -> ModuleType:
    """wandb.init as CleanRL does: TensorBoard synced, hyperparameters and code saved; the W&B run's id is the run
    name, so a resumed run continues it. W&B files go to $WANDB_DIR if set, else runs/wandb/. Returns the wandb
    module."""
    run_name = os.path.basename(run_dir)
    try:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            id="".join(c if c.isalnum() or c in "-_" else "-" for c in run_name),
            resume="allow",
            save_code=True,
            dir=os.environ.get("WANDB_DIR", os.path.dirname(os.path.abspath(run_dir))),
        )
    except Exception as error:  # not installed, not logged in, no network, ...
        reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        raise ValueError(f"--track: cannot start W&B ({reason}); WANDB_MODE=offline logs locally") from None
    return wandb


def log_eval_video(wandb: ModuleType, run_dir: str, step: int) -> None:
    """Send the video of the evaluation at `step` to W&B."""
    videos = glob.glob(os.path.join(run_dir, "videos", f"eval-step-{step}-*.mp4"))
    wandb.log({"videos/eval": wandb.Video(videos[0], format="mp4")})


def make_video_env(args, make_env: Callable, video_dir: str) -> gym.Env:
    """The evaluation env in gymnasium's RecordVideo, filming the first of every `eval_episodes` episodes. MuJoCo
    renders headless with MUJOCO_GL (egl unless set, then osmesa); a backend that cannot render is refused."""
    errors = []
    for backend in [os.environ["MUJOCO_GL"]] if "MUJOCO_GL" in os.environ else ["egl", "osmesa"]:
        os.environ["MUJOCO_GL"] = backend
        env = make_env(args, render_mode="rgb_array")
        try:
            env.reset(seed=0)
            env.render()
            warnings.filterwarnings("ignore", ".*Overwriting existing videos")  # file names are unique but for reruns
            return gym.wrappers.RecordVideo(
                env, video_dir, episode_trigger=lambda episode: episode % args.eval_episodes == 0, disable_logger=True
            )
        except Exception as error:  # a missing GL library surfaces as anything from ImportError to AttributeError
            errors.append(f"MUJOCO_GL={backend}: {type(error).__name__}: {' '.join(str(error).split())}")
            env.close()
    raise ValueError(f"--capture-video: cannot render ({'; '.join(errors)}); see the README's 'Tracking and videos'")


# COMPILATION (--compile)
def compile_parts(actor: nn.Module, world_model: nn.Module | None) -> None:
    """torch.compile the parts never differentiated twice or under vmap that every script has: the actor and the
    world-model loss (DSDPG-MSMMD compiles its slicing search's chunk of steps itself)."""
    torch._inductor.config.fallback_random = True  # compiled code draws the same random numbers as eager code
    actor.compile()
    if world_model is not None:  # td3_huber --no-dyna has none
        world_model.loss = torch.compile(world_model.loss)
