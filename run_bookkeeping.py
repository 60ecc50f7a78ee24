"""A run's bookkeeping, the same in every RL script and no part of any algorithm, written once beside the scripts and
imported by each (as CleanRL's scripts import `cleanrl_utils`): the checks of the flags every script has, the run folder
and its envs, checkpoint writing and reading (resume), SIGTERM, the progress bar, the NaN guard, the evaluation of the
policy and when it is due, periodic checkpoints, `summary.json` and the CPU cost note.

A script's `main()` calls `open_run(args, script)`, builds its networks, optimizers and replay buffer, calls
`run.start(...)` and runs its loop `for global_step in run.progress_bar(range(start_step, args.total_timesteps))` from
the step that returns, calling the `Run` methods it names. Functions that need a script's own pieces take the script's
module (`script`) and use its `check_args` and `make_env`.
"""

import atexit
import glob
import itertools
import json
import math
import os
import shutil
import signal
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, replace
from functools import partial
from types import ModuleType
from typing import NoReturn

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

# The MuJoCo v4 ids are chosen on purpose (README, "Reproducing the paper": v4 keeps the paper's v2 tasks, v5 changes
# them), so gymnasium's "out of date, consider upgrading to v5" is said there once, not printed by every run.
warnings.filterwarnings("ignore", message=r".*The environment \S+-v4 is out of date", category=DeprecationWarning)


def check_flags(args, own_checks: Callable[[], list[tuple[bool, str]]] = list) -> None:
    """Raise ValueError naming the first non-finite float flag, else the first out-of-range flag: the flags every RL
    script has, the script's own `own_checks()` ((ok, message) pairs, made after the finiteness check) after the sizes,
    then the devices and files."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} must be finite (got {value})")
    checks = [
        (0 <= args.seed < 2**32, f"--seed must be in [0, 2^32) (got {args.seed})"),
        (args.total_timesteps >= 1, "--total-timesteps must be >= 1"),
        (args.learning_starts >= 0, "--learning-starts must be >= 0"),
        (  # a resumed run is checked with its own settings (flag_extras.read_checkpoint), an evaluation trains nothing
            args.total_timesteps > args.learning_starts or args.resume is not None or args.evaluate is not None,
            f"--total-timesteps {args.total_timesteps} is not above --learning-starts {args.learning_starts}: no update "
            "would ever run (raise --total-timesteps or lower --learning-starts)",
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
        *own_checks(),
        (0.0 <= args.obs_noise_scale < 1.0, "--obs-noise-scale must be in [0, 1)"),
        (args.dyn_noise_std is None or args.dyn_noise_std >= 0, "--dyn-noise-std must be >= 0"),
        *[(False, message) for message in flags_without_effect(args).values()],
        (args.eval_frequency >= 1, "--eval-frequency must be >= 1"),
        (args.eval_episodes >= 1, "--eval-episodes must be >= 1"),
        (args.checkpoint_frequency >= 0 and args.contraction_frequency >= 0, "frequencies must be >= 0"),
        (not args.cudagraphs or (args.cuda and torch.cuda.is_available()), "--cudagraphs needs a CUDA GPU (and --cuda)"),
        (args.evaluate is None or args.resume is None, "--evaluate and --resume exclude each other"),
        (args.resume is None or os.path.isfile(args.resume), f"--resume: no checkpoint at {args.resume!r}"),
        (args.evaluate is None or os.path.isfile(args.evaluate), f"--evaluate: no model at {args.evaluate!r}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


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
    batch = f"--batch-size {args.batch_size}" + (f", --num-samples {args.num_samples}" if hasattr(args, "num_samples") else "")
    return {
        f"the replay buffer of --buffer-size {args.buffer_size}": 4 * args.buffer_size * (2 * obs_dim + act_dim + 2),
        f"the networks of {widths} with their optimizer states": 4 * 5 * weights,
        f"one update's largest tensor at {batch}": 4 * 2 * args.batch_size * samples * max(hidden, wm, 2 * samples, extra),
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
            f"{part} would need ~{readable_bytes(size)}, more than the {readable_bytes(available)} {where} (the whole run: "
            f"~{readable_bytes(sum(needed.values()))} at least, an order-of-magnitude estimate); lower the sizes"
        )


def readable_bytes(size: float) -> str:
    """1.2e10 -> '12 GB' (decimal units, three significant digits)."""
    units = ["B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    while size >= 1000 and len(units) > 1:
        size, units = size / 1000, units[1:]
    return f"{size:.3g} {units[0]}"


VALUE_TAG, VALUE_WINDOW = "losses/qf1_values", 2000


def critic_values(run_dir: str, window: int = VALUE_WINDOW) -> dict | None:
    """The first critic's logged values (VALUE_TAG, every 100 steps) over all of a run's event files (a resumed run has
    several; the latest file wins a step): their mean over the last `window` env steps logged and their largest, what
    benchmarks/value_check.py tabulates; None if the run logged none (it ended before learning)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    values: dict[int, float] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*")), key=os.path.getmtime):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        if VALUE_TAG in events.Tags()["scalars"]:
            values.update({event.step: event.value for event in events.Scalars(VALUE_TAG)})
    if not values:
        return None
    last = max(values)
    recent = [value for step, value in values.items() if step > last - window]
    return {"tag": VALUE_TAG, "window_steps": window, "mean": float(np.mean(recent)), "max": float(max(values.values()))}


def fail(script_name: str, message: str) -> NoReturn:
    """One line on stderr, `<script>.py: error: <message>`, exit status 1, no traceback."""
    raise SystemExit(f"{script_name}: error: {message}")


def save_checkpoint(path: str, state: dict) -> None:
    """Write atomically, so a crash during the write never destroys the previous checkpoint; `state["script"]` names
    the script that writes it (in the file, and in the error if it cannot be written)."""
    try:
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
    except OSError as error:
        fail(state["script"], f"cannot write {path}: {error.strerror or error}")


def raise_keyboard_interrupt(signum: int, frame: object) -> None:
    """SIGTERM, what Slurm and most schedulers send before killing a job, stops a run like Ctrl-C: checkpoint, exit."""
    raise KeyboardInterrupt


def evaluate(actor: nn.Module, env: gym.Env, num_episodes: int, seed: int, device: torch.device) -> list[float]:
    """Returns of the deterministic policy over `num_episodes` episodes reset with seeds seed, seed+1, ...; a video being
    recorded (RecordVideo, --capture-video) is written before returning."""
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


def open_run(args, script: ModuleType) -> "Run":
    """The run of `args` for `script` (the calling script's module): its checked flags (--resume: the checkpoint's
    settings and the checkpoint), its folder, its training and evaluation envs and W&B (--track). --evaluate evaluates
    the saved model and exits; a bad flag or file exits in one line (`fail`)."""
    checkpoint, wandb, created = None, None, []
    try:
        if args.evaluate is not None:
            from flag_extras import evaluate_saved_model

            evaluate_saved_model(args, script)
            raise SystemExit(0)
        if args.resume is not None:
            from flag_extras import read_checkpoint

            args, checkpoint, run_dir = read_checkpoint(args, script)
        else:
            script.check_args(args)
            run_dir = os.path.join("runs", f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
        env = script.make_env(args)
        check_memory(args, env.observation_space.shape[0], env.action_space.shape[0])
        if checkpoint is None:  # a resumed run writes on in its own folder
            run_dir, created = make_run_folder(run_dir)
        if args.capture_video:
            from flag_extras import make_video_env

            eval_env = make_video_env(args, script.make_env, os.path.join(run_dir, "videos"))
        else:
            eval_env = script.make_env(args)
        if args.track:
            from flag_extras import start_tracking

            wandb = start_tracking(args, run_dir)
    except ValueError as error:
        remove_unstarted(created)
        fail(os.path.basename(script.__file__), str(error))
    run = Run(script, args, checkpoint, run_dir, (env, eval_env), wandb)
    if created:  # a failure before the first step (an allocation, Ctrl-C) leaves no empty folder either
        run.cleanup = partial(remove_unstarted, created)
        atexit.register(run.cleanup)
    return run


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

    def __init__(self, script: ModuleType, args, checkpoint: dict | None, run_dir: str, envs: tuple, wandb):
        self.script, self.script_name = script, os.path.basename(script.__file__)
        self.args, self.checkpoint, self.run_dir, self.wandb = args, checkpoint, run_dir, wandb
        self.env, self.eval_env = envs
        self.checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
        self.cleanup = None  # open_run's removal of a fresh run's folder at exit, until the run starts

    def start(self, stateful: dict, device: torch.device, updates: tuple[Callable, Callable]) -> int:
        """Before the loop: the CPU cost note of the `updates` (a fresh run on a CPU), then with --resume every state of
        `stateful` (None: not built) and the RNGs as they were; TensorBoard, SIGTERM as Ctrl-C. Returns the step the loop
        starts at (0, or the checkpoint's)."""
        args, checkpoint = self.args, self.checkpoint
        self.stateful = {name: state for name, state in stateful.items() if state is not None}
        self.device = device
        if device.type == "cpu" and checkpoint is None:  # what the run will cost, before the warm-up
            with suppress(ImportError):  # advice only: a script copied without flag_extras.py runs without it
                from flag_extras import cpu_cost_note

                cpu_cost_note(updates, self.stateful, args, self.script.__file__)
        counters = (0, 0, [], [], 0.0)
        if checkpoint is not None:  # --resume: every state and RNG as they were
            from flag_extras import restore

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
        signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # from here on, SIGTERM is Ctrl-C
        return self.start_step

    def progress_bar(self, steps: range) -> tqdm:
        """The loop's steps with a progress bar over the whole run (a resumed run's starts at its step)."""
        self.progress = tqdm(
            steps, initial=steps.start, total=self.args.total_timesteps, desc=self.args.exp_name, mininterval=1.0
        )
        return self.progress

    def state(self, next_step: int) -> dict:
        """Everything a resumed run needs: tensors and plain Python values only (loads with weights_only=True)."""
        counters = dict(global_step=next_step, num_critic_updates=self.num_critic_updates, eval_steps=self.eval_steps)
        counters.update(eval_returns=self.eval_returns, wall_time_s=self.previous_wall_time + time.time() - self.start_time)
        rng = dict(torch_rng=torch.get_rng_state(), env_rng=self.env.unwrapped.np_random.bit_generator.state)
        rng["cuda_rng"] = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        states = {name: state.state_dict() for name, state in self.stateful.items()}
        return {"script": self.script_name, "args": asdict(self.args), **counters, **states, **rng}

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
            fail(self.script_name, f"non-finite loss at step {step} (checked every 100 steps; {bad}); state saved to {path}")

    def log_speed(self, step: int) -> None:
        """SPS every 100 steps."""
        if step % 100 == 0:
            self.sps = int((step + 1 - self.start_step) / (time.time() - self.start_time))
            self.writer.add_scalar("charts/SPS", self.sps, step)
            self.progress.set_postfix(SPS=self.sps, eval=self.eval_returns[-1] if self.eval_returns else None, refresh=False)

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
        """At an episode end, once --checkpoint-frequency steps have passed: a resumed run continues as if never stopped."""
        if self.args.checkpoint_frequency and step + 1 - self.last_checkpoint_step >= self.args.checkpoint_frequency:
            save_checkpoint(self.checkpoint_path, self.state(step + 1))
            self.last_checkpoint_step = step + 1

    def interrupted(self, step: int) -> NoReturn:
        save_checkpoint(self.checkpoint_path, self.state(step))
        self.writer.close()
        if self.progress is not None:  # None: stopped before the loop
            self.progress.close()
        typed = sys.argv[0] if os.path.basename(sys.argv[0]) == self.script_name else self.script_name  # as it was run
        fail(self.script_name, f"interrupted at step {step}; resume with: python {typed} --resume {self.checkpoint_path}")

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
            final_eval_return=returns[-1], eval_steps=self.eval_steps, eval_returns=returns, nauc=float(np.mean(returns))
        )
        self.writer.flush()
        summary["critic_values"] = critic_values(self.run_dir)
        summary.update(wall_time_s=self.previous_wall_time + time.time() - self.start_time, args=asdict(args))
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        print(f"final eval return {summary['final_eval_return']:.2f}, nAUC {summary['nauc']:.2f}; outputs in {self.run_dir}")
        for closing in (self.env, self.eval_env, self.writer):
            closing.close()
        if self.wandb is not None:
            self.wandb.finish()
