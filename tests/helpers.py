"""Shared test helpers: run a script as a user would and read its outputs back."""

import contextlib
import importlib.util
import io
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import traceback
import warnings
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parents[1]
RL_SCRIPTS = ("td3_huber", "mage_huber_sobolev", "mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev")
"""The six RL scripts (module names), in the paper's order of the baselines then DSDPG."""


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the benchmarks folder is not a package); name may hold a subfolder, e.g.
    "investigations/dyna_flag_probe"."""
    spec = importlib.util.spec_from_file_location(Path(name).name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run's TensorBoard events: tag -> [(step, value), ...]."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def only_run_dir(cwd: str | Path) -> Path:
    """The single run directory a script created under cwd/runs (runs/wandb holds W&B's files, with --track)."""
    runs = [path for path in (Path(cwd) / "runs").iterdir() if path.name != "wandb"]
    assert len(runs) == 1, runs
    return runs[0]


def read_summary(run_dir: str | Path) -> dict:
    with open(Path(run_dir) / "summary.json") as f:
        return json.load(f)


def run_script(script: str, *flags: str, cwd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python <script> <flags>` from cwd as a user would; outputs land in cwd/runs."""
    return subprocess.run(
        [sys.executable, str(ROOT / script), *flags], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


class Captured(io.StringIO):
    """A captured stream that says it is UTF-8, as a process's pipes are here (rich, which tyro's usage errors use,
    draws boxes then, ASCII otherwise)."""

    encoding = "utf-8"


def run_script_in_process(script: str, *flags: str, cwd: str | Path) -> subprocess.CompletedProcess:
    """What `python <script> <flags>` from cwd prints and exits with, run in this process: the script executed as
    `__main__` with those argv (runpy), its stdout and stderr captured, and its exit turned into the status `subprocess`
    reports (SystemExit's code modulo 256, or 1 with its message printed; another exception's traceback printed, status
    1; Ctrl-C's, -SIGINT). Warnings go to that stderr under the test's filters, which pytest makes show every
    deprecation: each warning a new process would show appears (once per place at least), and some it would hide may
    too. For commands that refuse or only print: a process start costs ~4 s of imports. What only a process shows
    (signals, a failure at exit, warnings raised while a library is first imported) is run_script's."""
    stdout, stderr, old_cwd, old_argv = Captured(), Captured(), os.getcwd(), sys.argv
    try:
        os.chdir(cwd)
        sys.argv = [str(ROOT / script), *flags]
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.filterwarnings(
                "default", append=True
            )  # no change of action; the registries of shown warnings reset
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
                warnings.formatwarning(message, category, filename, lineno, line)
            )
            try:
                runpy.run_path(str(ROOT / script), run_name="__main__")
                status = 0
            except SystemExit as exit_:
                status = exit_.code % 256 if isinstance(exit_.code, int) else int(exit_.code is not None)
                if exit_.code is not None and not isinstance(exit_.code, int):
                    print(exit_.code, file=sys.stderr)
            except Exception:
                traceback.print_exc()
                status = 1
            except KeyboardInterrupt:
                traceback.print_exc()
                status = -signal.SIGINT
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
    return subprocess.CompletedProcess([script, *flags], status, stdout.getvalue(), stderr.getvalue())


PROGRESS_BAR = re.compile(r"\d%\||(it/s|s/it)[,\]]")  # tqdm's "77%|███" and "10.20it/s, ...]" or "?it/s]"


def error_lines(result: subprocess.CompletedProcess | str) -> list[str]:
    """The non-empty lines of a result's stderr (or of a stderr string), progress-bar redraws removed."""
    stderr = result if isinstance(result, str) else result.stderr
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.strip() and not PROGRESS_BAR.search(line)]


def read_wandb_run(run_file: str | Path) -> tuple[list[dict], dict]:
    """(history rows, config) of an offline W&B run file (run-<id>.wandb): W&B's LevelDB-style log of protobuf records
    (a 7-byte header, then 32 KiB blocks of [crc32 (4), length (2), type (1), data] chunks; type 1 = whole record,
    2/3/4 = first/middle/last piece)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, pending, rows, config = Path(run_file).read_bytes(), 7, b"", [], {}
    assert data[:4] == b":W&B", "not a W&B run file"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
            elif kind in ("config", "run"):  # the hyperparameters come with the run record, later changes alone
                items = record.config.update if kind == "config" else record.run.config.update
                config.update({item.key: json.loads(item.value_json) for item in items})
    return rows, config


def dyna_batch(obs, actions, rewards, terminations):
    """A replay batch for the target functions, which draw s' from the world model (next_obs is never read: zeros)."""
    import torch

    import replay_buffer

    return replay_buffer.ReplayBatch(obs, actions, rewards, torch.zeros_like(obs), terminations)


def tiny_target_networks(module, world_model_kind: str, seed: int, obs_dim: int = 3, act_dim: int = 2) -> tuple:
    """(world model with non-trivial normaliser statistics, target actor, target critics) of a script, all tiny; the
    flow's couplings get some shape (it starts as an orthogonal map)."""
    import torch

    torch.manual_seed(seed)
    world_model = module.make_world_model(world_model_kind, obs_dim, act_dim, 8)
    with torch.no_grad():
        world_model.update_normaliser(
            torch.randn(50, obs_dim), torch.rand(50, act_dim) * 2 - 1, torch.randn(50, 1), torch.randn(50, obs_dim) * 2
        )
        if world_model_kind == "flow":
            for coupling in world_model.couplings:
                torch.nn.init.normal_(coupling.net[-1].weight, std=0.3)
    actor = module.Actor(obs_dim, act_dim, 8).requires_grad_(False)
    if module.__name__ == "iqn":
        critic = module.Critic(obs_dim, act_dim, 8, num_cosines=4)
    elif hasattr(module, "NOISE_EMBEDDING_DIM"):
        critic = module.Critic(obs_dim, act_dim, 8, noise_dim=4)
    else:
        critic = module.Critic(obs_dim, act_dim, 8)
    return world_model, actor, critic.requires_grad_(False)


def open_run_of(module, args):
    """The `Run` the script `module`'s main() opens for `args`: its flags checked, the run's settings, its envs (a
    problem: one line, SystemExit, as in main())."""
    import run_bookkeeping

    try:
        module.check_args(args)
        args, saved = run_bookkeeping.run_settings(args, module.__file__, argv=[])
        env = module.make_env(args)
        eval_env = module.make_env(args, render_mode="rgb_array" if args.capture_video else None)
    except ValueError as error:
        run_bookkeeping.fail(module.__file__, str(error))
    return run_bookkeeping.Run(module.__file__, args, saved, env, eval_env)
