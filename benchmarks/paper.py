"""The paper's experiments as commands: every figure and table of its RL sections and appendix ablations, each one
grid of run_grid.py (resumable, here or on Slurm) aggregated by aggregate.py, with its cost known before it starts.

Usage:
    python benchmarks/paper.py list                       # every experiment: what it reproduces, its runs, its cost
    python benchmarks/paper.py run mujoco --dry-run       # every run and the projected GPU- and CPU-hours
    python benchmarks/paper.py run mujoco --backend slurm --slurm-partition gpu --slurm-gpus-per-task 1
    python benchmarks/paper.py run toy-rl --workers 2     # locally (a GPU machine: see the costs)
    python benchmarks/paper.py run ablation-bandwidth --smoke --workers 2   # every definition launched at toy sizes
    python benchmarks/paper.py count-flops                # after changing a definition: the FLOP counts its cost needs

The choices (envs, seeds and budgets the paper leaves open, the cost model, what --smoke runs) are in the README,
"Reproducing the paper".
"""

import dataclasses
import importlib
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Annotated, Literal

import tyro

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aggregate  # noqa: E402
import run_grid  # noqa: E402

ROOT = run_grid.ROOT
FLOPS_PATH = os.path.join(ROOT, "benchmarks", "paper_flops.json")
CPU_TIMING_PATH = os.path.join(ROOT, "benchmarks", "timing", "hopper.json")
MUJOCO = ("Ant-v4", "HalfCheetah-v4", "Hopper-v4", "Humanoid-v4", "InvertedDoublePendulum-v4", "Walker2d-v4")
POINT_MASS = ("PointMass3-v0", "PointMass4-v0", "PointMass5-v0", "PointMass6-v0")
SETTINGS = ("", "--obs-noise mult", "--dyn-noise gauss")
DETERMINISTIC = ("td3_huber", "mage_huber_sobolev")
DISTRIBUTIONAL = ("mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev")
MMD_PAIR = ("mmd_critic", "dsdpg_mmd_sobolev")
H100_SECONDS_PER_1000 = {  # the paper's runtime table (Humanoid-v2, one H100); its "MSMMD" row has no script here
    "td3_huber": 30.3,
    "mage_huber_sobolev": 31.3,
    "mmd_critic": 35.7,
    "iqn": 35.7,
    "dsdpg_mmd_sobolev": 40.0,
    "dsdpg_msmmd_sobolev": 62.5,
}
CALIBRATION_ENV = "Humanoid-v4"
PAPER_FLAGS = {"dsdpg_msmmd_sobolev": "--slice-lr 1e-4 --slice-steps 100"}
"""Flags that hold a script at the paper's table where the script's default may differ: every run and timing of it
here gets them (DSDPG-MSMMD's slicing search; README, "Choices the paper leaves open")"""
DEFAULT_STEPS, HUMANOID_STEPS, DEFAULT_LEARNING_STARTS = 150_000, 250_000, 5_000
COST_NEUTRAL_FLAGS = (  # flags that change no arithmetic of an iteration: left out of the FLOP table's keys
    "--exp-name",
    "--obs-noise",
    "--obs-noise-scale",
    "--dyn-noise",
    "--dyn-noise-std",
    "--kernel-bandwidth",
    "--slice-lr",  # a step size: the search takes the same steps
    "--truncation",  # changes only the kernel's size: DSDPG-MMD on Ant counts 722.395 GFLOP at 0 % and at 25 %
    "--total-timesteps",
    "--learning-starts",
)
SMOKE_FLAGS = (
    "--total-timesteps 60 --learning-starts 40 --hidden-dim 8 --wm-hidden-dim 8 --batch-size 16 --updates-per-step 1 "
    "--eval-frequency 30 --eval-episodes 1 --buffer-size 1000"
)
SMOKE_SECONDS_PER_RUN = 4.0  # one smoke run here, process start included (measured, one thread)


@dataclass(frozen=True)
class Part:
    """One run_grid.py grid: scripts x envs x flag sets x seeds 1..seeds, with common flags."""

    scripts: tuple[str, ...]
    env_ids: tuple[str, ...]
    seeds: int
    flag_sets: tuple[str, ...] = ("",)
    common: str = ""


@dataclass(frozen=True)
class Experiment:
    reproduces: str
    parts: tuple[Part, ...]


def mujoco(scripts: tuple[str, ...], flag_sets: tuple[str, ...], seeds: int, envs=MUJOCO, common: str = "") -> tuple:
    """Parts on MuJoCo tasks: Humanoid with its own step budget (250 000), the others at the default 150 000."""
    others = tuple(env for env in envs if env != "Humanoid-v4")
    parts = (Part(scripts, others, seeds, flag_sets, common),) if others else ()
    if "Humanoid-v4" in envs:
        humanoid_common = f"--total-timesteps {HUMANOID_STEPS} {common}".strip()
        parts += (Part(scripts, ("Humanoid-v4",), seeds, flag_sets, humanoid_common),)
    return parts


def on(flag_sets_of: dict[str, tuple[str, ...]], seeds: int, envs=MUJOCO) -> tuple:
    """The MuJoCo parts of `mujoco()` for each script with its own flag sets."""
    return tuple(p for script, sets in flag_sets_of.items() for p in mujoco((script,), sets, seeds, envs))


def suffixed(scripts: tuple[str, ...], options: dict[str, str], settings: tuple[str, ...] = ("",)) -> dict:
    """{script: flag sets}: each option's flags with --exp-name <script>_<suffix>, under each noise setting."""
    return {
        s: tuple(
            f"{noise} {flags} --exp-name {s}_{suffix}".strip()
            for noise in settings
            for suffix, flags in options.items()
        )
        for s in scripts
    }


EXPERIMENTS = {
    "toy-rl": Experiment(
        "Fig. toy_rl_main (b): the point mass with M = 3, 4, 5, 6 bonus locations, six methods, TQC 5 %",
        (Part(DETERMINISTIC, POINT_MASS, 5), Part(DISTRIBUTIONAL, POINT_MASS, 5, common="--truncation 5")),
    ),
    "mujoco": Experiment(
        "Fig. mujoco_grid (final return and nAUC) and Fig. main_curves (learning curves): six methods, six tasks, "
        "no noise / multiplicative observation noise / Gaussian dynamics noise",
        mujoco(run_grid.ALL_SCRIPTS, SETTINGS, 10),
    ),
    "ablation-overestimation": Experiment(
        "Fig. mujoco_grid_tqc: MAGE without double estimation, DSDPG without TQC truncation, against their defaults",
        mujoco(("mage_huber_sobolev", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"), SETTINGS, 10)
        + on(suffixed(("mage_huber_sobolev",), {"no_double_q": "--no-double-q"}, SETTINGS), 10)
        + on(suffixed(("dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"), {"no_tqc": "--truncation 0"}, SETTINGS), 10),
    ),
    "ablation-flow": Experiment(
        "Fig. flow_curves: DSDPG (MMD and MSMMD) and MAGE with a conditional RealNVP flow as the world model",
        on(
            suffixed(
                ("mage_huber_sobolev", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"),
                {"flow": "--world-model flow"},
                SETTINGS,
            ),
            5,
        ),
    ),
    "ablation-bandwidth": Experiment(
        "Fig. bandwidth_bars and Fig. bandwidth_curves: multiquadric bandwidth h = 10, 100, 250 for MMD and DSDPG-MMD, "
        "without and with multiplicative observation noise",
        mujoco(MMD_PAIR, SETTINGS[:2], 5, MUJOCO[:3] + MUJOCO[4:])
        + on(
            suffixed(MMD_PAIR, {"h10": "--kernel-bandwidth 10", "h250": "--kernel-bandwidth 250"}, SETTINGS[:2]),
            5,
            MUJOCO[:3] + MUJOCO[4:],
        ),
    ),
    "ablation-noise-scale": Experiment(
        "Fig. noise_scale_curves: multiplicative observation noise U[0.7, 1.3] against the default U[0.8, 1.2]",
        mujoco(run_grid.ALL_SCRIPTS, ("--obs-noise mult", "--obs-noise mult --obs-noise-scale 0.3"), 5),
    ),
    "ablation-samples": Experiment(
        "Fig. samples_curves and Fig. samples_bars: 5, 10, 25 samples per distribution for MMD and DSDPG-MMD",
        mujoco(MMD_PAIR, ("",), 5) + on(suffixed(MMD_PAIR, {"n5": "--num-samples 5", "n25": "--num-samples 25"}), 5),
    ),
    "ablation-wm-width": Experiment(
        "Fig. wm_size: the cVAE's hidden width 256 against the default 1024 for MMD and DSDPG-MMD, on Walker2d",
        mujoco(MMD_PAIR, ("",), 5, ("Walker2d-v4",))
        + on(suffixed(MMD_PAIR, {"wm256": "--wm-hidden-dim 256"}), 5, ("Walker2d-v4",)),
    ),
}
RUNTIME = "runtime"
RUNTIME_REPRODUCES = (
    "Table runtime_humanoid: seconds per 1 000 iterations of each method on Humanoid (benchmarks/timing.py; the "
    "paper's MSMMD row, max-sliced MMD on returns alone, is the MMD row here: on 1-D returns they are the same loss)"
)
TOY_SUPERVISED = (
    "toy-supervised",
    "Figs. toy_sup_unlimited_samples, toy_rl_limited_data, toy_noise_*: the supervised toy, not a grid",
    "python toy_supervised_sobolev.py",
)
RUNTIME_COST = "~0.5"  # an estimate, not a measurement: per script ~1 min of probes and timed runs, ~2 of FLOP counts
NAMES = (*EXPERIMENTS, RUNTIME, TOY_SUPERVISED[0])
TOY_SMOKE_FLAGS = "--num-steps 20 --eval-frequency 10 --batch-size 8 --hidden-dim 8 --eval-points 4 --eval-samples 4"
TOY_SMOKE_FLAGS += " --num-points 4 --no-cuda"


@dataclass
class List:
    """Print every experiment: the figure or table it reproduces, its runs, seeds, step budgets and projected cost."""

    markdown: bool = False
    """print it as the README's Markdown table instead"""


@dataclass(kw_only=True)
class Run(run_grid.Launch):
    """Run one experiment (resumably: run it again to finish it), then aggregate it."""

    experiment: Annotated[Literal[NAMES], tyro.conf.Positional]  # type: ignore[valid-type]
    """the experiment (see `paper.py list`)"""
    grid_dir: str = "runs_paper"
    """where the job dirs of every experiment go (shared: a run two experiments need runs once); --smoke: <it>_smoke"""
    dry_run: bool = False
    """print every run and the projected cost, and start nothing"""
    smoke: bool = False
    """every method, flag set and env of the experiment at toy sizes, 1 seed: proves it launches and aggregates"""
    bootstrap_samples: int = 2000
    """bootstrap resamples per confidence interval (aggregate.py's)"""


@dataclass
class CountFlops:
    """Count the FLOPs per iteration that the cost projection needs and are missing from benchmarks/paper_flops.json
    (paper sizes, timing.py's counter, one process; the slowest, DSDPG on Humanoid, takes ~40 s)."""


fail = run_grid.fail  # one line on stderr named after the tool run, exit status 1


def part_args(part: Part, launch: run_grid.Launch, smoke: bool) -> run_grid.Args:
    common = f"{part.common} {SMOKE_FLAGS}" if smoke else part.common
    return run_grid.Args(
        **{f.name: getattr(launch, f.name) for f in dataclasses.fields(run_grid.Launch)},
        env_ids=list(part.env_ids),
        scripts=list(part.scripts),
        seeds=[1] if smoke else list(range(1, part.seeds + 1)),
        flag_sets=list(part.flag_sets),
        common=common.strip(),
    )


def with_paper_flags(parts: tuple[Part, ...]) -> list[Part]:
    """The parts, each script of PAPER_FLAGS split off into a part of its own whose common flags start with its own."""
    split = []
    for part in parts:
        if others := tuple(script for script in part.scripts if script not in PAPER_FLAGS):
            split.append(dataclasses.replace(part, scripts=others))
        for script in part.scripts:
            if script in PAPER_FLAGS:
                common = f"{PAPER_FLAGS[script]} {part.common}".strip()
                split.append(dataclasses.replace(part, scripts=(script,), common=common))
    return split


def calibration_key(script: str) -> str:
    """The FLOP table's key of the script's run in the paper's runtime table (Humanoid, the paper's flags)."""
    return cost_key(script, CALIBRATION_ENV, PAPER_FLAGS.get(script, "").split())


def experiment_jobs(name: str, launch: run_grid.Launch, smoke: bool = False) -> list[run_grid.Job]:
    """The experiment's jobs, each once, seed-major; with `smoke`, each (script, flag set) on one env in turn."""
    jobs, seen, cell = [], {}, 0
    for part in with_paper_flags(EXPERIMENTS[name].parts):
        for job in run_grid.build_jobs(part_args(part, launch, smoke)):
            if job.job_dir in seen:
                if seen[job.job_dir].command != job.command:
                    fail(f"{name}: two definitions of {job.job_dir}")
                continue
            seen[job.job_dir] = job
            jobs.append(job)
    if smoke:
        cells = list(dict.fromkeys((job.script, job.flag_slug) for job in jobs))
        envs = list(dict.fromkeys(job.env_id for job in jobs))
        chosen = set()
        for cell, (script, flag_slug) in enumerate(cells):
            available = [job.env_id for job in jobs if (job.script, job.flag_slug) == (script, flag_slug)]
            chosen.add((script, flag_slug, next(env for env in envs[cell % len(envs) :] + envs if env in available)))
        jobs = [job for job in jobs if (job.script, job.flag_slug, job.env_id) in chosen]
    return sorted(jobs, key=lambda job: job.seed)


def flag_value(tokens: list[str], flag: str, default: int) -> int:
    """The last value of `flag` among the tokens (later flags override earlier ones, as in tyro)."""
    values = [tokens[i + 1] for i, token in enumerate(tokens[:-1]) if token == flag]
    return int(values[-1]) if values else default


def cost_key(script: str, env_id: str, tokens: list[str]) -> str:
    """The FLOP table's key of a run: script, env and the flags that change an iteration's arithmetic."""
    kept, i = [], 0
    while i < len(tokens):
        takes_value = i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
        if tokens[i] not in COST_NEUTRAL_FLAGS:
            kept += tokens[i : i + 1 + takes_value]
        i += 1 + takes_value
    return " ".join([script, env_id, *kept])


def job_cost_key(job: run_grid.Job) -> str:
    return cost_key(job.script, job.env_id, list(job.flags))


def iterations(job: run_grid.Job) -> int:
    tokens = list(job.flags)
    steps = flag_value(tokens, "--total-timesteps", DEFAULT_STEPS)
    return max(0, steps - flag_value(tokens, "--learning-starts", DEFAULT_LEARNING_STARTS))


def read_json(path: str, what: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        fail(f"cannot read {what} {path!r} ({error})")


class CostModel:
    """Seconds per 1 000 iterations of a run: on an H100 (from the paper's runtime table) and here
    (from timing.py's)."""

    def __init__(self):
        self.gflop = read_json(FLOPS_PATH, "the FLOP table")
        cpu = read_json(CPU_TIMING_PATH, "the CPU timing table")
        self.cpu_threads = cpu["threads"]
        self.cpu_gflops = {row["script"]: row["gflops"] for row in cpu["rows"] if "@" not in row["script"]}
        reference = [(self.flops(calibration_key(s)), t) for s, t in H100_SECONDS_PER_1000.items() if "msmmd" not in s]
        mean_f = sum(f for f, _ in reference) / len(reference)
        mean_t = sum(t for _, t in reference) / len(reference)
        self.seconds_per_tflop = sum((f - mean_f) * (t - mean_t) for f, t in reference) / sum(
            (f - mean_f) ** 2 for f, _ in reference
        )
        self.intercept = mean_t - self.seconds_per_tflop * mean_f

    def flops(self, key: str) -> float:
        """TFLOP per 1 000 iterations (= GFLOP per iteration)."""
        if key not in self.gflop:
            fail(f"no FLOP count for {key!r} in {FLOPS_PATH}: run `python benchmarks/paper.py count-flops`")
        return self.gflop[key]

    def gpu_seconds(self, job: run_grid.Job) -> float:
        reference = self.flops(calibration_key(job.script))
        per_1000 = H100_SECONDS_PER_1000[job.script] + self.seconds_per_tflop * (
            self.flops(job_cost_key(job)) - reference
        )
        return iterations(job) / 1000 * per_1000

    def cpu_seconds(self, job: run_grid.Job) -> float:
        return iterations(job) * self.flops(job_cost_key(job)) / self.cpu_gflops[job.script]

    def basis(self) -> str:
        return (
            f"GPU: the paper's H100 seconds per 1 000 iterations on Humanoid, {self.seconds_per_tflop:.4f} s more per "
            f"TFLOP more (the line through its table: {self.intercept:.1f} s + {self.seconds_per_tflop:.4f} s/TFLOP); "
            f"CPU: this machine kind at {self.cpu_threads} threads per run (benchmarks/timing/hopper.json) scaled by "
            f"FLOPs; iterations = steps after --learning-starts, evaluations not counted"
        )


def projected(jobs: list[run_grid.Job], model: CostModel) -> tuple[float, float]:
    """(GPU-hours on an H100, CPU-hours here) of the jobs."""
    return sum(map(model.gpu_seconds, jobs)) / 3600, sum(map(model.cpu_seconds, jobs)) / 3600


def hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def describe(name: str, jobs: list[run_grid.Job]) -> list[str]:
    """One line per part: scripts x envs x flag sets x seeds, steps."""
    lines = []
    for part in EXPERIMENTS[name].parts:
        steps = flag_value(shlex.split(part.common), "--total-timesteps", DEFAULT_STEPS)
        common = f", with {part.common}" if part.common.replace(f"--total-timesteps {steps}", "").strip() else ""
        sets = " | ".join(f'"{flags}"' if flags else "defaults" for flags in part.flag_sets)
        lines.append(
            f"    {' '.join(part.scripts)} x {' '.join(part.env_ids)} x {{{sets}}} x {part.seeds} seeds, {steps:,} "
            f"steps{common}"
        )
    return lines


def list_experiments(args: List) -> None:
    model = CostModel()
    launch = run_grid.Launch(grid_dir="runs_paper")
    rows = []
    for name in EXPERIMENTS:
        jobs = experiment_jobs(name, launch)
        seeds = sorted({job.seed for job in jobs})
        steps = sorted({flag_value(list(job.flags), "--total-timesteps", DEFAULT_STEPS) for job in jobs})
        rows.append((name, EXPERIMENTS[name].reproduces, jobs, len(seeds), steps, *projected(jobs, model)))
    if args.markdown:
        print("| experiment | reproduces | runs | seeds | steps | H100 GPU-hours | CPU-hours here |")
        print("|---|---|---|---|---|---|---|")
        for name, reproduces, jobs, seeds, steps, gpu, cpu in rows:
            budget = " / ".join(f"{s:,}" for s in steps)
            print(f"| `{name}` | {reproduces} | {len(jobs)} | {seeds} | {budget} | {hours(gpu)} | {hours(cpu)} |")
        print(f"| `{RUNTIME}` | {RUNTIME_REPRODUCES} | 6 timings | - | - | {RUNTIME_COST} | {RUNTIME_COST} |")
        print(f"| `{TOY_SUPERVISED[0]}` | {TOY_SUPERVISED[1]}: `{TOY_SUPERVISED[2]}` | - | 5 | - | - | - |")
        return
    for name, reproduces, jobs, seeds, steps, gpu, cpu in rows:
        print(f"{name}: {reproduces}")
        print(f"    {len(jobs)} runs, {hours(gpu)} GPU-hours on an H100, {hours(cpu)} CPU-hours here")
        print("\n".join(describe(name, jobs)))
    print(f"{RUNTIME}: {RUNTIME_REPRODUCES}")
    print(
        f"    6 timings (python benchmarks/timing.py --env-id Humanoid-v4), {RUNTIME_COST} hours (estimated) on a GPU "
        "or here"
    )
    print(f"{TOY_SUPERVISED[0]}: {TOY_SUPERVISED[1]}")
    print(f"    {TOY_SUPERVISED[2]}")
    print(f"cost: {model.basis()}")


def dry_run(name: str, jobs: list[run_grid.Job], smoke: bool) -> None:
    states = run_grid.print_jobs(jobs)
    todo = [job for job, state in zip(jobs, states) if state != "done"]
    print(f"{name}: {len(jobs)} runs, {len(jobs) - len(todo)} done, {len(todo)} to run")
    if smoke:
        print(
            f"cost: ~{len(todo) * SMOKE_SECONDS_PER_RUN / 60:.1f} CPU-minutes here ({SMOKE_SECONDS_PER_RUN:g} s per "
            "run)"
        )
        return
    model = CostModel()
    gpu, cpu = projected(jobs, model)
    gpu_todo, cpu_todo = projected(todo, model)
    print(
        f"cost: {hours(gpu)} GPU-hours on an H100 ({hours(gpu_todo)} to run), {hours(cpu)} CPU-hours here "
        f"({hours(cpu_todo)} to run)"
    )
    for script in dict.fromkeys(job.script for job in jobs):
        mine = [job for job in jobs if job.script == script]
        gpu_s, cpu_s = projected(mine, model)
        print(f"    {script}: {len(mine)} runs, {hours(gpu_s)} GPU-hours, {hours(cpu_s)} CPU-hours")
    print(f"    {model.basis()}")


def aggregate_experiment(name: str, jobs: list[run_grid.Job], out: str, bootstrap_samples: int) -> None:
    job_dirs = [job.job_dir for job in jobs if os.path.isdir(job.job_dir)]
    runs = aggregate.load_runs(job_dirs) if job_dirs else []
    if not runs:
        print(f"{name}: no finished run to aggregate yet", file=sys.stderr)
        return
    groups, table, _ = aggregate.aggregate(runs, out, bootstrap_samples, 0)
    print(f"{name}: {len(runs)} of {len(jobs)} runs in {len(groups)} groups aggregated into {out}")
    print(table, end="")


def runtime_command(args: Run) -> list[str]:
    out = os.path.join(os.path.abspath(args.grid_dir), "runtime")
    command = [sys.executable, os.path.join(ROOT, "benchmarks", "timing.py"), "--env-id", "Humanoid-v4", "--out"]
    command.append(os.path.join(out, "humanoid.json"))
    scripts = [
        f"{s}@{','.join(script_settings(PAPER_FLAGS[s].split()))}" if s in PAPER_FLAGS else s
        for s in run_grid.ALL_SCRIPTS
    ]
    command += ["--scripts", *scripts]
    if args.smoke:
        flags = "hidden_dim=8 wm_hidden_dim=8 batch_size=16 updates_per_step=1 buffer_size=1000".split()
        command += ["--learning-starts", "16", "--seconds", "0.2", "--flop-iterations", "1", "--no-breakdown"]
        command += ["--script-flags", *flags]
    if args.threads_per_job is not None:
        command += ["--threads", str(args.threads_per_job)]
    if args.slurm_gpus_per_task > 0 or (args.backend == "local" and not args.smoke and gpu_here()):
        command += ["--device", "cuda"]
    return command


def gpu_here() -> bool:
    import torch

    return torch.cuda.is_available()


def pickle_run_grid_by_value() -> None:
    """Submitit pickles the job's callable (run_grid.RunJob): by value, so that the job can unpickle it without
    benchmarks/ on its path (run_grid.py run as a script pickles its __main__ by value already)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(run_grid)


def run_runtime(args: Run) -> int:
    command = runtime_command(args)
    if args.dry_run:
        print(shlex.join(command))
        print(
            f"cost: 6 timings, {RUNTIME_COST} hours (estimated) on a GPU or here (each: probes, ~20 s timed, two "
            "FLOP-counted runs)"
        )
        return 0
    run_grid.make_grid_dir(args.grid_dir)
    os.makedirs(os.path.dirname(command[command.index("--out") + 1]), exist_ok=True)
    if args.backend == "local":
        return subprocess.run(command, cwd=ROOT).returncode

    executor = run_grid.make_executor(args)
    job = executor.submit(subprocess.run, command, cwd=ROOT)
    print(f"submitted {job.job_id}; waiting")
    return job.result().returncode


def run_experiment(args: Run) -> None:
    run_grid.unignore_sigint()
    if args.bootstrap_samples < 1:
        fail("--bootstrap-samples must be >= 1")
    if args.smoke and args.grid_dir == "runs_paper":
        args = dataclasses.replace(args, grid_dir="runs_paper_smoke")
    if args.experiment == RUNTIME:
        run_grid.check_launch(args)
        raise SystemExit(run_runtime(args))
    if args.experiment == TOY_SUPERVISED[0]:
        raise SystemExit(run_toy_supervised(args))
    jobs = experiment_jobs(args.experiment, args, args.smoke)
    for job in jobs:
        run_grid.check_job_dir(job)
    if args.dry_run:
        dry_run(args.experiment, jobs, args.smoke)
        return
    if args.backend != "local":
        pickle_run_grid_by_value()
    status = run_grid.launch(jobs, args)
    out = os.path.join(os.path.abspath(args.grid_dir), "aggregate", args.experiment)
    aggregate_experiment(args.experiment, jobs, out, args.bootstrap_samples)
    if status:
        raise SystemExit(status)


def run_toy_supervised(args: Run) -> int:
    """The supervised toy is one process, not a grid: toy_supervised_sobolev.py with its outputs (summary, figures,
    TensorBoard logs) in <grid-dir>/toy-supervised; --smoke at toy sizes; --dry-run prints the command."""
    out = os.path.join(os.path.abspath(args.grid_dir), TOY_SUPERVISED[0])
    command = [sys.executable, os.path.join(ROOT, "toy_supervised_sobolev.py"), "--out-dir", out]
    command += TOY_SMOKE_FLAGS.split() if args.smoke else []
    if args.dry_run:
        print(shlex.join(command))
        return 0
    return subprocess.run(command, cwd=ROOT).returncode


def count_flops(_: CountFlops) -> None:
    """Fills benchmarks/paper_flops.json with every key the experiments need, writing after each count."""
    import timing
    import torch

    sys.path.insert(0, ROOT)
    table = read_json(FLOPS_PATH, "the FLOP table") if os.path.exists(FLOPS_PATH) else {}
    launch = run_grid.Launch(grid_dir="runs_paper")
    keys = {calibration_key(script) for script in H100_SECONDS_PER_1000}
    keys |= {job_cost_key(job) for name in EXPERIMENTS for job in experiment_jobs(name, launch)}
    missing = sorted(keys - set(table))
    if not missing:
        print(f"nothing to count: {FLOPS_PATH} holds all {len(keys)} FLOP counts the experiments need")
        return
    torch.set_num_threads(2)
    for i, key in enumerate(missing):
        script, env_id, *tokens = key.split(" ")
        variant = script_settings(tokens)
        counting = timing.Args(env_id=env_id, flop_iterations=1)  # every iteration does the same updates
        flops = timing.flops_per_iteration(importlib.import_module(script), counting, variant)
        table[key] = round(flops / 1e9, 3)
        print(f"[{i + 1}/{len(missing)}] {key}: {table[key]} GFLOP per iteration", flush=True)
        with open(FLOPS_PATH, "w") as f:
            json.dump(dict(sorted(table.items())), f, indent=1)
            f.write("\n")


def script_settings(tokens: list[str]) -> list[str]:
    """Command-line flags as timing.py's name=value settings: --num-samples 25 -> num_samples=25, --no-double-q ->
    double_q=false."""
    settings, i = [], 0
    while i < len(tokens):
        name = tokens[i].removeprefix("--").replace("-", "_")
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            settings.append(f"{name}={tokens[i + 1]}")
            i += 2
        else:
            settings.append(f"{name.removeprefix('no_')}=false" if name.startswith("no_") else f"{name}=true")
            i += 1
    return settings


def main() -> None:
    command = tyro.extras.subcommand_cli_from_dict({"list": List, "run": Run, "count-flops": CountFlops})
    if isinstance(command, List):
        list_experiments(command)
    elif isinstance(command, Run):
        run_experiment(command)
    else:
        count_flops(command)


if __name__ == "__main__":
    main()
