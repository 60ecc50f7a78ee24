"""How well does DSDPG-MSMMD's slicing search find the maximising direction? Measured offline on trained critics.

The max-sliced MMD^2 of a prediction set X and a target set Y is max over unit theta of MMD^2(X theta, Y theta). The
critic update of `dsdpg_msmmd_sobolev.py` searches theta per transition and critic (`max_sliced_mmd2`, the script's own
code) from a random start; this tool asks how much of the maximum that search reaches. From each checkpoint it resumes
the run's script (as `sobolev_split.py` does: same networks, replay buffer and RNG), runs its critic update on
`--batches` replay batches with the optimiser step disabled, and keeps every update's prediction and target sets and
random start. On those sets it runs each search of `--searches` x `--steps` from the update's own start, and an
exhaustive reference that does not depend on the searches:
  * d = 2 (IDP: return + 1 action coordinate): a grid of `--grid` directions over the half circle (theta and -theta
    give the same MMD^2), the best refined by a golden-section search in its grid cell;
  * d > 2 (HalfCheetah: 1 + 6): `--restarts` random starts, each run to convergence by Adam with a decaying step
    (0.05 -> 1e-4 over `--reference-steps`), on MMD^2 computed by autograd through the script's `mmd2`, not through the
    search's closed-form gradient. The same procedure is checked against the grid on the d = 2 sets.
The reference per set pair is the best direction found by anything (so every fraction is <= 1). Reported per search:
the batch-mean MMD^2 it reaches as a fraction of the batch-mean reference (what the loss sees), the median and 10th
percentile of the per-pair fractions, the random start's fraction, the angle it turned (degrees), and its cost per
critic update (eager and `--compile`d, at the run's batch size; the whole update's time beside it). The committed
results.json holds the compiled timings only: its checkpoints were `--compile` runs, whose resume then kept compiling.

Usage (one command; the checkpoints are the mujoco_cpu grid's, restored from git history by `--extract`):
    python benchmarks/slice_search/slice_search.py --extract
    python benchmarks/slice_search/slice_search.py --out benchmarks/slice_search
"""

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
import tyro

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(HERE))
import sobolev_split  # noqa: E402 (benchmarks/: resume a checkpoint up to the training loop)
from run_grid import write_probe_error  # noqa: E402

GRID = "benchmarks/mujoco_cpu/grid/dsdpg_msmmd_sobolev"
CHECKPOINTS = {  # name: (commit that holds it, path in that commit): DSDPG-MSMMD `--compile`, the grid's settings
    "idp_seed3_step8324": ("d8ad233", "InvertedDoublePendulum-v4/compile/seed3"),
    "idp_seed2_step10217": ("1df1cc6", "InvertedDoublePendulum-v4/compile/seed2"),
    "idp_seed1_step13389": ("0824459", "InvertedDoublePendulum-v4/compile/seed1"),
    "idp_seed4_step16007": ("835439c", "InvertedDoublePendulum-v4/compile/seed4"),
    "idp_seed1_step17240": ("b89f923", "InvertedDoublePendulum-v4/compile/seed1"),
    "hc_seed2_step5703": ("f4d82fc", "HalfCheetah-v4/compile/seed2"),
    "hc_seed1_step18839": ("8e8c696", "HalfCheetah-v4/compile/seed1"),
    "hc_seed3_step29816": ("b2447d3", "HalfCheetah-v4/compile/seed3"),
    "hc_seed3_step111693": ("4ad3c02", "HalfCheetah-v4/compile/seed3"),
}
SEARCHES = (
    *("adam:1e-4", "adam:1e-3", "adam:1e-2", "adam:3e-2", "adam:1e-1", "adam:3e-1"),
    *("ascent:1e-4", "ascent:1e-3", "ascent:1e-2", "ascent:1e-1"),
)


@dataclass
class Args:
    checkpoint_dir: str = "/tmp/slice_search_checkpoints"
    """where the grid's checkpoints are (written there by --extract from git history)"""
    extract: bool = False
    """restore the checkpoints named in CHECKPOINTS from git history into --checkpoint-dir, then stop"""
    checkpoints: list[str] = field(default_factory=lambda: list(CHECKPOINTS))
    """which checkpoints to measure (names of CHECKPOINTS)"""
    batches: int = 2
    """critic updates captured per checkpoint (each: 2 critics x the run's batch size set pairs)"""
    searches: list[str] = field(default_factory=lambda: list(SEARCHES))
    """searches as OPTIMIZER:LR, OPTIMIZER in {adam, ascent} (the script's --slice-optimizer and --slice-lr)"""
    steps: list[int] = field(default_factory=lambda: [10, 30, 100])
    """search lengths (the script's --slice-steps)"""
    grid: int = 3600
    """directions of the reference grid over the half circle (d = 2)"""
    restarts: int = 32
    """random starts of the reference ascent (d > 2)"""
    reference_steps: int = 600
    """Adam steps of each reference ascent"""
    time_repeats: int = 5
    """timed repetitions of each search and of the whole update (the median is reported); 0: no timing"""
    seed: int = 0
    """seed of the reference's random starts"""
    out: str | None = None
    """write results.json, table.md and fraction.png into this folder"""


def fail(message: str) -> None:
    raise SystemExit(f"slice_search.py: error: {message}")


def extract(folder: str) -> None:
    """Write each checkpoint of CHECKPOINTS, from the commit that holds it, to folder/<name>.pt."""
    os.makedirs(folder, exist_ok=True)
    for name, (commit, path) in CHECKPOINTS.items():
        listing = subprocess.run(
            ["git", "show", "--name-only", "--format=", commit, "--", f"{GRID}/{path}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        file = next(p for p in listing if p.endswith("checkpoint.pt"))
        with open(os.path.join(folder, f"{name}.pt"), "wb") as f:
            subprocess.run(["git", "show", f"{commit}:{file}"], cwd=ROOT, stdout=f, check=True)
        print(f"{name}: {commit}:{file}")


def capture(path: str, batches: int) -> tuple:
    """Resume the script at `path` and capture `batches` critic updates' (predictions, targets, initial theta)."""
    module, built, step = sobolev_split.resume_until_loop(path)
    captured, original_loss = [], module.critic_loss

    def critic_loss(predictions, targets, h, estimator, slicing):  # slicing = (steps, lr, optimizer, initial theta)
        captured.append((predictions.detach().clone(), targets.detach().clone(), slicing[3].clone()))
        return original_loss(predictions, targets, h, estimator, slicing)

    module.critic_loss = critic_loss
    built["critic_optimizer"].step = lambda *a, **k: None  # every batch sees the checkpoint's critic
    try:
        for _ in range(batches):
            built["update_critic"]()
    finally:
        module.critic_loss = original_loss
    return module, built, step, captured


def projected_mmd2(
    module, x: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, h: float, estimator: str
) -> torch.Tensor:
    """MMD^2 of the projections on theta (..., R, d) of x (..., n, d) and y (..., m, d), for R directions ->
    (..., R)."""
    px = (x.unsqueeze(-3) @ theta.unsqueeze(-1)).squeeze(-1)  # (..., R, n)
    py = (y.unsqueeze(-3) @ theta.unsqueeze(-1)).squeeze(-1)
    return module.mmd2(px.unsqueeze(-1), py.unsqueeze(-1), h, estimator)


def reference_grid(module, x, y, h, estimator, directions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """d = 2: the best of `directions` angles over [0, pi), refined by golden section in its cell -> (value, theta)."""
    angles = torch.arange(directions, dtype=x.dtype) * (math.pi / directions)
    values = torch.cat(
        [
            projected_mmd2(module, x, y, torch.stack([a.cos(), a.sin()], -1).expand(*x.shape[:-2], -1, 2), h, estimator)
            for a in angles.split(200)
        ],
        -1,
    )  # (..., directions)
    best = angles[values.argmax(-1)]  # (...)
    low, high = best - math.pi / directions, best + math.pi / directions
    ratio = (math.sqrt(5) - 1) / 2

    def value(a: torch.Tensor) -> torch.Tensor:
        return projected_mmd2(module, x, y, torch.stack([a.cos(), a.sin()], -1).unsqueeze(-2), h, estimator)[..., 0]

    for _ in range(40):
        a1, a2 = high - ratio * (high - low), low + ratio * (high - low)
        left = value(a1) > value(a2)
        high, low = torch.where(left, a2, high), torch.where(left, low, a1)
    refined = (low + high) / 2
    theta = torch.stack([refined.cos(), refined.sin()], -1)
    refined_value = value(refined)
    grid_value = values.max(-1).values
    keep = refined_value >= grid_value
    theta = torch.where(keep[..., None], theta, torch.stack([best.cos(), best.sin()], -1))
    return torch.maximum(refined_value, grid_value), theta


def reference_restarts(module, x, y, h, estimator, restarts: int, steps: int, generator) -> tuple:
    """Best of `restarts` random starts, each by Adam on w (renormalised each step) with a cosine step 0.05 -> 1e-4,
    the MMD^2 by autograd through mmd2 -> (value (...), theta (..., d), every restart's value (..., R))."""
    lead, d = x.shape[:-2], x.shape[-1]
    w = torch.randn(*lead, restarts, d, generator=generator, dtype=x.dtype)
    w = F.normalize(w, dim=-1).requires_grad_()
    optimizer = torch.optim.Adam([w], lr=0.05)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps, eta_min=1e-4)
    for _ in range(steps):
        value = projected_mmd2(module, x, y, F.normalize(w, dim=-1), h, estimator)
        optimizer.zero_grad()
        (-value.sum()).backward()
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            w.copy_(F.normalize(w, dim=-1))
    with torch.no_grad():
        theta = F.normalize(w, dim=-1)
        values = projected_mmd2(module, x, y, theta, h, estimator)  # (..., R)
        best = values.argmax(-1)
        return values.max(-1).values, theta.gather(-2, best[..., None, None].expand(*lead, 1, d))[..., 0, :], values


def run_search(module, x, y, h, estimator, initial_theta, optimizer: str, lr: float, steps: int) -> torch.Tensor:
    """The script's own search from the update's start -> its final theta (E, B, d)."""
    _, theta = module.max_sliced_mmd2(x, y, h, steps, lr, estimator, initial_theta, optimizer)
    return theta


def timed(fn, repeats: int) -> float:
    """Median seconds of `repeats` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure_checkpoint(args: Args, name: str) -> dict:
    path = os.path.join(args.checkpoint_dir, f"{name}.pt")
    if not os.path.isfile(path):
        fail(f"no checkpoint {path!r}: run with --extract first")
    module, built, step, captured = capture(path, args.batches)
    run_args = built["args"]
    h, estimator = run_args.kernel_bandwidth, run_args.mmd_estimator
    x = torch.cat([c[0] for c in captured], 1)  # (E, B*batches, N, d)
    y = torch.cat([c[1] for c in captured], 0)  # (B*batches, K, d)
    start = torch.cat([c[2] for c in captured], 1)  # (E, B*batches, d)
    d = x.shape[-1]
    yb = y.expand(x.shape[0], *y.shape)
    generator = torch.Generator().manual_seed(args.seed)
    began = time.perf_counter()
    with torch.no_grad():
        finals = {
            (search, steps): run_search(
                module, x, y, h, estimator, start, search.split(":")[0], float(search.split(":")[1]), steps
            )
            for search in args.searches
            for steps in args.steps
        }
    restart_value, restart_theta, restart_values = reference_restarts(
        module, x, yb, h, estimator, args.restarts, args.reference_steps, generator
    )
    reference, how = restart_value, "restarts"
    check = {}
    if d == 2:
        with torch.no_grad():
            grid_value, _ = reference_grid(module, x, yb, h, estimator, args.grid)
        check = {  # the restart procedure against the grid on the same sets
            "restarts_over_grid_mean": float(restart_value.mean() / grid_value.mean()),
            "restarts_below_99pct_of_grid": float((restart_value < 0.99 * grid_value).float().mean()),
        }
        reference, how = torch.maximum(grid_value, restart_value), "grid + restarts"
    with torch.no_grad():
        values = {
            key: projected_mmd2(module, x, yb, theta.unsqueeze(-2), h, estimator)[..., 0]
            for key, theta in finals.items()
        }
        initial = projected_mmd2(module, x, yb, F.normalize(start, dim=-1).unsqueeze(-2), h, estimator)[..., 0]
    for value in values.values():
        reference = torch.maximum(reference, value)
    agreement = float((restart_values >= 0.99 * reference[..., None]).float().mean())  # share of restarts within 1 %
    reference_seconds = time.perf_counter() - began

    def fractions(value: torch.Tensor) -> dict:
        ratio = value / reference
        return {
            "batch_mean_fraction": float(value.mean() / reference.mean()),
            "pair_median_fraction": float(ratio.median()),
            "pair_p10_fraction": float(ratio.quantile(0.1)),
            "pairs_at_95pct": float((ratio >= 0.95).float().mean()),
        }

    start_unit = F.normalize(start, dim=-1)
    rows = []
    for (search, steps), theta in finals.items():
        cosine = (theta * start_unit).sum(-1).clamp(-1, 1)
        angle = torch.rad2deg(torch.acos(cosine))
        rows.append(
            {
                "search": search,
                "steps": steps,
                **fractions(values[search, steps]),
                "angle_median_deg": float(angle.median()),
            }
        )
    result = {
        "checkpoint": name,
        "step": step,
        "dim": d,
        "set_pairs": int(reference.numel()),
        "reference": how,
        "reference_mean_mmd2": float(reference.mean()),
        "restart_agreement": agreement,
        **check,
        "random_start": fractions(initial),
        "searches": rows,
        "reference_seconds": reference_seconds,
    }
    if args.time_repeats > 0:
        result["timing"] = time_searches(args, module, built, captured[0])
    print(f"{name} (step {step}, d = {d}, {reference.numel()} set pairs, reference by {how}):", flush=True)
    print(f"  random start {result['random_start']['batch_mean_fraction']:.3f}", flush=True)
    for row in rows:
        print(
            f"  {row['search']:12s} {row['steps']:4d} steps: batch {row['batch_mean_fraction']:.3f}, median pair "
            f"{row['pair_median_fraction']:.3f}, p10 {row['pair_p10_fraction']:.3f}, angle "
            f"{row['angle_median_deg']:.1f} deg",
            flush=True,
        )
    return result


def time_searches(args: Args, module, built: dict, one_update: tuple) -> dict:
    """Seconds per critic update of each (optimizer, steps) search at the run's batch size, eager and compiled, and of
    the whole critic update with the run's own search (eager, and compiled as `--compile` compiles it)."""
    x, y, start = one_update
    h, estimator = built["args"].kernel_bandwidth, built["args"].mmd_estimator
    torch.set_num_threads(1)
    optimizers = sorted({s.split(":")[0] for s in args.searches})
    timing = {"threads": 1, "search": {}, "update": {}}
    eager_steps = module.slicing_steps
    for mode in ("eager", "compile"):
        if mode == "compile":
            torch._dynamo.reset()  # each checkpoint compiles afresh (dynamo's recompile limit counts across them)
            torch._dynamo.config.recompile_limit = (
                64  # both optimizers, the first chunk's aliased (w, theta) and the rest
            )
            module.slicing_steps = torch.compile(eager_steps, fullgraph=True, dynamic=False)
        for optimizer in optimizers:
            for steps in args.steps:
                seconds = timed(
                    lambda: module.max_sliced_mmd2(x, y, h, steps, 1e-2, estimator, start, optimizer), args.time_repeats
                )
                timing["search"][f"{mode}:{optimizer}:{steps}"] = seconds
        timing["update"][mode] = timed(built["update_critic"], args.time_repeats)
    module.slicing_steps = eager_steps
    return timing


def write_outputs(results: list[dict], folder: str, args: Args) -> None:
    """results.json (each checkpoint's numbers with the settings it was measured at), table.md, the page's table and
    the figure."""
    os.makedirs(folder, exist_ok=True)
    for result in results:
        result.setdefault("measured_with", {k: v for k, v in vars(args).items() if k not in ("out", "checkpoints")})
    with open(os.path.join(folder, "results.json"), "w") as f:
        json.dump({"results": results}, f, indent=1)
    table = summary_table(results)
    with open(os.path.join(folder, "table.md"), "w") as f:
        f.write(table)
    plot(results, os.path.join(folder, "fraction.png"))
    page = os.path.join(folder, "README.md")
    if os.path.isfile(page):  # the page's short table, between its markers
        with open(page) as f:
            text = f.read()
        begin, end = text.find(PAGE_BEGIN), text.find(PAGE_END)
        if 0 <= begin < end:
            with open(page, "w") as f:
                f.write(text[: begin + len(PAGE_BEGIN)] + "\n" + page_table(results) + text[end:])


def summary_table(results: list[dict]) -> str:
    """Per task (IDP, HalfCheetah) and search: the batch-mean fraction over the checkpoints (median [min, max]), the
    per-pair median, the angle turned, and the cost per update (compiled) with the update beside it."""
    lines = []
    for task, prefix in (("InvertedDoublePendulum-v4 (d = 2)", "idp"), ("HalfCheetah-v4 (d = 7)", "hc")):
        group = [r for r in results if r["checkpoint"].startswith(prefix)]
        if not group:
            continue
        names = ", ".join(f"{r['checkpoint'].split('_', 1)[1]}" for r in group)
        lines += [
            f"**{task}**, {len(group)} checkpoints ({names}); fraction of the reference's batch-mean MMD^2, median "
            "[min, max] over the checkpoints:",
            "",
            "| search | steps | batch-mean fraction | pair median | pair 10th pct | angle turned (deg) "
            "| ms / update, compiled (eager, where measured) |",
            "|---|---:|---|---:|---:|---:|---:|",
        ]
        start = [r["random_start"]["batch_mean_fraction"] for r in group]
        lines.append(f"| random start (no search) | 0 | {stat(start)} | | | 0 | 0 |")
        for row in group[0]["searches"]:
            key = (row["search"], row["steps"])
            picked = [next(s for s in r["searches"] if (s["search"], s["steps"]) == key) for r in group]
            timing = [r["timing"] for r in group if "timing" in r]
            optimizer = row["search"].split(":")[0]
            cost = ""
            if timing:
                compiled = np.median([t["search"][f"compile:{optimizer}:{row['steps']}"] for t in timing]) * 1e3
                eager = [t["search"].get(f"eager:{optimizer}:{row['steps']}") for t in timing]
                cost = f"{compiled:.1f}" + (f" ({np.median(eager) * 1e3:.1f})" if None not in eager else "")
            lines.append(
                f"| {row['search'].replace(':', ' lr ')} | {row['steps']} "
                f"| {stat([p['batch_mean_fraction'] for p in picked])} "
                f"| {np.median([p['pair_median_fraction'] for p in picked]):.3f} "
                f"| {np.median([p['pair_p10_fraction'] for p in picked]):.3f} "
                f"| {np.median([p['angle_median_deg'] for p in picked]):.1f} | {cost} |"
            )
        timing = [r["timing"] for r in group if "timing" in r]
        if timing:
            compiled = np.median([t["update"]["compile"] for t in timing]) * 1e3
            eager = [t["update"].get("eager") for t in timing]
            eager_cell = f" ({np.median(eager) * 1e3:.1f})" if None not in eager else ""
            lines.append(
                f"| the whole critic update (the run's search, Adam 100 steps) | | | | | | {compiled:.1f}{eager_cell} |"
            )
        lines.append("")
    return "\n".join(lines)


PAGE_BEGIN, PAGE_END = "<!-- page table: slice_search.py writes this -->", "<!-- end of page table -->"
PAGE_ROWS = {  # (search, steps): name on the page
    ("adam:1e-4", 100): "Adam, lr 1e-4, 100 steps (the paper's table; our default)",
    ("ascent:1e-4", 100): "plain ascent, lr 1e-4, 100 steps (Algorithm 1, `--slice-optimizer ascent`)",
    ("adam:3e-1", 10): "Adam, lr 0.3, 10 steps",
    ("adam:3e-1", 30): "**Adam, lr 0.3, 30 steps** (chosen: `--slice-lr 0.3 --slice-steps 30`)",
    ("adam:3e-1", 100): "Adam, lr 0.3, 100 steps",
}


def page_table(results: list[dict]) -> str:
    """The page's table: the random start, the paper's search, Algorithm 1's, and the chosen one with its neighbours;
    per task the batch-mean fraction (median [min, max] over the checkpoints) and the compiled cost per update."""
    tasks = [("IDP", "idp"), ("HalfCheetah", "hc")]
    header = (
        ["search"] + [f"{t}: fraction of the reference" for t, _ in tasks] + [f"{t}: ms / update" for t, _ in tasks]
    )
    lines = ["| " + " | ".join(header) + " |", "|---|---|---|---:|---:|"]
    groups = [[r for r in results if r["checkpoint"].startswith(prefix)] for _, prefix in tasks]
    start = [stat([r["random_start"]["batch_mean_fraction"] for r in g]) if g else "-" for g in groups]
    lines.append(f"| random direction (no search) | {' | '.join(start)} | 0 | 0 |")
    update = []
    for (search, steps), name in PAGE_ROWS.items():
        fractions, costs = [], []
        for group in groups:
            picked = [s for r in group for s in r["searches"] if (s["search"], s["steps"]) == (search, steps)]
            fractions.append(stat([p["batch_mean_fraction"] for p in picked]) if picked else "-")
            timing = [r["timing"]["search"][f"compile:{search.split(':')[0]}:{steps}"] for r in group if "timing" in r]
            costs.append(f"{np.median(timing) * 1e3:.1f}" if timing else "-")
        lines.append(f"| {name} | {' | '.join(fractions)} | {' | '.join(costs)} |")
    for group in groups:
        timing = [r["timing"]["update"]["compile"] for r in group if "timing" in r]
        update.append(f"{np.median(timing) * 1e3:.0f}" if timing else "-")
    lines.append(f"| the whole critic update, for scale | | | {' | '.join(update)} |")
    return "\n".join(lines) + "\n"


def stat(values: list[float]) -> str:
    return f"{np.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (task, prefix) in zip(axes, (("InvertedDoublePendulum-v4, d = 2", "idp"), ("HalfCheetah-v4, d = 7", "hc"))):
        group = [r for r in results if r["checkpoint"].startswith(prefix)]
        if not group:
            continue
        searches = list(dict.fromkeys(s["search"] for s in group[0]["searches"]))
        for search in searches:
            steps = sorted({s["steps"] for s in group[0]["searches"] if s["search"] == search})
            medians = [
                np.median(
                    [
                        next(s for s in r["searches"] if (s["search"], s["steps"]) == (search, t))[
                            "batch_mean_fraction"
                        ]
                        for r in group
                    ]
                )
                for t in steps
            ]
            ax.plot(
                steps,
                medians,
                marker="o",
                linestyle="-" if search.startswith("adam") else "--",
                label=search.replace(":", " lr "),
            )
        ax.axhline(
            np.median([r["random_start"]["batch_mean_fraction"] for r in group]),
            color="grey",
            linestyle=":",
            label="random start",
        )
        ax.axhline(0.95, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xticks([10, 30, 100], ["10", "30", "100"])
        ax.set_xlabel("search steps")
        ax.set_title(f"{task} ({len(group)} checkpoints, median)")
    axes[0].set_ylabel("batch-mean MMD^2 / reference")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(args: Args) -> None:
    if args.extract:
        extract(args.checkpoint_dir)
        return
    unknown = [c for c in args.checkpoints if c not in CHECKPOINTS]
    if unknown:
        fail(f"unknown checkpoint {unknown[0]!r} (known: {', '.join(CHECKPOINTS)})")
    for search in args.searches:
        optimizer, _, lr = search.partition(":")
        try:
            ok = optimizer in ("adam", "ascent") and math.isfinite(float(lr)) and float(lr) > 0
        except ValueError:
            ok = False
        if not ok:
            fail(f"--searches takes OPTIMIZER:LR with OPTIMIZER adam or ascent and LR > 0 (got {search!r})")
    if args.batches < 1 or args.restarts < 1 or args.reference_steps < 1 or args.grid < 2 or args.time_repeats < 0:
        fail("--batches, --restarts and --reference-steps must be >= 1, --grid >= 2, --time-repeats >= 0")
    if not args.steps or min(args.steps) < 1:
        fail("--steps takes search lengths >= 1")
    if args.out:
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as error:
            fail(f"--out {args.out}: cannot write there ({error.strerror or error})")
        if reason := write_probe_error(args.out):
            fail(f"--out {args.out}: cannot write there ({reason})")
    torch.set_num_threads(1)
    results, saved = [], os.path.join(args.out or "", "results.json")
    if args.out and os.path.isfile(saved):  # a stopped measurement goes on: the checkpoints it finished are kept
        with open(saved) as f:
            results = [r for r in json.load(f)["results"] if r["checkpoint"] in args.checkpoints]
        print(f"kept from {saved}: {', '.join(r['checkpoint'] for r in results)}")
    for name in args.checkpoints:
        if any(r["checkpoint"] == name for r in results):
            continue
        results.append(measure_checkpoint(args, name))
        if args.out:  # after every checkpoint, so a stop keeps what is measured
            write_outputs(results, args.out, args)
    if args.out:  # every checkpoint kept: the table, the page's table and the figure made again
        write_outputs(results, args.out, args)
    print(summary_table(results))


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
