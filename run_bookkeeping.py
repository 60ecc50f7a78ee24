"""A run's bookkeeping, the same in every RL script and no part of any algorithm, written once beside the scripts and
imported by each (as CleanRL's scripts import `cleanrl_utils`): the checks of the flags every script has and of the
env id, the run's settings (--resume and --evaluate: the saved run's), the seeding, its folder, checkpoints (written
and read), stop signals, the progress bar, the NaN guard, the evaluation of the policy and when it is due (--evaluate:
of a saved one), when the contraction monitor is due (the script measures it, on `side_rng()`), `summary.json` and the
CPU cost note.

A script's `main()` holds its control: it checks its flags (`check_args`, which calls `check_finite_flags`, then
`check_flags` for those every script has), takes the run's settings (`run_settings`), makes its envs, evaluates a saved
policy (--evaluate) or opens its `Run` with those values, seeds (`seed_everything`), builds its networks, optimizers
and replay buffer, calls `run.start(...)` and runs its loop `for global_step in run.progress_bar(range(start_step,
args.total_timesteps))` from the step that returns, calling the `Run` methods it names. The module is handed values
only (a script's own checks as a list), never a script's function or class; it runs no algorithm code and imports no
script; it imports flag_extras.py (which imports nothing of the project) under --track and --capture-video.
"""

import atexit
import glob
import itertools
import json
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from dataclasses import asdict, fields, replace
from functools import partial
from typing import NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C, SIGTERM (kill, schedulers) and SIGHUP (a closed terminal or ssh session): each stops a run the same way"""


def on_stop_signals(handler: Callable) -> None:
    """Handle every signal of STOP_SIGNALS with `handler`, but those ignored (a shell's background job ignores SIGINT,
    nohup SIGHUP): they stay ignored."""
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)


def stop_while(doing: str, lost: str, signum: int, frame: object) -> NoReturn:
    """A stop outside the training loop: one line naming what it interrupted and what is lost, exit status 128 + the
    signal's number."""
    name = os.path.basename(sys.argv[0])
    print(f"{name}: stopped by {signal.Signals(signum).name} while {doing}; {lost}", file=sys.stderr)
    raise SystemExit(128 + signum)


stop_while_starting = partial(stop_while, "starting", "no step was run")
"""A stop before the training loop (the imports' seconds, the checks, the envs, the networks); a fresh run's folder,
still empty, is removed at exit (`Run`)."""


_main_file = getattr(sys.modules["__main__"], "__file__", None)  # None: a REPL, `python -c`, a notebook
if _main_file and os.path.dirname(os.path.realpath(_main_file)) == os.path.dirname(os.path.realpath(__file__)):
    on_stop_signals(stop_while_starting)  # a script beside this module, which it imports before torch and gymnasium

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

# The MuJoCo v4 ids are chosen on purpose (README, "Reproducing the paper": v4 keeps the paper's v2 tasks, v5 changes
# them), so gymnasium's "out of date, consider upgrading to v5" is said there once, not printed by every run.
warnings.filterwarnings("ignore", message=r".*The environment \S+-v4 is out of date", category=DeprecationWarning)


# THE FLAGS
def check_finite_flags(args) -> None:
    """Raise ValueError naming the first non-finite float flag: a script's first check of its flags, before any check
    that compares them (its own list for `check_flags` among them)."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} must be finite (got {value})")


def check_flags(args, own_checks: list[tuple[bool, str]]) -> None:
    """Raise ValueError naming the first out-of-range flag: the flags every RL script has, the script's own checks
    ((ok, message) pairs, made after `check_finite_flags`) after the sizes, then the flags without effect, the devices
    and the files.

    A run's flags are checked in this order, before anything is written: tyro (types and choices, as it parses),
    `check_finite_flags` and this list (the script's `check_args`), the files of --resume and --evaluate
    (`run_settings`), the env id and its action space (`make_gym_env`, in the script's `make_env`: they need
    gymnasium's registry), and `check_memory` (the sizes against the machine, which need the env's dimensions; in
    `Run`)."""
    checks = [
        (0 <= args.seed < 2**32, f"--seed must be in [0, 2^32) (got {args.seed})"),
        (args.total_timesteps >= 1, "--total-timesteps must be >= 1"),
        (args.learning_starts >= 0, "--learning-starts must be >= 0"),
        (  # a resumed run is checked with its own settings (read_checkpoint), an evaluation trains nothing
            args.total_timesteps > args.learning_starts or args.resume is not None or args.evaluate is not None,
            f"--total-timesteps {args.total_timesteps} is not above --learning-starts {args.learning_starts}: no "
            "update would ever run (raise --total-timesteps or lower --learning-starts)",
        ),
        (args.batch_size >= 1, "--batch-size must be >= 1"),
        (args.buffer_size >= args.batch_size, "--buffer-size must be >= --batch-size"),
        (0.0 <= args.gamma <= 1.0, "--gamma must be in [0, 1]"),
        (0.0 < args.tau <= 1.0, "--tau must be in (0, 1]"),
        (args.learning_rate > 0 and args.wm_learning_rate > 0, "learning rates must be > 0"),
        (args.updates_per_step >= 1, "--updates-per-step must be >= 1"),
        (args.wm_updates_per_step >= 0, "--wm-updates-per-step must be >= 0"),
        (args.policy_frequency >= 1, "--policy-frequency must be >= 1"),
        (min(args.exploration_noise, args.policy_noise, args.noise_clip) >= 0, "noise scales must be >= 0"),
        (args.hidden_dim >= 1 and (args.wm_hidden_dim is None or args.wm_hidden_dim >= 1), "hidden dims must be >= 1"),
        *own_checks,
        (0.0 <= args.obs_noise_scale < 1.0, "--obs-noise-scale must be in [0, 1)"),
        (args.dyn_noise_std is None or args.dyn_noise_std >= 0, "--dyn-noise-std must be >= 0"),
        *[(args.resume is not None, message) for message in flags_without_effect(args).values()],  # resume: ignored
        (args.eval_frequency >= 1, "--eval-frequency must be >= 1"),
        (args.eval_episodes >= 1, "--eval-episodes must be >= 1"),
        (args.checkpoint_frequency >= 0 and args.contraction_frequency >= 0, "frequencies must be >= 0"),
        (args.evaluate is None or args.resume is None, "--evaluate and --resume exclude each other"),
        (
            args.resume is None or os.path.isfile(file_in_run(args.resume, "checkpoint.pt")),
            f"--resume: no checkpoint at {args.resume and file_in_run(args.resume, 'checkpoint.pt')!r}",
        ),
        (
            args.evaluate is None or os.path.isfile(file_in_run(args.evaluate, "model.pt", "checkpoint.pt")),
            f"--evaluate: no model at {args.evaluate and file_in_run(args.evaluate, 'model.pt', 'checkpoint.pt')!r}",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


def seed_everything(seed: int) -> None:
    """CleanRL's seeding (Python's, numpy's and torch's RNGs; cuDNN deterministic), and denormal floats (below 1e-38)
    computed as 0 on a CPU: each such operand costs ~100 cycles on x86, and they multiply exact zeros (README)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.set_flush_denormal(True)


def training_device(args) -> tuple[torch.device, bool]:
    """The device a run trains on (a CUDA GPU with --cuda and one, else the CPU) and whether its updates run there as
    CUDA graphs (--cudagraphs, a GPU's only). On a GPU float32 matmuls take --matmul-precision: `high` is TF32, what JAX
    (the paper's code) computes them in by default on Ampere and later, `highest` full float32. A CPU is left as it
    is."""
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cuda":
        torch.set_float32_matmul_precision(args.matmul_precision)
    return device, args.cudagraphs and device.type == "cuda"


WORLD_MODEL_FLAGS = ("world_model", "wm_hidden_dim", "wm_learning_rate", "wm_updates_per_step", "dyna_reward")


def flags_without_effect(args) -> dict[str, str]:
    """The flags set away from their defaults that change nothing given the others (a noise's scale without that
    noise; td3_huber's world-model flags with --no-dyna, which builds no world model), by field name, each with the
    message that refuses them on a fresh run."""
    defaults = {name: field.default for name, field in type(args).__dataclass_fields__.items()}
    rules = [  # (the flags change nothing, which, where, the remedy: {flags} and {them} filled in)
        (args.obs_noise != "mult", ["obs_noise_scale"], "without --obs-noise mult", "add it, or drop {flags}"),
        (args.dyn_noise != "gauss", ["dyn_noise_std"], "without --dyn-noise gauss", "add it, or drop {flags}"),
        (not getattr(args, "dyna", True), WORLD_MODEL_FLAGS, "with --no-dyna", "drop {them}, or drop --no-dyna"),
    ]
    found = {}
    for idle, names, where, remedy in rules:
        changed = [name for name in names if idle and getattr(args, name) != defaults[name]]
        flags = ", ".join(f"--{name.replace('_', '-')}" for name in changed)
        them, verb = ("it", "changes") if len(changed) == 1 else ("them", "change")
        found |= {name: f"{flags} {verb} nothing {where} ({remedy.format(flags=flags, them=them)})" for name in changed}
    return found


def effective_args(args):
    """`args` with the flags that change nothing (`flags_without_effect`) put back to their defaults: the settings a run
    of `args` really uses (a checkpoint or a grid job written before those flags were refused compares equal)."""
    return replace(args, **{name: type(args).__dataclass_fields__[name].default for name in flags_without_effect(args)})


def memory_needed(args, obs_dim: int, act_dim: int) -> dict[str, int]:
    """What a run of `args` allocates, in bytes of float32, by part, named with the flags that size it: an order of
    magnitude, a lower bound. The replay buffer; every network weight five times (weights, gradient, the optimizer's
    two moments, a target copy), counting each hidden layer's width x width matrix and its input rows; one update's
    largest tensor, (2 critics, batch, samples, width) floats, the width the widest layer or the (N x 2N) kernel
    matrix. Autograd keeps several such tensors at once, so the real peak is a few times the last part."""
    dyna, extra = getattr(args, "dyna", True), max(getattr(args, "noise_dim", 0), getattr(args, "num_cosines", 0))
    hidden, wm = args.hidden_dim, (args.wm_hidden_dim or (512 if args.world_model == "flow" else 1024)) * dyna
    weights = hidden * (hidden + obs_dim + act_dim) + 2 * hidden * (2 * hidden + 2 * (obs_dim + act_dim + extra))
    weights += 3 * wm * (2 * wm + 4 * (2 * obs_dim + act_dim + 1))  # the cVAE's prior, encoder and decoder
    samples = max(getattr(args, "num_samples", 1), getattr(args, "num_samples_policy", 1))
    widths = f"--hidden-dim {hidden}" + (f", --wm-hidden-dim {wm}" if dyna else "")
    batch = f"--batch-size {args.batch_size}" + (
        f", --num-samples {args.num_samples}" if hasattr(args, "num_samples") else ""
    )
    return {
        f"the replay buffer of --buffer-size {args.buffer_size}": 4 * args.buffer_size * (2 * obs_dim + act_dim + 2),
        f"the networks of {widths} with their optimizer states": 4 * 5 * weights,
        f"one update's largest tensor at {batch}": 4
        * 2
        * args.batch_size
        * samples
        * max(hidden, wm, 2 * samples, extra),
    }


def check_memory(args, obs_dim: int, act_dim: int) -> None:
    """Raise ValueError if `memory_needed` exceeds the memory the run would train in: the GPU's (--cuda with one), else
    this machine's RAM; the refusal names the largest part and what was asked for it."""
    needed = memory_needed(args, obs_dim, act_dim)
    if args.cuda and torch.cuda.is_available():
        available, where = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory, "the GPU has"
    else:
        available, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"
    if sum(needed.values()) > available:
        part, size = max(needed.items(), key=lambda item: item[1])
        raise ValueError(
            f"{part} would need ~{readable_bytes(size)}, more than the {readable_bytes(available)} {where} (the whole "
            f"run: ~{readable_bytes(sum(needed.values()))} at least, an order-of-magnitude estimate); lower the sizes"
        )


def readable_bytes(size: float) -> str:
    """1.2e10 -> '12 GB' (decimal units, three significant digits)."""
    units = ["B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    while size >= 1000 and len(units) > 1:
        size, units = size / 1000, units[1:]
    return f"{size:.3g} {units[0]}"


VALUE_TAG, VALUE_WINDOW = "losses/qf1_values", 2000


def logged_scalars(run_dir: str, *tags: str) -> dict[str, dict[int, float]]:
    """TensorBoard scalars of a run by env step (tag -> {step: value}), each event file read once, over all its event
    files (a resumed run has several; the latest file wins a step); a tag the run never logged maps to {}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values: dict[str, dict[int, float]] = {tag: {} for tag in tags}
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*")), key=os.path.getmtime):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        logged = set(events.Tags()["scalars"])
        for tag in tags:
            if tag in logged:
                values[tag].update({event.step: event.value for event in events.Scalars(tag)})
    return values


def critic_values(run_dir: str, window: int = VALUE_WINDOW) -> dict | None:
    """The first critic's logged values (VALUE_TAG, every 100 steps) over all of a run's event files (a resumed run has
    several; the latest file wins a step): their mean over the last `window` env steps logged and their largest, what
    benchmarks/value_check.py tabulates; None if the run logged none (it ended before learning)."""
    values = logged_scalars(run_dir, VALUE_TAG)[VALUE_TAG]
    if not values:
        return None
    last = max(values)
    recent = [value for step, value in values.items() if step > last - window]
    return {
        "tag": VALUE_TAG,
        "window_steps": window,
        "mean": float(np.mean(recent)),
        "max": float(max(values.values())),
    }


def fail(script: str, message: str) -> NoReturn:
    """One line on stderr, `<script>.py: error: <message>`, exit status 1, no traceback (`script`: its name or path)."""
    raise SystemExit(f"{os.path.basename(script)}: error: {message}")


# THE ENV
def make_gym_env(env_id: str, render_mode: str | None = None) -> gym.Env:
    """gym.make(env_id), refused with a one-line ValueError where the scripts cannot train on it: the paper's MuJoCo
    v2/v3 ids (they need mujoco-py), an id gymnasium cannot make, an action space that is not a bounded Box."""
    spec = gym.registry.get(env_id)
    if spec is not None and "mujoco" in str(spec.entry_point) and env_id[-3:] in ("-v2", "-v3"):
        raise ValueError(f"{env_id} needs mujoco-py (the paper's ids): use {env_id[:-1]}4 or {env_id[:-1]}5")
    try:
        env = gym.make(env_id, render_mode=render_mode)
    except gym.error.Error as error:
        raise ValueError(f"cannot make env {env_id!r}: {error}") from None
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ValueError(f"{env_id} has a {type(env.action_space).__name__} action space; a Box is needed")
    if not np.all(np.isfinite(env.action_space.low) & np.isfinite(env.action_space.high)):
        raise ValueError(f"{env_id} has an unbounded action space")
    return env


# CHECKPOINTS, WRITTEN AND READ (--resume)
def save_checkpoint(path: str, state: dict) -> None:
    """Write atomically, so a crash during the write never destroys the previous checkpoint; `state["script"]` names
    the script that writes it (in the file, and in the error if it cannot be written)."""
    try:
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
    except OSError as error:
        fail(state["script"], f"cannot write {path}: {error.strerror or error}")


def file_in_run(path: str, *names: str) -> str:
    """`path` itself, or in a run folder the first of the files `names` that exists there (else the first name)."""
    if not os.path.isdir(path):
        return path
    found = [os.path.join(path, name) for name in names if os.path.isfile(os.path.join(path, name))]
    return found[0] if found else os.path.join(path, names[0])


def load_checkpoint(path: str, script_name: str) -> dict:
    """torch.load(path, weights_only=True) of a checkpoint or model the script `script_name` wrote; anything else is a
    ValueError."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # garbage, empty and truncated files fail in pickle, zip and OS errors alike
        raise ValueError(f"cannot read {path!r} ({type(error).__name__}): it is damaged, empty or truncated") from None
    if not isinstance(saved, dict) or saved.get("script") != script_name:
        writer = (
            (saved.get("script") or "an older version of the scripts") if isinstance(saved, dict) else "something else"
        )
        raise ValueError(f"{path!r} was written by {writer}; this is {script_name}")
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
    """Whether the flag of Args field `name` is on the command line `argv` (tyro fills in its default otherwise), as
    --name, --name=value or, for a boolean, --no-name, in dashes or underscores (tyro takes both)."""
    flags = ("--" + name.replace("_", "-"), "--no-" + name.replace("_", "-"))
    words = [arg.split("=", 1)[0].replace("_", "-") for arg in argv if arg.startswith("--")]
    return any(word in flags for word in words)


def ignored_flags(cli_args, used, argv: list[str], honoured: tuple[str, ...]) -> list[str]:
    """The flags given on the command line `argv`, or set away from their defaults, that are not in `honoured` and whose
    value is not the one `used` (the saved run's settings): '--name value (the run's: other)' or, for a boolean,
    '--name (the run's: --no-name)', in Args order."""

    def flag(name: str, value) -> str:
        dashed = name.replace("_", "-")
        return (f"--{dashed}" if value else f"--no-{dashed}") if isinstance(value, bool) else f"--{dashed} {value}"

    defaults, found = type(cli_args)(), []
    for field in fields(cli_args):
        name, value = field.name, getattr(cli_args, field.name)
        if (
            name not in honoured
            and (given(argv, name) or value != getattr(defaults, name))
            and value != getattr(used, name)
        ):
            run_value = getattr(used, name)
            found.append(
                f"{flag(name, value)} (the run's: "
                f"{flag(name, run_value) if isinstance(run_value, bool) else run_value})"
            )
    return found


def saved_args(Args: type, saved: dict):
    """A run's saved settings as Args; a setting the run predates takes what that run computed with (full float32
    matmuls before --matmul-precision), else its default."""
    return Args(**{"matmul_precision": "highest", **saved})


def resumed_args(cli_args, saved: dict, argv: list[str]):
    """The checkpoint's settings, its step budget included; the device, tracking and videos come from the command
    line, and where given there the budget and the execution flags (--compile, --cudagraphs, --matmul-precision)."""
    args = saved_args(type(cli_args), saved)
    taken = ("cuda", "resume", "capture_video", "track", "wandb_project_name", "wandb_entity")
    where_given = ("total_timesteps", "compile", "cudagraphs", "matmul_precision")
    for name in taken + where_given:
        if name in taken or given(argv, name):
            setattr(args, name, getattr(cli_args, name))
    taken += where_given
    if ignored := ignored_flags(cli_args, args, argv, taken):
        print(f"warning: ignored on resume, the run keeps its settings: {', '.join(ignored)}", file=sys.stderr)
    return args


def read_checkpoint(args, script_name: str, argv: list[str]) -> tuple:
    """--resume: (the run's Args, with the command line's device, tracking and video, and its step budget unless
    --total-timesteps is given in `argv`, the flags that change nothing at their defaults; the checkpoint). The
    checkpoint's states are loaded later by `restore`; every problem is a one-line ValueError. A finished run
    (summary.json written) is left as it is."""
    args.resume = file_in_run(args.resume, "checkpoint.pt")
    checkpoint = load_checkpoint(args.resume, script_name)
    if "global_step" not in checkpoint:
        raise ValueError(
            f"{args.resume!r} is a saved model, not a checkpoint: --resume takes checkpoint.pt or its run folder"
        )
    try:
        args = effective_args(
            resumed_args(args, checkpoint["args"], argv)
        )  # a run started before such flags were refused
    except (KeyError, TypeError) as error:
        raise ValueError(f"cannot resume from {args.resume!r}: {' '.join(str(error).split())}") from None
    step, run_dir = checkpoint["global_step"], os.path.dirname(os.path.abspath(args.resume))
    if args.total_timesteps < step:
        raise ValueError(
            f"--total-timesteps {args.total_timesteps} is below the checkpoint's step {step}: resuming would repeat "
            "steps"
        )
    if args.total_timesteps == step and os.path.isfile(os.path.join(run_dir, "summary.json")):  # else: its outputs
        print(
            f"{run_dir} is at step {step} of {step}: nothing to do (a larger --total-timesteps continues it)",
            file=sys.stderr,
        )
        raise SystemExit(0)
    if args.total_timesteps <= args.learning_starts:
        raise ValueError(
            f"--total-timesteps {args.total_timesteps} is not above the run's --learning-starts "
            f"{args.learning_starts}: no update would ever run (give a larger --total-timesteps)"
        )
    writable_folder(run_dir)
    return args, checkpoint


def restore(checkpoint: dict, stateful: dict, env: gym.Env, device: torch.device) -> tuple:
    """Load every stateful object's state (the checkpoint's entry of the same name) and the RNG states; returns the
    loop's counters (start step, critic updates, evaluation steps and returns, wall time so far). A checkpoint that does
    not fit (an older version of the script) stops the run in one line."""
    try:
        for name, state in stateful.items():
            built = [group.get("capturable") for group in getattr(state, "param_groups", [])]
            state.load_state_dict(checkpoint[name])
            if isinstance(state, torch.optim.Optimizer):
                keep_capturable(state, built)
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


def keep_capturable(optimizer: torch.optim.Optimizer, built: list) -> None:
    """load_state_dict takes the saved param groups' settings: give back the `capturable` each group was built with
    (CUDA graphs where the resumed run captures them, whatever the run that saved did), its step counts where that
    setting keeps them (float32 on the parameter's device when capturable, on the CPU otherwise)."""
    for group, capturable in zip(optimizer.param_groups, built):
        if capturable is None or group.get("capturable") == capturable:
            continue
        group["capturable"] = capturable
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].to(param.device if capturable else "cpu", torch.float32)


# EVALUATION (periodic, and --evaluate of a saved policy)
def evaluate(actor: nn.Module, env: gym.Env, num_episodes: int, seed: int, device: torch.device) -> list[float]:
    """Returns of the deterministic policy over `num_episodes` episodes reset with seeds seed, seed+1, ...; a video
    being recorded (RecordVideo, --capture-video) is written before returning."""
    returns = []
    for episode in range(num_episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, episode_return = False, 0.0
        while not done:
            with torch.no_grad():
                action = actor(torch.as_tensor(obs, device=device)[None])[0].cpu().numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            episode_return += float(reward)
            done = terminated or truncated
        returns.append(episode_return)
    if getattr(env, "recording", False):
        env.stop_recording()
    return returns


NOISE_FLAGS = ("obs_noise", "obs_noise_scale", "dyn_noise", "dyn_noise_std")
"""the experiment's noise: --evaluate takes these from the command line where given there, else from the run"""


def read_saved_model(args, script_name: str, argv: list[str]) -> tuple:
    """--evaluate: (the saved run's Args, under the noise flags given on the command line `argv`, with its
    --eval-episodes, device and --capture-video; the saved model or checkpoint). The run's own noise settings unless
    noise flags are given (said in one line: evaluating a policy under other noise is an experiment of its own); every
    other flag given that the run's settings override is named in one warning."""
    args.evaluate = file_in_run(args.evaluate, "model.pt", "checkpoint.pt")
    saved = load_checkpoint(args.evaluate, script_name)
    try:
        run_args = saved_args(type(args), saved["args"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"cannot evaluate {args.evaluate!r}: {' '.join(str(error).split())}") from None
    if args.env_id not in (type(args).env_id, run_args.env_id):
        raise ValueError(f"{args.evaluate!r} holds a policy for {run_args.env_id}, not for {args.env_id}")
    taken = ("evaluate", "eval_episodes", "cuda", "capture_video")
    for name in taken + tuple(name for name in NOISE_FLAGS if given(argv, name)):
        setattr(run_args, name, getattr(args, name))
    honoured = (*taken, "env_id", *NOISE_FLAGS)
    if ignored := ignored_flags(args, run_args, argv, honoured):
        print(f"warning: ignored by --evaluate, which uses the run's: {', '.join(ignored)}", file=sys.stderr)
    trained_noise = {name: getattr(saved_args(type(args), saved["args"]), name) for name in NOISE_FLAGS}
    if (noise := {name: getattr(run_args, name) for name in NOISE_FLAGS}) != trained_noise:
        differ = [name for name in NOISE_FLAGS if noise[name] != trained_noise[name]]
        said = ", ".join(
            f"--{name.replace('_', '-')} {noise[name]} (trained: {trained_noise[name]})" for name in differ
        )
        print(f"evaluating under the noise given: {said}", file=sys.stderr)
    writable_folder(os.path.dirname(os.path.abspath(args.evaluate)))
    return run_args, saved


def evaluate_saved_model(args, saved: dict, actor: nn.Module, env: gym.Env) -> None:
    """--evaluate: the saved `actor` (the script's, built for the run's sizes; its weights loaded here) over
    --eval-episodes deterministic episodes of `env` (the run's, under the noise of `args`) from the run's evaluation
    seeds; mean +- std printed and written to evaluation.json beside the model (-2, -3, ... for later ones; videos
    numbered alike), with the noise it was evaluated under and the noise the run trained with."""
    script_name, run_dir = saved["script"], os.path.dirname(os.path.abspath(args.evaluate))
    torch.set_flush_denormal(True)  # as the run computed (seed_everything)
    device, _ = training_device(args)  # on a GPU, the run's matmul precision
    try:
        actor.load_state_dict(saved["actor"])
    except (RuntimeError, KeyError) as error:
        fail(script_name, f"cannot evaluate {args.evaluate!r}: {' '.join(str(error).split())}")
    path, prefix = evaluation_outputs(run_dir)
    on_stop_signals(partial(stop_while, "evaluating", f"{os.path.basename(path)} not written"))
    if args.capture_video:
        from flag_extras import record_video

        env = record_video(env, os.path.join(run_dir, "videos"), args.eval_episodes, prefix)
    returns = evaluate(actor.to(device), env, args.eval_episodes, args.seed + 100_000, device)
    result = {
        "model": args.evaluate,
        "env_id": args.env_id,
        **{name: getattr(args, name) for name in NOISE_FLAGS},
        "trained_noise": {name: getattr(saved_args(type(args), saved["args"]), name) for name in NOISE_FLAGS},
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "returns": returns,
    }
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(
        f"eval return {result['mean_return']:.2f} +- {result['std_return']:.2f} over {len(returns)} episodes of "
        f"{args.env_id}; written to {path}"
    )
    env.close()


def evaluation_outputs(run_dir: str) -> tuple[str, str]:
    """The next --evaluate's JSON path and video name prefix in a run folder, numbered alike so that earlier ones are
    kept: evaluation.json and videos/evaluate-episode-0.mp4, then evaluation-2.json and evaluate-2-episode-0.mp4, ..."""
    for number in itertools.count(1):
        suffix = "" if number == 1 else f"-{number}"
        path, prefix = os.path.join(run_dir, f"evaluation{suffix}.json"), f"evaluate{suffix}"
        if not os.path.exists(path) and not glob.glob(
            os.path.join(glob.escape(run_dir), "videos", f"{prefix}-episode-*")
        ):
            return path, prefix


# THE RUN
def run_settings(args, script_file: str, argv: list[str] | None = None) -> tuple:
    """The settings a run of the flags `args` (checked by the script) uses, and what it saved: a fresh run's are `args`
    (nothing saved); --resume's the checkpoint's, with the checkpoint (`read_checkpoint`); --evaluate's the saved
    run's, with the saved model (`read_saved_model`). `argv` (sys.argv) tells which flags were given. A problem with
    a file is a one-line ValueError; --capture-video also picks MuJoCo's headless GL backend here."""
    argv = sys.argv[1:] if argv is None else argv
    script_name = os.path.basename(script_file)
    saved = None
    if args.resume is not None:
        args, saved = read_checkpoint(args, script_name, argv)
    elif args.evaluate is not None:
        args, saved = read_saved_model(args, script_name, argv)
    if args.capture_video:
        from flag_extras import headless_rendering

        headless_rendering(args.env_id)
    return args, saved


def make_run_folder(run_dir: str) -> tuple[str, list[str]]:
    """Create the folder `run_dir` (CleanRL's runs/<run name>) exclusively, or `run_dir`__2, __3, ... if another run
    made it (two runs started in the same second): a run never writes into a folder another run made. Returns the
    folder and the folders created (it, then its parent `runs/` if new); a failure is a one-line ValueError."""
    parent, created = os.path.dirname(run_dir), []
    try:
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)  # another run may make it at the same time
            created.append(parent)
        for number in itertools.count(1):
            name = run_dir if number == 1 else f"{run_dir}__{number}"
            try:
                os.mkdir(name)
                return name, [name, *created]
            except FileExistsError:
                continue
    except OSError as error:
        for folder in created:  # `runs/`, made here, if no other run is in it yet
            with suppress(OSError):
                os.rmdir(folder)
        raise ValueError(f"cannot write to {run_dir}: {error.strerror or error}") from None


def remove_unstarted(created: list[str]) -> None:
    """Remove the folders a fresh run created (its own, then `runs/` if it was new) if no file was written in them: a
    run that fails before its first step leaves nothing behind."""
    for folder in created:
        if folder == created[0] and not any(files for _, _, files in os.walk(folder)):
            shutil.rmtree(folder, ignore_errors=True)  # with an empty videos/, --capture-video's
        with suppress(OSError):
            os.rmdir(folder)  # `runs/` only if empty: another run may have started in it


class Run:
    """A run's bookkeeping around the algorithm: the progress bar, TensorBoard, periodic evaluation, checkpoints (at the
    first episode end after every --checkpoint-frequency steps, at the end, on Ctrl-C or SIGTERM), the NaN guard and
    summary.json. A checkpoint holds every object of `stateful` by name, the step, the counters and the RNG states."""

    def __init__(self, script_file: str, args, checkpoint: dict | None, env: gym.Env, eval_env: gym.Env):
        """The run of the script at `script_file` (its `__file__`) with the settings `args` and the `checkpoint` of
        `run_settings`, training in `env` and evaluating in `eval_env` (made with render_mode "rgb_array" under
        --capture-video): the memory check, its folder (a resumed run's own), the videos and W&B (--track). A problem
        is one line (`fail`), and a fresh run's folder, still empty, is removed."""
        self.script_name, created, self.cleanup = os.path.basename(script_file), [], None
        self.args, self.checkpoint, self.env, self.eval_env, self.wandb = args, checkpoint, env, eval_env, None
        try:
            check_memory(args, env.observation_space.shape[0], env.action_space.shape[0])
            if checkpoint is None:
                name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
                self.run_dir, created = make_run_folder(os.path.join("runs", name))
                self.cleanup = partial(remove_unstarted, created)  # a failure or stop before the first step: removed
                atexit.register(self.cleanup)
            else:  # a resumed run writes on in its own folder
                self.run_dir = os.path.dirname(os.path.abspath(args.resume))
            if args.capture_video:
                from flag_extras import record_video

                self.eval_env = record_video(eval_env, os.path.join(self.run_dir, "videos"), args.eval_episodes)
            if args.track:
                from flag_extras import start_tracking

                self.wandb = start_tracking(args, self.run_dir)
        except ValueError as error:
            remove_unstarted(created)
            fail(self.script_name, str(error))
        self.checkpoint_path = os.path.join(self.run_dir, "checkpoint.pt")

    def start(self, stateful: dict, device: torch.device) -> int:
        """Before the loop: with --resume every state of `stateful` (None: not built) and the RNGs as they were;
        TensorBoard, SIGTERM as Ctrl-C. Returns the step the loop starts at (0, or the checkpoint's)."""
        args, checkpoint = self.args, self.checkpoint
        self.stateful = {name: state for name, state in stateful.items() if state is not None}
        self.device = device
        counters = (0, 0, [], [], 0.0)
        if checkpoint is not None:  # --resume: every state and RNG as they were
            counters = restore(checkpoint, self.stateful, self.env, device)
            print(f"resuming {self.run_dir} at step {counters[0]}", file=sys.stderr)
        self.start_step, self.num_critic_updates, self.eval_steps, self.eval_returns, self.previous_wall_time = counters
        self.writer = SummaryWriter(self.run_dir, purge_step=self.start_step if checkpoint is not None else None)
        if self.cleanup is not None:  # the run has started: its folder stays
            atexit.unregister(self.cleanup)
        if checkpoint is None:
            table = "\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])
            self.writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{table}")
        self.last_checkpoint_step, self.sps, self.progress = self.start_step, 0, None
        self.start_time = time.time()
        self.cost_note_due, self.cost_clock = device.type == "cpu", None  # a CPU run's, resumed or not
        self.next_step, self.looping, self.stop_requested = self.start_step, False, False
        on_stop_signals(self.stop_after_the_step)  # from here on, SIGTERM and SIGHUP are Ctrl-C
        return self.start_step

    def stop_after_the_step(self, signum: int, frame: object) -> None:
        """Ctrl-C, SIGTERM (what Slurm and most schedulers send before killing a job) or SIGHUP (a closed terminal) in
        the loop: the step under way ends, then the loop raises KeyboardInterrupt, so the checkpoint holds whole steps.
        A second one, or one outside the loop, raises it at once."""
        if self.stop_requested or not self.looping:
            raise KeyboardInterrupt
        self.stop_requested = True

    def progress_bar(self, steps: range) -> Iterator[int]:
        """The loop's steps with a progress bar over the whole run (a resumed run's starts at its step), ended after the
        step under way by a stop (whole_steps)."""
        self.progress = tqdm(
            steps, initial=steps.start, total=self.args.total_timesteps, desc=self.args.exp_name, mininterval=1.0
        )
        return self.whole_steps(self.progress)

    def whole_steps(self, bar: tqdm) -> Iterator[int]:
        """The bar's steps; a stop asked for during a step raises KeyboardInterrupt once that step is done."""
        self.looping = True
        try:
            for step in bar:
                if self.stop_requested:
                    raise KeyboardInterrupt
                yield step
                self.next_step = step + 1  # the step is done: a checkpoint from here on starts after it
        finally:
            self.looping = False

    def state(self, next_step: int) -> dict:
        """Everything a resumed run needs: tensors and plain Python values only (loads with weights_only=True)."""
        counters = dict(global_step=next_step, num_critic_updates=self.num_critic_updates, eval_steps=self.eval_steps)
        counters.update(
            eval_returns=self.eval_returns, wall_time_s=self.previous_wall_time + time.time() - self.start_time
        )
        rng = dict(torch_rng=torch.get_rng_state(), env_rng=self.env.unwrapped.np_random.bit_generator.state)
        rng["cuda_rng"] = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        states = {name: state.state_dict() for name, state in self.stateful.items()}
        return {"script": self.script_name, "args": asdict(self.args), **counters, **states, **rng}

    def contraction_due(self, step: int) -> bool:
        """Whether the contraction factor is measured at this step: every --contraction-frequency steps once learning
        has started (0: never)."""
        frequency = self.args.contraction_frequency
        return frequency > 0 and step >= self.args.learning_starts and step % frequency == 0

    def side_rng(self) -> AbstractContextManager:
        """A fork of torch's RNGs (the CPU's and the training GPU's; after `start`, which sets the device): what is
        drawn inside leaves training's draws as they would have been without it."""
        return torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])

    def log_contraction(self, factors: torch.Tensor, step: int) -> None:
        """The contraction factors gamma kappa of a batch (B,): their median and their largest."""
        self.writer.add_scalar("charts/contraction_gamma_kappa", factors.median().item(), step)
        self.writer.add_scalar("charts/contraction_gamma_kappa_max", factors.max().item(), step)

    def log_episode(self, info: dict, step: int) -> None:
        if "episode" in info:
            self.writer.add_scalar("charts/episodic_return", info["episode"]["r"], step)
            self.writer.add_scalar("charts/episodic_length", info["episode"]["l"], step)

    def check_finite(self, losses: dict[str, torch.Tensor], step: int) -> None:
        """Stop at a non-finite loss (the world model's from its first step, the critic's and actor's once learning
        starts), checked every 100 steps and at the last (the loop's one host sync), saving the state to
        nonfinite_checkpoint.pt for inspection."""
        checked = bool(losses) and (step % 100 == 0 or step + 1 == self.args.total_timesteps)
        if checked and not torch.isfinite(torch.stack(list(losses.values()))).all():
            bad = ", ".join(f"{name}={value.item()}" for name, value in losses.items())
            path = os.path.join(self.run_dir, "nonfinite_checkpoint.pt")
            save_checkpoint(path, self.state(step + 1))
            fail(
                self.script_name,
                f"non-finite loss at step {step} (checked every 100 steps; {bad}); state saved to {path}",
            )

    def log_speed(self, step: int) -> None:
        """SPS every 100 steps; the CPU cost note once the learning steps can be timed."""
        if step % 100 == 0:
            self.sps = int((step + 1 - self.start_step) / (time.time() - self.start_time))
            self.writer.add_scalar("charts/SPS", self.sps, step)
            self.progress.set_postfix(
                SPS=self.sps, eval=self.eval_returns[-1] if self.eval_returns else None, refresh=False
            )
            if self.cost_note_due and step >= self.args.learning_starts + 100:
                self.time_the_learning_steps(step)

    def time_the_learning_steps(self, step: int) -> None:
        """A CPU run's cost note, priced from its own learning steps: the wall time of the first 100 steps logged from
        100 steps after learning starts on (the first 100 may compile, under --compile), or after a resume, and, if the
        remaining steps will take over an hour at that rate, a note saying so, with a CPU-sized run of the same
        algorithm (`cpu_sized_command`)."""
        if self.cost_clock is None:
            self.cost_clock = (step, time.perf_counter())
            return
        seconds = (time.perf_counter() - self.cost_clock[1]) / (step - self.cost_clock[0])
        self.cost_note_due, steps = False, self.args.total_timesteps - step
        if seconds * steps > 3600:
            self.progress.write(
                f"note: a learning step takes {seconds:.2f} s on this CPU (--updates-per-step "
                f"{self.args.updates_per_step}), so the {steps} steps left will take about "
                f"{seconds * steps / 3600:.0f} h; the defaults are the paper's GPU sizes. A CPU-sized run of the same "
                f"algorithm (README): {cpu_sized_command(self.args, self.script_name)}",
                file=sys.stderr,
            )

    def evaluate_if_due(self, actor: nn.Module, step: int) -> None:
        """Every --eval-frequency steps and at the end: the deterministic policy on the same evaluation seeds."""
        if (step + 1) % self.args.eval_frequency != 0 and step + 1 != self.args.total_timesteps:
            return
        if self.args.capture_video:
            self.eval_env.name_prefix = f"eval-step-{step + 1}"  # the evaluation's first episode is filmed
        returns = evaluate(actor, self.eval_env, self.args.eval_episodes, self.args.seed + 100_000, self.device)
        self.eval_steps.append(step + 1)
        self.eval_returns.append(float(np.mean(returns)))
        self.writer.add_scalar("eval/episodic_return", self.eval_returns[-1], step + 1)
        if self.args.capture_video and self.wandb is not None:
            from flag_extras import log_eval_video

            log_eval_video(self.wandb, self.run_dir, step + 1)
        self.progress.set_postfix(SPS=self.sps, eval=self.eval_returns[-1], refresh=False)

    def checkpoint_if_due(self, step: int) -> None:
        """At an episode end, once --checkpoint-frequency steps have passed: a resumed run continues as if never
        stopped."""
        if self.args.checkpoint_frequency and step + 1 - self.last_checkpoint_step >= self.args.checkpoint_frequency:
            save_checkpoint(self.checkpoint_path, self.state(step + 1))
            self.last_checkpoint_step = step + 1

    def interrupted(self) -> NoReturn:
        """After a stop: the checkpoint of the steps done (whole ones, unless a second stop cut one short), one line."""
        step = self.next_step
        save_checkpoint(self.checkpoint_path, self.state(step))
        self.writer.close()
        if self.progress is not None:  # None: stopped before the loop
            self.progress.close()
        typed = sys.argv[0] if os.path.basename(sys.argv[0]) == self.script_name else self.script_name  # as it was run
        # a script run by its absolute path (a grid job, in a folder of its own):
        # the checkpoint's too, to paste anywhere
        path = os.path.abspath(self.checkpoint_path) if os.path.isabs(typed) else self.checkpoint_path
        fail(self.script_name, f"interrupted at step {step}; resume with: python {typed} --resume {path}")

    def finish(self, model: dict[str, nn.Module]) -> None:
        """The last checkpoint, model.pt (--save-model), summary.json."""
        self.progress.close()
        args, returns = self.args, self.eval_returns
        save_checkpoint(self.checkpoint_path, self.state(args.total_timesteps))
        if args.save_model:
            weights = {name: network.state_dict() for name, network in model.items()}
            save_checkpoint(
                os.path.join(self.run_dir, "model.pt"), {"script": self.script_name, **weights, "args": asdict(args)}
            )
        summary = dict(
            final_eval_return=returns[-1],
            eval_steps=self.eval_steps,
            eval_returns=returns,
            nauc=float(np.mean(returns)),
        )
        self.writer.flush()
        summary["critic_values"] = critic_values(self.run_dir)
        summary.update(wall_time_s=self.previous_wall_time + time.time() - self.start_time, args=asdict(args))
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print(
            f"final eval return {summary['final_eval_return']:.2f}, nAUC {summary['nauc']:.2f}; outputs in "
            f"{self.run_dir}"
        )
        for closing in (self.env, self.eval_env, self.writer):
            closing.close()
        if self.wandb is not None:
            self.wandb.finish()


# THE CPU COST NOTE
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
NOT_CARRIED = (
    "exp_name",
    "seed",
    "cuda",
    "compile",
    "cudagraphs",
    "matmul_precision",
    "buffer_size",
    "contraction_frequency",
)
NOT_CARRIED += ("capture_video",)
NOT_CARRIED += (
    "track",
    "wandb_project_name",
    "wandb_entity",
    "save_model",
    "checkpoint_frequency",
    "resume",
    "evaluate",
)


def cpu_sized_command(args, script_name: str) -> str:
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
    for name in flags_without_effect(type(args)(**{**vars(defaults), **settings})):
        settings.pop(name, None)
    words = [f"python {script_name}"]
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + name.replace("_", "-"))
        elif value is not None:
            words.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(words)
