"""What a flag adds to the RL scripts beyond their algorithm and their run's bookkeeping (run_bookkeeping.py), written
once beside them and imported only under its flag (as CleanRL imports `cleanrl_utils.evals` under `--save-model`): the
flow world model (`--world-model flow`), CUDA-graph capture (`--cudagraphs`), reading and validating a checkpoint
(`--resume`), evaluating a saved model (`--evaluate`), W&B (`--track`), video (`--capture-video`) and the CPU cost note.

Functions that need a script's own pieces take the script's module (`script`) and use its `Args`, `check_args`,
`make_env` and `Actor`; the evaluation is run_bookkeeping.py's.
"""

import copy
import glob
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import fields
from types import ModuleType

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

import run_bookkeeping


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

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        """Negative mean log-likelihood of normalised (ds, r): obs (B, S), actions (B, A), rewards (B,), next_obs (B, S)."""
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
    """A training step run as one CUDA graph (--cudagraphs), LeanRL-style. Its first `warmup` calls run eagerly on a side
    stream (optimizer states, cuBLAS workspaces and autograd buffers get allocated there), the next call is captured,
    and every later call replays the capture. The step may not sync with the host; tensor arguments are copied into the
    captured ones (nothing to copy when they are the same tensors), and the outputs are the same tensors at every call,
    overwritten by each replay."""

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


# RESUME (--resume) AND EVALUATE (--evaluate)
def file_in_run(path: str, *names: str) -> str:
    """`path` itself, or in a run folder the first of the files `names` that exists there (else the first name)."""
    if not os.path.isdir(path):
        return path
    found = [os.path.join(path, name) for name in names if os.path.isfile(os.path.join(path, name))]
    return found[0] if found else os.path.join(path, names[0])


def load_checkpoint(path: str, script: ModuleType) -> dict:
    """torch.load(path, weights_only=True) of a checkpoint or model the script wrote; anything else is a ValueError."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # garbage, empty and truncated files fail in pickle, zip and OS errors alike
        raise ValueError(f"cannot read {path!r} ({type(error).__name__}): it is damaged, empty or truncated") from None
    name = os.path.basename(script.__file__)
    if not isinstance(saved, dict) or saved.get("script") != name:
        writer = (saved.get("script") or "an older version of the scripts") if isinstance(saved, dict) else "something else"
        raise ValueError(f"{path!r} was written by {writer}; this is {name}")
    if not all(torch.isfinite(tensor).all() for tensor in floating_tensors(saved)):
        raise ValueError(f"{path!r} holds non-finite weights: a run stopped by a NaN/inf saves one for inspection only")
    return saved


def floating_tensors(value) -> list[torch.Tensor]:
    """Every floating-point tensor in a nest of dicts, lists and tuples (a checkpoint)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    return [tensor for item in items for tensor in floating_tensors(item)]


def writable_folder(path: str) -> None:
    """Create `path` if needed and write a file in it, or raise a ValueError naming it (root ignores permission bits, so
    the check writes rather than asks)."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise ValueError(f"cannot write to {path}: {error.strerror or error}") from None


def given(argv: list[str], name: str) -> bool:
    """Whether the flag of Args field `name` is on the command line `argv` (tyro fills in its default otherwise)."""
    flag = "--" + name.replace("_", "-")
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def resumed_args(cli_args, saved: dict, argv: list[str]):
    """The checkpoint's settings, its step budget included; the device, tracking and videos come from the command line,
    and the budget too where --total-timesteps is given there."""
    Args = type(cli_args)
    args, defaults = Args(**saved), Args()
    taken = ["cuda", "resume", "capture_video", "track", "wandb_project_name", "wandb_entity"]
    for field in fields(Args):
        name = field.name
        if name in taken or (name == "total_timesteps" and given(argv, name)):
            setattr(args, name, getattr(cli_args, name))
        elif name == "total_timesteps":
            continue
        elif getattr(cli_args, name) != getattr(defaults, name) and getattr(cli_args, name) != saved[name]:
            print(f"warning: --{name.replace('_', '-')} ignored on resume (the run uses {saved[name]!r})", file=sys.stderr)
    return args


def read_checkpoint(args, script: ModuleType, argv: list[str] | None = None) -> tuple:
    """--resume: (the run's Args, with the command line's device, tracking and video, and its step budget unless
    --total-timesteps is given in `argv` (sys.argv); the checkpoint; the run folder). The checkpoint's states are loaded
    later by `restore`; every problem is a one-line ValueError. A finished run (summary.json written) is left as it is."""
    argv = sys.argv[1:] if argv is None else argv
    args.resume = file_in_run(args.resume, "checkpoint.pt")
    script.check_args(run_bookkeeping.effective_args(args))  # a flag that changes nothing is ignored on resume
    checkpoint = load_checkpoint(args.resume, script)
    if "global_step" not in checkpoint:
        raise ValueError(f"{args.resume!r} is a saved model, not a checkpoint: --resume takes checkpoint.pt or its run folder")
    try:
        args = resumed_args(args, checkpoint["args"], argv)
    except (KeyError, TypeError) as error:
        raise ValueError(f"cannot resume from {args.resume!r}: {' '.join(str(error).split())}") from None
    script.check_args(run_bookkeeping.effective_args(args))  # a run started before such flags were refused resumes
    step, run_dir = checkpoint["global_step"], os.path.dirname(os.path.abspath(args.resume))
    if args.total_timesteps < step:
        raise ValueError(
            f"--total-timesteps {args.total_timesteps} is below the checkpoint's step {step}: resuming would repeat steps"
        )
    if args.total_timesteps == step and os.path.isfile(os.path.join(run_dir, "summary.json")):  # else: finish its outputs
        print(
            f"{run_dir} is at step {step} of {step}: nothing to do (a larger --total-timesteps continues it)", file=sys.stderr
        )
        raise SystemExit(0)
    if args.total_timesteps <= args.learning_starts:
        raise ValueError(
            f"--total-timesteps {args.total_timesteps} is not above the run's --learning-starts {args.learning_starts}: "
            "no update would ever run (give a larger --total-timesteps)"
        )
    writable_folder(run_dir)
    return args, checkpoint, run_dir


def restore(checkpoint: dict, stateful: dict, env: gym.Env, device: torch.device) -> tuple:
    """Load every stateful object's state (the checkpoint's entry of the same name) and the RNG states; returns the
    loop's counters (start step, critic updates, evaluation steps and returns, wall time so far). A checkpoint that does
    not fit (an older version of the script) stops the run in one line."""
    try:
        for name, state in stateful.items():
            state.load_state_dict(checkpoint[name])
    except (RuntimeError, KeyError, ValueError) as error:
        raise SystemExit(
            f"{checkpoint['script']}: error: cannot resume from this checkpoint: {' '.join(str(error).split())}"
        ) from None
    torch.set_rng_state(checkpoint["torch_rng"])
    if device.type == "cuda" and checkpoint["cuda_rng"] is not None:
        torch.cuda.set_rng_state(checkpoint["cuda_rng"], device)
    env.unwrapped.np_random.bit_generator.state = checkpoint["env_rng"]
    counters = ("global_step", "num_critic_updates", "eval_steps", "eval_returns", "wall_time_s")
    return tuple(checkpoint[name] for name in counters)


NOISE_FLAGS = ("obs_noise", "obs_noise_scale", "dyn_noise", "dyn_noise_std")
"""the experiment's noise: --evaluate takes these from the command line where given there, else from the run"""


def evaluate_saved_model(args, script: ModuleType, argv: list[str] | None = None) -> None:
    """--evaluate: the saved actor over --eval-episodes deterministic episodes of its run's env and evaluation seeds,
    under the run's noise settings, or under the noise flags given on the command line `argv` (sys.argv; said in one
    line: evaluating a policy under other noise is an experiment of its own); mean +- std printed and written to
    evaluation.json beside the model, with the noise it was evaluated under and the noise the run trained with."""
    argv = sys.argv[1:] if argv is None else argv
    args.evaluate = file_in_run(args.evaluate, "model.pt", "checkpoint.pt")
    script.check_args(args)
    saved = load_checkpoint(args.evaluate, script)
    try:
        run_args = script.Args(**saved["args"])
        if args.env_id not in (script.Args.env_id, run_args.env_id):
            raise ValueError(f"{args.evaluate!r} holds a policy for {run_args.env_id}, not for {args.env_id}")
        trained_noise = {name: getattr(run_args, name) for name in NOISE_FLAGS}
        for name in NOISE_FLAGS:
            if given(argv, name):
                setattr(run_args, name, getattr(args, name))
        if (noise := {name: getattr(run_args, name) for name in NOISE_FLAGS}) != trained_noise:
            differ = [name for name in NOISE_FLAGS if noise[name] != trained_noise[name]]
            said = ", ".join(f"--{name.replace('_', '-')} {noise[name]} (trained: {trained_noise[name]})" for name in differ)
            print(f"evaluating under the noise given: {said}", file=sys.stderr)
        run_args.eval_episodes, run_dir = args.eval_episodes, os.path.dirname(os.path.abspath(args.evaluate))
        writable_folder(run_dir)
        env = (
            make_video_env(run_args, script.make_env, os.path.join(run_dir, "videos"))
            if args.capture_video
            else script.make_env(run_args)
        )
        device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
        actor = script.Actor(env.observation_space.shape[0], env.action_space.shape[0], run_args.hidden_dim).to(device)
        actor.load_state_dict(saved["actor"])
    except (RuntimeError, KeyError, TypeError) as error:
        raise ValueError(f"cannot evaluate {args.evaluate!r}: {' '.join(str(error).split())}") from None
    if args.capture_video:
        env.name_prefix = "evaluate"
    returns = run_bookkeeping.evaluate(actor, env, args.eval_episodes, run_args.seed + 100_000, device)
    result = {
        "model": args.evaluate,
        "env_id": run_args.env_id,
        **{name: getattr(run_args, name) for name in NOISE_FLAGS},
        "trained_noise": trained_noise,
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "returns": returns,
    }
    path, number = os.path.join(run_dir, "evaluation.json"), 1
    while os.path.exists(path):  # earlier evaluations are kept: evaluation-2.json, evaluation-3.json, ...
        number += 1
        path = os.path.join(run_dir, f"evaluation-{number}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(
        f"eval return {result['mean_return']:.2f} +- {result['std_return']:.2f} over {len(returns)} episodes of {run_args.env_id}; written to {path}"
    )
    env.close()


# TRACKING (--track) AND VIDEO (--capture-video)
def start_tracking(args, run_dir: str) -> ModuleType:
    """wandb.init as CleanRL does: TensorBoard synced, hyperparameters and code saved; the W&B run's id is the run
    name, so a resumed run continues it. W&B files go to $WANDB_DIR if set, else runs/wandb/. Returns the wandb module."""
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


# COMPILATION (--compile) AND THE CPU COST NOTE
def compile_parts(actor: nn.Module, world_model: nn.Module | None, script: ModuleType) -> None:
    """torch.compile the parts never differentiated twice or under vmap: the actor, the world-model loss and, in
    DSDPG-MSMMD, the slicing search's chunk of steps."""
    torch._inductor.config.fallback_random = True  # compiled code draws the same random numbers as eager code
    actor.compile()
    if world_model is not None:  # td3_huber --no-dyna has none
        world_model.loss = torch.compile(world_model.loss)
    if hasattr(script, "slicing_steps"):
        script.slicing_steps = torch.compile(script.slicing_steps, fullgraph=True, dynamic=False)


def cpu_cost_note(updates: tuple[Callable, Callable], stateful: dict, args, script_file: str) -> None:
    """Before the warm-up on a CPU: time one critic and one actor update of the fresh networks (under --compile the
    second of two: the first compiles; on the empty buffer's zero rows; every state and the RNG are put back after, so
    the run is unchanged) and, if the learning steps will take over an hour, say so with a CPU-sized command."""
    update_critic, update_actor = updates
    saved = {name: copy.deepcopy(state.state_dict()) for name, state in stateful.items()}
    with torch.random.fork_rng(devices=[]):
        if args.compile:
            update_actor(update_critic()["obs"])
        start = time.perf_counter()
        update_actor(update_critic()["obs"])
        seconds = time.perf_counter() - start
    for name, state in stateful.items():
        state.load_state_dict(saved[name])
    steps = args.total_timesteps - args.learning_starts
    hours = args.updates_per_step * seconds * steps / 3600  # an actor update with every critic update: an upper bound
    if hours > 1:
        print(
            f"note: one update takes {seconds:.2f} s on this CPU, so the {steps} learning steps x {args.updates_per_step} "
            f"updates will take about {hours:.0f} h (plus the warm-up); the defaults are the paper's GPU sizes. A "
            f"CPU-sized run of the same algorithm (README): {cpu_sized_command(args, script_file)}",
            file=sys.stderr,
        )


CPU_SIZES = {  # the README's CPU-sized point-mass run
    "env_id": "PointMass-v0",
    "total_timesteps": 15000,
    "learning_starts": 1000,
    "hidden_dim": 64,
    "wm_hidden_dim": 64,
    "batch_size": 64,
    "updates_per_step": 1,
    "learning_rate": 1e-3,
    "wm_learning_rate": 1e-3,
    "eval_frequency": 1000,
    "eval_episodes": 20,
    "truncation": 5.0,
}
NOT_CARRIED = ("exp_name", "seed", "cuda", "compile", "cudagraphs", "buffer_size", "contraction_frequency", "capture_video")
NOT_CARRIED += ("track", "wandb_project_name", "wandb_entity", "save_model", "checkpoint_frequency", "resume", "evaluate")


def cpu_sized_command(args, script_file: str) -> str:
    """The README's CPU-sized point-mass run for this script, with the run's own algorithm: the sizes the script has
    from CPU_SIZES, in the README's order, then every setting of `args` away from its default that is neither a size
    nor bookkeeping (--no-dyna, --td-loss, the noise, ...); none that the settings make ineffective (--no-dyna: no
    world model)."""
    defaults, names = type(args)(), [field.name for field in fields(args)]
    settings = {name: value for name, value in CPU_SIZES.items() if name in names}
    for name in names:
        value = getattr(args, name)
        if name not in CPU_SIZES and name not in NOT_CARRIED and value != getattr(defaults, name):
            settings[name] = value
    for name in run_bookkeeping.flags_without_effect(type(args)(**{**vars(defaults), **settings})):
        settings.pop(name, None)
    words = [f"python {os.path.basename(script_file)}"]
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + name.replace("_", "-"))
        elif value is not None:
            words.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(words)
