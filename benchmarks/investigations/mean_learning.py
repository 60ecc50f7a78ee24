"""How fast does a generator critic learn its *mean* under each loss? (issue 14, item 2)

A fixed supervised problem that mimics a Sobolev Bellman target at the point mass's toy-grid sizes, so that the loss
is the only thing that changes between runs (no bootstrapping, no target network, no policy):

    s ~ U[-1, 1]^4, a ~ U[-1, 1]^2,  mu(s, a) = 0.5 + 0.3 sin(u . s + v . a + c)   (|u| = 1, |v| = 2, directions and c
    fixed by --problem-seed); target points of a pair (2N of them, the top --truncation % by return dropped as in the
    scripts):  y_k = mu(s, a) + return_noise * eps_k,   g_k = d mu / da (s, a) + sigma_g * eta_k,   eps, eta ~ N(0, I)

sigma_g (0.69) is set so that the mean target gradient norm E|g| is 0.94 (the point mass's
`losses/target_action_grad_norm` late in a run); |d mu / da| is 0.38 on average. That is `--problem smooth`.
`--problem bonus` makes a pair (drawn afresh every time it is used) a terminal bonus row with probability
--bonus-prob (1/3, one of the point mass's M = 3 locations): all its targets are y = 10 and its gradient targets are
noise around 0, as the point mass's replay rows of a touched location are under `--dyna-reward replay`; the critic
must learn the mixture, whose mean (10/3 + 2/3 mu) lies far from its median (mu). --bonus-region < 1 confines bonus
rows to the pairs with s_0 > 1 - 2 x bonus_region (rare informative rows).

Every variant trains a fresh `Critic` of `dsdpg_msmmd_sobolev.py` (one member, the same initial weights and the same
stream of batches under one seed) with RAdam, batch 64, N = 10 prediction samples (`sobolev_samples`: the critic's
(Z, dZ/da) by double backprop) and one of these losses, mean over the batch:

    joint            MMD^2 (`mmd2`) on (y, dy/da), multiquadric h = 100: the paper's DSDPG-MMD loss
    joint_gscale<f>  the same with the gradient coordinates of predictions and targets multiplied by f first
    joint_rscale<f>  the same with the return coordinate multiplied by f first (h f: the return's own bandwidth)
    joint_h<h>       other bandwidths;  joint_unbiased: the unbiased estimator;  joint_n<N>: N prediction samples
                     (the targets stay 2 x 10 per pair)
    msmmd_adam       `max_sliced_mmd2`, 100 Adam steps at lr 1e-4 (the paper's table; DSDPG-MSMMD's default)
    msmmd_ascent     the same with the paper's plain ascent (`optimizer="ascent"`)
    return_only      MMD^2 on the return coordinate alone (`mmd_critic.py`'s loss); its gradients are not trained
    huber_mean       Huber(mean_j Z_j, y_k), mean over the targets k: a TD3-like loss on the mean only
    mse_mean         the same with the squared error (whose minimiser is the mean even where errors exceed 1)
    joint_plusmse    joint + h (mean_j Z_j - mean_k y_k)^2: a candidate fix, a mean-seeking term beside the MMD
    <variant>_lr<lr> another RAdam learning rate (default 1e-3, the toy grid's)

Every --eval-every updates, on a fixed held-out batch with --eval-samples samples per pair:
    mean_error   mean over pairs of |mean_j Z(s, a, xi_j) - E[mean of the kept targets | s, a]|
    bias         mean over pairs of (mean_j Z - E[...]): the signed error, what `losses/qf1_values` would show
    grad_error   mean over pairs of |mean_j dZ/da(s, a, xi_j) - E[g | s, a]|  (Euclidean norm)
    median, spread   the mean over pairs of the median and of the std of the predicted returns
    region_*     the same on held-out pairs of the bonus region (`bonus` only)
    return_share on the training batch: |dL/dZ| / |dL/d(Z, dZ/da)| over the prediction points, the share of the loss's
                 gradient that falls on the return coordinate (before backprop into the weights)
Reported per variant and seed: the updates until mean_error, |bias| (and region_mean_error) first fall below
--threshold x their initial value; initial and final values of every metric. Written to --out: <problem>.json (every
curve) and <problem>.png (mean error, and gradient error, against updates; mean of the seeds); `bonus` with a
region < 1 writes bonus_region<r>.json and .png.

Usage (each about 10 min on one core):
    OMP_NUM_THREADS=1 python benchmarks/investigations/mean_learning.py      # problem smooth, all variants, seeds 1-2
    OMP_NUM_THREADS=1 python benchmarks/investigations/mean_learning.py --problem bonus --variants joint msmmd_adam \
        return_only huber_mean mse_mean joint_gscale0.1 joint_gscale10 joint_h1
"""

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import tyro

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from dsdpg_msmmd_sobolev import Critic, max_sliced_mmd2, mmd2, sobolev_samples, truncate_top  # noqa: E402

ALL_VARIANTS = (
    "joint",
    "msmmd_adam",
    "msmmd_ascent",
    "return_only",
    "huber_mean",
    "mse_mean",
    "joint_gscale0.1",
    "joint_gscale10",
    "joint_h10",
    "joint_h1",
    "joint_unbiased",
    "joint_n32",
    "joint_lr1e-4",
    "huber_mean_lr1e-4",
    "joint_plusmse",
)


@dataclass
class Args:
    variants: list[str] = field(default_factory=lambda: list(ALL_VARIANTS))
    """losses to compare (see the module docstring; joint_gscale<f>, joint_h<h>, joint_n<N>, <variant>_lr<lr> parse)"""
    seeds: list[int] = field(default_factory=lambda: [1, 2])
    """seeds: critic initialisation, noise and batches (the same for every variant of a seed)"""
    updates: int = 2000
    """critic updates per run"""
    batch_size: int = 64
    num_samples: int = 10
    """N prediction samples per pair (2N target points before truncation)"""
    truncation: float = 5.0
    """percent of the 2N target points with the largest returns dropped (the paper's point-mass setting)"""
    hidden_dim: int = 64
    noise_dim: int = 64
    learning_rate: float = 1e-3
    """RAdam learning rate (the toy grid's)"""
    kernel_bandwidth: float = 100.0
    slice_steps: int = 100
    slice_lr: float = 1e-4
    return_noise: float = 0.1
    """std of the target returns around mu"""
    obs_frequency: float = 1.0
    """|u|"""
    act_frequency: float = 2.0
    """|v|: d mu / da = 0.3 cos(...) v"""
    target_grad_norm: float = 0.94
    """E|g| of the targets, set through the std of their gradient noise (the point mass's
    `losses/target_action_grad_norm`)"""
    problem_seed: int = 0
    """seed of the fixed problem (u, v, c) and of the held-out batch"""
    eval_every: int = 50
    eval_pairs: int = 256
    eval_samples: int = 100
    threshold: float = 0.2
    """updates to reach mean_error < threshold x the initial mean_error are reported"""
    problem: str = "smooth"
    """`smooth`: every pair's targets as above; `bonus`: with probability --bonus-prob a pair is a terminal bonus
    transition (all its targets y = --bonus-reward, g = gradient noise only), as a replay row of the point mass is"""
    bonus_prob: float = 1 / 3
    """probability that a pair is a bonus row (the point mass: 1 / M for a location the agent touches first)"""
    bonus_reward: float = 10.0
    bonus_region: float = 1.0
    """fraction of the pairs that can be bonus rows (those with s_0 > 1 - 2 x this): 1 = all; small = rare informative
    rows among many uninformative ones, as in the point mass's replay buffer (a location is touched in few rows)"""
    out: str = os.path.join(ROOT, "benchmarks", "investigations", "mean_learning")
    threads: int = 1


OBS_DIM, ACT_DIM = 4, 2


class Problem:
    """mu(s, a) = 0.5 + 0.3 sin(u . s + v . a + c), its action-gradient, and the noisy, truncated Sobolev targets."""

    def __init__(self, args: Args):
        gen = torch.Generator().manual_seed(args.problem_seed)
        self.u = F.normalize(torch.randn(OBS_DIM, generator=gen), dim=0) * args.obs_frequency
        self.v = F.normalize(torch.randn(ACT_DIM, generator=gen), dim=0) * args.act_frequency
        self.c = float(torch.rand((), generator=gen) * 2 * math.pi)
        self.args = args
        # the gradient noise std that makes E|g| (mean gradient plus noise) the point mass's target gradient norm
        probe_obs, probe_act = self.draw(20_000, gen)
        probe_noise = torch.randn(20_000, ACT_DIM, generator=gen)
        lo, hi = 0.0, 10.0
        for _ in range(50):
            self.grad_noise = (lo + hi) / 2
            norm = (self.grad(probe_obs, probe_act) + self.grad_noise * probe_noise).norm(dim=-1).mean()
            lo, hi = (self.grad_noise, hi) if norm < args.target_grad_norm else (lo, self.grad_noise)
        # E[mean of the kept targets] - mu: the truncation's downward shift of the return noise (Monte Carlo)
        k = 2 * args.num_samples
        noise = torch.randn(200_000, k, 1, generator=gen) * args.return_noise
        self.truncation_shift = truncate_top(noise, args.truncation)[..., 0].mean().item()
        self.eval_obs, self.eval_act = self.draw(args.eval_pairs, gen)
        self.region_obs, self.region_act = self.draw(args.eval_pairs, gen)  # held-out pairs of the bonus region
        self.region_obs[:, 0] = 1 - 2 * args.bonus_region * torch.rand(args.eval_pairs, generator=gen)

    @staticmethod
    def draw(batch: int, gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.rand(batch, OBS_DIM, generator=gen) * 2 - 1, torch.rand(batch, ACT_DIM, generator=gen) * 2 - 1)

    def mu(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return 0.5 + 0.3 * torch.sin(obs @ self.u + act @ self.v + self.c)

    def grad(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return 0.3 * torch.cos(obs @ self.u + act @ self.v + self.c)[:, None] * self.v

    def bonus_prob(self, obs: torch.Tensor) -> torch.Tensor:
        """P(bonus row | s): --bonus-prob inside the bonus region, 0 outside (and everywhere for `smooth`)."""
        inside = obs[:, 0] > 1 - 2 * self.args.bonus_region
        return inside * (self.args.bonus_prob if self.args.problem == "bonus" else 0.0)

    def mean_return(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """E[mean of a pair's kept targets] given (s, a): what the critic's mean should learn."""
        p = self.bonus_prob(obs)
        return p * self.args.bonus_reward + (1 - p) * (self.mu(obs, act) + self.truncation_shift)

    def mean_grad(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """E[g | s, a] (a bonus row's gradient targets are noise around 0)."""
        return self.grad(obs, act) * (1 - self.bonus_prob(obs))[:, None]

    def targets(self, obs: torch.Tensor, act: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """(B, K, 1 + A): 2N noisy Sobolev target points per pair, the top `truncation` % by return dropped."""
        batch, k = obs.shape[0], 2 * self.args.num_samples
        y = self.mu(obs, act)[:, None] + self.args.return_noise * torch.randn(batch, k, generator=gen)
        g = self.grad(obs, act)[:, None] + self.grad_noise * torch.randn(batch, k, ACT_DIM, generator=gen)
        if self.args.problem == "bonus":  # a terminal bonus row: y = r exactly, g = the reward model's gradient noise
            bonus = torch.rand(batch, generator=gen) < self.bonus_prob(obs)
            y = torch.where(bonus[:, None], self.args.bonus_reward, y)
            g = torch.where(bonus[:, None, None], g - self.grad(obs, act)[:, None], g)
        return truncate_top(torch.cat([y[..., None], g], -1), self.args.truncation)


def parse_variant(name: str, args: Args) -> dict:
    """A variant's loss settings: kind, h, estimator, gradient scale, N, learning rate."""
    spec = {
        "kind": name,
        "h": args.kernel_bandwidth,
        "estimator": "biased",
        "gscale": 1.0,
        "rscale": 1.0,
        "n": args.num_samples,
        "lr": args.learning_rate,
    }
    if "_lr" in name:
        name, lr = name.rsplit("_lr", 1)
        spec["lr"], spec["kind"] = float(lr), name
    if name == "joint_plusmse":
        pass
    elif name.startswith("joint"):
        spec["kind"] = "joint"
        rest = name[len("joint") :]
        if rest == "_unbiased":
            spec["estimator"] = "unbiased"
        elif rest.startswith("_gscale"):
            spec["gscale"] = float(rest[len("_gscale") :])
        elif rest.startswith("_rscale"):
            spec["rscale"] = float(rest[len("_rscale") :])
        elif rest.startswith("_h"):
            spec["h"] = float(rest[len("_h") :])
        elif rest.startswith("_n"):
            spec["n"] = int(rest[len("_n") :])
        elif rest:
            raise ValueError(f"unknown variant {name!r}")
    elif name not in ("msmmd_adam", "msmmd_ascent", "return_only", "huber_mean", "mse_mean"):
        raise ValueError(f"unknown variant {name!r}")
    return spec


def loss_fn(spec: dict, args: Args, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """predictions (1, B, N, 1+A) with their graph, targets (B, K, 1+A) -> scalar loss (mean over the batch)."""
    kind, h = spec["kind"], spec["h"]
    if kind in ("joint", "joint_plusmse"):
        scale = predictions.new_tensor([spec["rscale"]] + [spec["gscale"]] * ACT_DIM)
        loss = mmd2(predictions * scale, targets * scale, h, spec["estimator"]).mean(1).sum()
        if kind == "joint_plusmse":  # + h (mean_j Z_j - mean_k y_k)^2: a mean-seeking term of the MMD's force scale
            loss = loss + h * (predictions[..., 0].mean(-1) - targets[..., 0].mean(-1)).pow(2).mean(1).sum()
        return loss
    if kind in ("msmmd_adam", "msmmd_ascent"):
        initial_theta = torch.randn(predictions.shape[0], predictions.shape[1], targets.shape[-1])
        loss, _ = max_sliced_mmd2(
            predictions,
            targets,
            h,
            args.slice_steps,
            args.slice_lr,
            spec["estimator"],
            initial_theta,
            kind.split("_")[1],
        )
        return loss.mean(1).sum()
    if kind == "return_only":
        return mmd2(predictions[..., :1], targets[..., :1], h, spec["estimator"]).mean(1).sum()
    if kind in ("huber_mean", "mse_mean"):
        mean = predictions[..., 0].mean(-1, keepdim=True).expand(-1, -1, targets.shape[1])  # (1, B, K)
        loss = F.huber_loss if kind == "huber_mean" else F.mse_loss
        return loss(mean, targets[None, ..., 0].expand_as(mean), reduction="none").mean((1, 2)).sum()
    raise ValueError(kind)


def evaluate(critic: Critic, problem: Problem, args: Args) -> dict:
    """mean_error, bias, grad_error on the held-out batch (see the module docstring)."""
    metrics = {}
    held_out = (("", problem.eval_obs, problem.eval_act), ("region_", problem.region_obs, problem.region_act))
    for prefix, obs, act in held_out:
        if prefix and args.problem == "smooth":
            break
        with torch.enable_grad():
            points = sobolev_samples(critic, obs, act, args.eval_samples).detach()[0]  # (B, M, 1+A)
        mean = points.mean(1)  # (B, 1+A)
        error = mean[:, 0] - problem.mean_return(obs, act)
        grad_error = (mean[:, 1:] - problem.mean_grad(obs, act)).norm(dim=-1)
        metrics.update(
            {
                f"{prefix}mean_error": error.abs().mean().item(),
                f"{prefix}bias": error.mean().item(),
                f"{prefix}grad_error": grad_error.mean().item(),
                f"{prefix}median": points[..., 0].median(1).values.mean().item(),
                f"{prefix}spread": points[..., 0].std(1).mean().item(),
            }
        )
    return metrics


def train(variant: str, seed: int, problem: Problem, args: Args) -> dict:
    spec = parse_variant(variant, args)
    torch.manual_seed(seed)
    critic = Critic(OBS_DIM, ACT_DIM, args.hidden_dim, args.noise_dim, num_critics=1)
    optimizer = torch.optim.RAdam(critic.parameters(), lr=spec["lr"], foreach=True)  # the scripts' optimizer
    data_gen = torch.Generator().manual_seed(1000 + seed)  # the same batches for every variant of a seed
    curve = {"updates": [], "return_share": []}
    share, start = float("nan"), time.time()
    for update in range(args.updates + 1):
        if update % args.eval_every == 0:
            metrics = evaluate(critic, problem, args)
            curve["updates"].append(update)
            for name, value in metrics.items():
                curve.setdefault(name, []).append(value)
            curve["return_share"].append(share)
        if update == args.updates:
            break
        obs, act = problem.draw(args.batch_size, data_gen)
        targets = problem.targets(obs, act, data_gen)
        predictions = sobolev_samples(critic, obs, act, spec["n"])  # (1, B, N, 1+A)
        loss = loss_fn(spec, args, predictions, targets)
        if update % args.eval_every == 0:  # the loss's gradient at the prediction points, split by coordinate
            (d_points,) = torch.autograd.grad(loss, predictions, retain_graph=True)
            share = (d_points[..., 0].norm() / d_points.norm()).item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def updates_to_threshold(metric: str) -> int | None:
        values = [abs(v) for v in curve[metric]]
        return next((u for u, v in zip(curve["updates"], values) if v < args.threshold * values[0]), None)

    result = {"variant": variant, "seed": seed, "spec": spec, "curve": curve}
    for metric in ("mean_error", "bias", "region_mean_error"):
        if metric in curve:
            result[f"{metric}_updates_to_threshold"] = updates_to_threshold(metric)
    for metric in curve:
        if metric not in ("updates", "return_share"):
            result[f"initial_{metric}"], result[f"final_{metric}"] = curve[metric][0], curve[metric][-1]
    result["mean_return_share"] = sum(curve["return_share"][1:]) / max(len(curve["return_share"]) - 1, 1)
    result["train_time_s"] = time.time() - start
    return result


def plot(results: list[dict], args: Args, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = {
        "mean_error": "mean |E_xi Z - E[y | s, a]|",
        "region_mean_error": "the same in the bonus region",
        "grad_error": "mean |E_xi dZ/da - E[g | s, a]|",
    }
    metrics = {m: label for m, label in metrics.items() if m in results[0]["curve"]}
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.5))
    cmap = plt.get_cmap("tab10")
    for i, variant in enumerate(args.variants):
        runs = [r for r in results if r["variant"] == variant]
        updates = runs[0]["curve"]["updates"]
        for ax, metric in zip(axes, metrics):
            values = torch.tensor([r["curve"][metric] for r in runs]).mean(0)
            ax.plot(updates, values, "--" if i >= 10 else "-", color=cmap(i % 10), label=variant, lw=1.5)
    for ax, label in zip(axes, metrics.values()):
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("critic updates")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7, ncol=2)
    region = f", bonus region {args.bonus_region:g}" if args.problem == "bonus" and args.bonus_region < 1 else ""
    fig.suptitle(
        f"Supervised Sobolev targets, problem `{args.problem}`{region} "
        f"(B {args.batch_size}, N {args.num_samples}, "
        f"hidden {args.hidden_dim}, RAdam; held-out, mean of {len(args.seeds)} seeds)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(args: Args) -> None:
    torch.set_num_threads(args.threads)
    for variant in args.variants:
        parse_variant(variant, args)  # fail early on a typo
    problem = Problem(args)
    mean_norm = (problem.grad(problem.eval_obs, problem.eval_act)).norm(dim=-1).mean().item()
    print(
        f"problem {args.problem}: sigma_g = {problem.grad_noise:.3f}, mean |d mu/da| = {mean_norm:.3f}, "
        f"truncation shift {problem.truncation_shift:+.4f}",
        flush=True,
    )
    os.makedirs(args.out, exist_ok=True)
    results, start = [], time.time()
    for variant in args.variants:
        for seed in args.seeds:
            result = train(variant, seed, problem, args)
            results.append(result)
            line = (
                f"{variant:18s} seed {seed}: to {args.threshold:.0%}: "
                f"error {result['mean_error_updates_to_threshold']}, "
                f"|bias| {result['bias_updates_to_threshold']}"
            )
            if "region_mean_error" in result["curve"]:
                line += f", region {result['region_mean_error_updates_to_threshold']}"
            line += "; final"
            for metric in (
                "mean_error",
                "bias",
                "grad_error",
                "spread",
                "region_mean_error",
                "region_bias",
                "region_spread",
            ):
                if f"final_{metric}" in result:
                    line += f" {metric} {result[f'final_{metric}']:+.3f}"
            line += f"; return share {result['mean_return_share']:.2f}, {result['train_time_s']:.0f} s"
            print(line, flush=True)
    summary = {}
    for variant in args.variants:
        runs = [r for r in results if r["variant"] == variant]
        summary[variant] = {name: [r[name] for r in runs] for name in runs[0] if name.endswith("updates_to_threshold")}
        summary[variant] |= {
            name: sum(r[name] for r in runs) / len(runs)
            for name in runs[0]
            if name.startswith(("initial_", "final_", "mean_return_share", "train_time_s"))
        }
    name = args.problem + (f"_region{args.bonus_region:g}" if args.problem == "bonus" and args.bonus_region < 1 else "")
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(
            {
                "args": vars(args),
                "problem": {
                    "grad_noise": problem.grad_noise,
                    "mean_grad_norm": mean_norm,
                    "truncation_shift": problem.truncation_shift,
                },
                "summary": summary,
                "runs": results,
                "wall_time_s": time.time() - start,
            },
            f,
            indent=1,
        )
    plot(results, args, os.path.join(args.out, f"{name}.png"))
    print(f"written to {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main(tyro.cli(Args, description=__doc__.split("\n\n")[0]))
