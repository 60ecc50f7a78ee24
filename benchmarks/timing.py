"""Wall-clock table of the RL scripts, like the paper's: milliseconds per iteration (one env step with its updates).

Every script runs in this one process, at paper sizes unless flags say otherwise, on the same env. An iteration's time
is measured by difference: the script's own `main()` is run to `--learning-starts` + 1 steps (the base: the first
iteration with updates, the least a script runs, which also takes the one-off costs of a first update, compilation and
CUDA-graph capture, out of the difference) and to `--learning-starts` + 1 + K steps, both from the same seed, and
(T(start + 1 + K) - T(start + 1)) / K is the cost of one iteration after learning starts: the env step, the
world-model step and the `--updates-per-step` critic updates with their actor updates. K is chosen per script from
probes of doubling length so that the timed part lasts about `--seconds`. FLOPs per iteration are counted the same way
under `torch.utils.flop_counter.FlopCounterMode` (two short runs), and divided by the time to give the achieved
FLOP/s, reported against the machine's dense fp32 matmul FLOP/s measured in the same process (on a GPU, rows at
the scripts' default TF32 matmuls can exceed 100 % of that float32 rate). With `--breakdown`
(default) one critic update per script is also split by part (world-model prior and decoder or flow, target actor,
target critics, online critics with their double backprop, and the rest: loss, kernels, slicing and operations no module
claims) and by pass (forward, backward), in FLOPs and ms, and for the DSDPG scripts set beside the arithmetic floor of
the same mathematics (`arithmetic_floor`: every network once per distinct input row, one input-gradient pass per needed
cotangent; an estimate from pass counts, which can exceed a measured update by a little where a backward pass skips a
layer's input gradient, as in the flow).

Usage:
    python benchmarks/timing.py --env-id Hopper-v4
    python benchmarks/timing.py --env-id Hopper-v4 --scripts td3_huber dsdpg_msmmd_sobolev --seconds 10
    python benchmarks/timing.py --scripts td3_huber dsdpg_msmmd_sobolev "dsdpg_msmmd_sobolev@world_model=flow"
    python benchmarks/timing.py --device cuda --env-id Humanoid-v4 --scripts dsdpg_mmd_sobolev \
        "dsdpg_mmd_sobolev@cudagraphs=false,matmul_precision=highest" --out benchmarks/timing/humanoid_cuda.json
A script name may carry settings of its own after "@" (comma-separated name=value), e.g. a world-model variant,
`compile=true` or `cudagraphs=false` (on a GPU the scripts' defaults are CUDA graphs and TF32 matmuls, so eager float32
is `cudagraphs=false,matmul_precision=highest`; FLOPs and the breakdown are always counted on the eager update,
neither compiled nor captured, which does the same arithmetic). On a GPU every timed run is closed by a device
synchronisation. Every flag, script and setting is checked before any work (one line, exit 1); `--out` is
written after every script ("complete": false until the last): a measurement interrupted (Ctrl-C, SIGTERM, a lent
GPU's time limit) keeps the scripts it finished and loses the one in progress; nothing is kept to resume from.
"""

import collections
import contextlib
import copy
import importlib
import io
import json
import math
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Literal, NoReturn

import torch
import tyro
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry
from torch.utils.module_tracker import ModuleTracker

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_grid import ALL_SCRIPTS, ROOT  # noqa: E402
from writable import out_error  # noqa: E402


@dataclass
class Args:
    env_id: str = "Hopper-v4"
    """the environment every script runs on"""
    device: Literal["cpu", "cuda"] = "cpu"
    """where the scripts train (cuda: their --cuda on a GPU; refused where torch sees none)"""
    scripts: list[str] = field(default_factory=lambda: [s for s in ALL_SCRIPTS if os.path.exists(f"{ROOT}/{s}.py")])
    """scripts to time (module names, optionally with @name=value,... settings); the first is the ratios' reference"""
    learning_starts: int = 256
    """steps before the critic updates start (the world model trains from the first full minibatch)"""
    seconds: float = 20.0
    """target duration of each script's timed part"""
    flop_iterations: int = 2
    """iterations counted under FlopCounterMode"""
    threads: int | None = None
    """torch CPU threads (default: torch's own choice)"""
    out: str | None = None
    """also write the table as JSON to this path"""
    breakdown: bool = True
    """also print each script's critic update by part (FLOPs, ms) from one update on a random batch"""
    script_flags: list[str] = field(default_factory=list)
    """extra `name=value` settings for every script's Args (e.g. hidden_dim=256), parsed as JSON when possible"""


def fail(message: str) -> NoReturn:
    """One line on stderr, exit status 1, no traceback."""
    raise SystemExit(f"timing.py: error: {message}")


def script_args(module, args: Args, total_timesteps: int, variant: list[str]):
    overrides = {}
    for item in args.script_flags + variant:
        name, is_set, value = item.partition("=")
        if not (name and is_set):
            fail(f"{item!r}: a setting is name=value (--script-flags, or after a script's '@')")
        try:
            overrides[name] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name] = value
    try:
        return module.Args(
            env_id=args.env_id,
            seed=1,
            total_timesteps=total_timesteps,
            learning_starts=args.learning_starts,
            eval_frequency=10**9,
            eval_episodes=1,
            checkpoint_frequency=0,
            cuda=args.device == "cuda",
            **overrides,
        )
    except TypeError as error:
        fail(f"{module.__name__}: {error}")


def synchronise(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def eager(variant: list[str]) -> list[str]:
    """The settings without compilation and CUDA graphs (the last setting of a name wins, --script-flags' included):
    FLOPs are counted on the eager update (a graph replays the same kernels, compiled code does the same arithmetic,
    and FlopCounterMode cannot see into either)."""
    return [*variant, "compile=false", "cudagraphs=false"]


def run(module, args: Args, total_timesteps: int, variant: list[str]) -> float:
    """Wall time of one quiet run of the script's main() in a scratch directory; the module's globals are put back
    after (--compile replaces DSDPG-MSMMD's `slicing_steps` with its compiled form, which must not leak into the next
    variant's runs)."""
    cwd, saved_globals = os.getcwd(), dict(vars(module))
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                synchronise(args.device)
                start = time.perf_counter()
                module.main(script_args(module, args, total_timesteps, variant))
                synchronise(args.device)
                return time.perf_counter() - start
        except SystemExit as error:  # the script's own "interrupted ...; resume with" names a checkpoint in `scratch`
            if isinstance(error.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            raise
        finally:
            os.chdir(cwd)
            vars(module).update(saved_globals)


class GlobalOnlyTracker:
    """Stands in for FlopCounterMode's module tracker, whose hooks break torch.autograd.grad (used by the Sobolev
    scripts); every FLOP is attributed to "Global", which is all the table needs."""

    parents = {"Global"}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def flops_per_iteration(module, args: Args, variant: list[str]) -> float:
    counts = []
    for extra in (1, 1 + args.flop_iterations):  # from the base run, as the timing
        counter = FlopCounterMode(display=False)
        counter.mod_tracker = GlobalOnlyTracker()
        with counter:
            run(module, args, args.learning_starts + extra, eager(variant))
        counts.append(counter.get_total_flops())
    return (counts[1] - counts[0]) / args.flop_iterations


class PartProfile(TorchDispatchMode):
    """Every aten operation's FLOPs (torch's flop_counter formulas) and wall time, attributed to (part, pass): the part
    is the outermost tracked module running it (its class name; `critic_update_breakdown` renames the parts), the
    pass forward or backward (forward-mode Jacobians count as forward). CPU times are exact; on a GPU they are launch
    times unless CUDA_LAUNCH_BLOCKING=1."""

    def __init__(self):
        super().__init__()
        self.tracker = ModuleTracker()
        self.flops: collections.Counter = collections.Counter()
        self.seconds: collections.Counter = collections.Counter()

    def __enter__(self):
        self.tracker.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.tracker.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        start = time.perf_counter()
        out = func(*args, **kwargs)
        parts = sorted(name for name in self.tracker.parents if "." not in name and name != "Global")
        key = (
            parts[0] if parts else "loss, kernels, slicing, untracked",
            "backward" if self.tracker.is_bw else "forward",
        )
        self.seconds[key] += time.perf_counter() - start
        if func._overloadpacket in flop_registry:
            self.flops[key] += flop_registry[func._overloadpacket](*args, **kwargs, out_val=out)
        return out


def critic_update_breakdown(module, args: Args, variant: list[str]) -> tuple[list[dict], float | None]:
    """FLOPs and milliseconds of one critic update at the script's settings, by part and pass, on a random replay
    batch of the env's dimensions: the calls of the script's training loop, with its own networks; and, for the DSDPG
    scripts, the arithmetic floor of the same mathematics in GFLOP (`arithmetic_floor`; None for the others)."""
    a = script_args(module, args, args.learning_starts + 1, eager(variant))
    device = torch.device(args.device)
    env = module.make_env(a)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    env.close()
    torch.manual_seed(0)
    noise_size = a.num_cosines if hasattr(a, "num_cosines") else getattr(a, "noise_dim", None)
    critic = module.Critic(obs_dim, act_dim, a.hidden_dim, *([noise_size] if noise_size else []))
    target_critic, target_actor = (
        copy.deepcopy(critic).requires_grad_(False),
        module.Actor(obs_dim, act_dim, a.hidden_dim),
    )
    world_model = module.make_world_model(a.world_model, obs_dim, act_dim, a.wm_hidden_dim)
    critic, target_critic, target_actor, world_model = (
        net.to(device) for net in (critic, target_critic, target_actor, world_model)
    )
    world_model.update_normaliser(*(torch.randn(64, size, device=device) for size in (obs_dim, act_dim, 1, obs_dim)))
    parts = [(target_actor, "target actor"), (target_critic, "target critics"), (critic, "online critics")]
    parts += (
        [(world_model.prior, "world-model prior"), (world_model.decoder, "world-model decoder")]
        if hasattr(world_model, "prior")
        else [(coupling.net, "world model (flow)") for coupling in world_model.couplings]
    )
    for part, name in parts:
        part.__class__ = type(name, (type(part),), {})
    data = importlib.import_module("replay_buffer").ReplayBatch(
        *(
            x.to(device)
            for x in (
                torch.randn(a.batch_size, obs_dim),
                torch.rand(a.batch_size, act_dim) * 2 - 1,
                torch.randn(a.batch_size),
                torch.randn(a.batch_size, obs_dim),
                torch.zeros(a.batch_size),
            )
        )
    )
    with PartProfile() as profile:
        if hasattr(a, "double_q"):  # the deterministic critics: TD3 (td_targets) and MAGE (sobolev_targets)
            deterministic_targets = getattr(module, "td_targets", None) or module.sobolev_targets
            target_args = (a.gamma, a.policy_noise, a.noise_clip, a.double_q, a.dyna_reward)
            targets = deterministic_targets(data, world_model, target_actor, target_critic, *target_args)
            if hasattr(module, "td_targets"):
                loss = module.critic_loss(critic(data.obs, data.actions), targets)
            else:
                loss = module.critic_loss(
                    module.sobolev_samples(critic, data.obs, data.actions), targets, a.grad_loss_weight
                )
        else:
            target_args = (
                data,
                world_model,
                target_actor,
                target_critic,
                a.gamma,
                a.policy_noise,
                a.noise_clip,
                a.num_samples,
                a.dyna_reward,
            )
            if hasattr(module, "return_targets"):
                targets = module.truncate_top(module.return_targets(*target_args), a.truncation)
                predictions = module.return_samples(critic, data.obs, data.actions, a.num_samples)
            else:
                targets = module.truncate_top(
                    module.sobolev_targets(*target_args, a.sobolev == "complete"), a.truncation
                )
                predictions = module.sobolev_samples(
                    critic, data.obs, data.actions, a.num_samples, a.sobolev == "complete"
                )
            if hasattr(module, "quantile_huber_loss"):
                loss = module.critic_loss(*predictions, targets)
            elif hasattr(a, "slice_steps"):
                theta = torch.randn(critic.num_critics, a.batch_size, targets.shape[-1], device=device)
                slicing = (a.slice_steps, a.slice_lr, a.slice_optimizer, theta)
                loss = module.critic_loss(predictions, targets, a.kernel_bandwidth, a.mmd_estimator, slicing)[0]
            else:
                loss = module.critic_loss(predictions, targets, a.kernel_bandwidth, a.mmd_estimator)
        loss.backward()
    parts = [
        {
            "part": part,
            "pass": which,
            "gflop": profile.flops[(part, which)] / 1e9,
            "ms": 1e3 * profile.seconds[(part, which)],
        }
        for part, which in sorted(profile.seconds)
    ]
    if not hasattr(a, "sobolev"):
        return parts, None
    prior_once = 0.0
    if hasattr(world_model, "prior"):
        counter = FlopCounterMode(display=False)
        counter.mod_tracker = GlobalOnlyTracker()
        with counter, torch.no_grad():
            world_model.prior(world_model.condition(data.obs, data.actions))
        prior_once = counter.get_total_flops() / 1e9
    tangents = act_dim + (obs_dim if a.sobolev == "complete" else 0)
    return parts, arithmetic_floor(parts, prior_once, tangents, critic.num_critics)


def arithmetic_floor(parts: list[dict], prior_once: float, tangents: int, num_critics: int) -> float:
    """GFLOP of one DSDPG critic update's mathematics done once: the cVAE prior forward once per pair (prior_once, B
    rows) and its Jacobian in `tangents` forward-mode tangents at those rows; the decoder (or flow), target actor and
    target critics forward once per sample row (the forward FLOPs of the breakdown, whose rows are already distinct);
    one input-gradient pass per target critic back through the target actor and the world model (their targets'
    cotangents differ), one through each target critic itself; the online critics and the loss as measured (their
    forward, input gradient and double backprop have no redundant rows)."""
    gflop = {(p["part"], p["pass"]): p["gflop"] for p in parts}
    floor = prior_once * (1 + tangents) + 2 * gflop.get(("target critics", "forward"), 0.0)
    for part in ("world-model decoder", "world model (flow)", "target actor"):
        floor += (1 + num_critics) * gflop.get((part, "forward"), 0.0)
    return floor + sum(
        p["gflop"] for p in parts if p["part"] in ("online critics", "loss, kernels, slicing, untracked")
    )


def matmul_flops_per_second(device: str, n: int = 2048, repeats: int = 10) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    torch.mm(a, b)
    synchronise(device)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    synchronise(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def timed_iterations(module, args: Args, variant: list[str]) -> int:
    """How many iterations take about `--seconds` beyond the base run: probes of 2, 4, 8, ... iterations until one
    lasts a quarter of that (shorter probes drown in the run-to-run noise of the base run), then scaled, at least 5."""
    start = args.learning_starts + 1  # the base run: the first iteration with updates
    base = run(module, args, start, variant)
    probe = 2
    while (extra := run(module, args, start + probe, variant) - base) < args.seconds / 4:
        probe *= 2
    return max(5, probe, math.ceil(probe * args.seconds / extra))


def check_args(args: Args) -> list[tuple[str, object, list[str]]]:
    """Every flag, script and setting checked before any work (each script's Args built, checked by the script's own
    check_args, with its env and the memory check of Run); exits in one line at the first problem. Returns the
    (entry, module, settings) to time."""
    if not (math.isfinite(args.seconds) and args.seconds > 0):
        fail(f"--seconds must be a number > 0 (got {args.seconds})")
    for flag, value, least in (
        ("--flop-iterations", args.flop_iterations, 1),
        ("--learning-starts", args.learning_starts, 0),
    ):
        if value < least:
            fail(f"{flag} must be >= {least} (got {value})")
    if args.threads is not None and args.threads < 1:
        fail(f"--threads must be >= 1 (got {args.threads})")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no CUDA GPU on this machine")
    if not args.scripts:
        fail("--scripts: name at least one script")
    if message := out_error(args.out):  # the table is written at the end: it is tried now
        fail(message)
    sys.path.insert(0, ROOT)
    entries = []
    for entry in args.scripts:
        name, _, settings = entry.partition("@")
        name = name.removesuffix(".py")
        if name not in ALL_SCRIPTS:
            fail(f"--scripts: {name!r} is not one of the RL scripts ({', '.join(ALL_SCRIPTS)})")
        module, variant = importlib.import_module(name), settings.split(",") if settings else []
        script_settings = script_args(module, args, args.learning_starts + 1, variant)
        try:
            module.check_args(script_settings)
            env = module.make_env(script_settings)
            importlib.import_module("run_bookkeeping").check_memory(
                script_settings, env.observation_space.shape[0], env.action_space.shape[0]
            )
            env.close()
        except ValueError as error:
            fail(f"{entry}: {error}")
        entries.append((entry, module, variant))
    return entries


def main(args: Args) -> None:
    entries = check_args(args)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops it as Ctrl-C does
    rows: list[dict] = []
    try:
        measure(args, entries, rows)
    except KeyboardInterrupt:
        if args.out and rows:
            fail(
                f'interrupted: the {len(rows)} script(s) timed so far are in {args.out} ("complete": false); the one '
                "in progress is lost (timing.py keeps nothing to resume from)"
            )
        fail("interrupted: the measurement is lost and nothing was written (timing.py keeps nothing to resume from)")


def write_table(args: Args, peak: float, where: str, rows: list[dict], complete: bool) -> None:
    """--out: the table as JSON (its folder was tried before the work); written after every script, so a measurement
    cut short (a lent GPU's time limit, Ctrl-C) keeps the scripts it finished, marked "complete": false."""
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "env_id": args.env_id,
                    "device": where,
                    "threads": torch.get_num_threads(),
                    "matmul_gflops": peak / 1e9,
                    "settings": vars(args),
                    "complete": complete,
                    "rows": rows,
                },
                f,
                indent=2,
            )


def measure(args: Args, entries: list[tuple[str, object, list[str]]], rows: list[dict]) -> None:
    """The table: every script timed, its FLOPs counted (and its critic update broken down), printed and written; `rows`
    (empty) receives each script's row as it is finished."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    peak = matmul_flops_per_second(args.device)
    print(f"dense fp32 matmul: {peak / 1e9:.1f} GFLOP/s ({torch.get_num_threads()} threads)", file=sys.stderr)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"{torch.get_num_threads()} threads"
    for entry, module, variant in entries:
        if script_args(module, args, args.learning_starts + 1, variant).compile:  # silent for minutes otherwise
            print(f"{entry}: compiling (torch.compile; a few minutes from a cold cache), then timing", file=sys.stderr)
        iterations = timed_iterations(module, args, variant)
        start = args.learning_starts + 1  # the base run: the first iteration with updates
        seconds = run(module, args, start + iterations, variant) - run(module, args, start, variant)
        ms = 1e3 * seconds / iterations
        flops = flops_per_iteration(module, args, variant)
        rows.append(
            {
                "script": entry,
                "ms_per_iteration": ms,
                "timed_iterations": iterations,
                "gflop_per_iteration": flops / 1e9,
                "gflops": flops / ms / 1e6,
            }
        )
        if args.breakdown:
            rows[-1]["critic_update"], rows[-1]["critic_update_floor_gflop"] = critic_update_breakdown(
                module, args, variant
            )
        rows[-1]["ratio"] = ms / rows[0]["ms_per_iteration"]
        rows[-1]["fraction_of_matmul"] = rows[-1]["gflops"] * 1e9 / peak
        write_table(args, peak, where, rows, complete=False)
        print(
            f"{entry}: {ms:.1f} ms/iteration over {iterations} iterations, {flops / 1e9:.2f} GFLOP/iteration",
            file=sys.stderr,
        )
    lines = [
        f"Env {args.env_id}, {where}, dense fp32 matmul {peak / 1e9:.1f} GFLOP/s.",
        "",
        f"| script | ms / iteration | ratio to {rows[0]['script']} | GFLOP / iteration | GFLOP/s | % of matmul |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['script']} | {row['ms_per_iteration']:.1f} | {row['ratio']:.2f} | "
            f"{row['gflop_per_iteration']:.2f} | {row['gflops']:.1f} | {100 * row['fraction_of_matmul']:.0f} % |"
        )
    for row in rows if args.breakdown else []:
        total_gflop, total_ms = (sum(part[key] for part in row["critic_update"]) for key in ("gflop", "ms"))
        lines += [
            "",
            f"{row['script']}: one critic update, {total_gflop:.2f} GFLOP, {total_ms:.0f} ms (under the profiler)",
        ]
        if row["critic_update_floor_gflop"] is not None:
            lines += [
                f"arithmetic floor of the same mathematics: {row['critic_update_floor_gflop']:.2f} GFLOP "
                f"({100 * (total_gflop / row['critic_update_floor_gflop'] - 1):.0f} % above it)"
            ]
        lines += ["", "| part | pass | GFLOP | ms |", "|---|---|---|---|"]
        lines += [f"| {p['part']} | {p['pass']} | {p['gflop']:.2f} | {p['ms']:.1f} |" for p in row["critic_update"]]
    print("\n".join(lines))
    write_table(args, peak, where, rows, complete=True)


if __name__ == "__main__":
    main(tyro.cli(Args))
