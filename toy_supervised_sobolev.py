"""Toy supervised distributional Sobolev training on a mixture of sinusoids.

What it is
----------
The supervised experiment of the paper's appendix "Toy supervised learning". The target is a random function
f(x; a) = a sin(x) with a drawn uniformly from {0, 1, 2, 3, 4} and x ~ U[0, 5]. For every sampled x we observe
4 draws of a (with replacement), i.e. 4 values of the joint "Sobolev" variable [f(x; a), df/dx(x; a)].
Four variants of the same MLP are trained on those observations:

- `mmd_sobolev`: a generator g(x, eps), eps ~ N(0, I_10), whose samples [g, dg/dx] are matched to the observed
  [y, dy/dx] with MMD (the distributional Sobolev model; dg/dx comes from autograd with create_graph=True, so the
  gradient of the model stands for the gradient of the random function);
- `mmd`: the same generator matched on y only;
- `l2_sobolev`: a deterministic MLP regressing the observed y and dy/dx with squared errors (Czarnecki et al.'s
  Sobolev training);
- `l2`: the same regression on y only.

Two data regimes: "unlimited" (fresh 256 pairs every step) and "limited" (one fixed dataset of `--num-points` pairs,
used as the full batch at every step). Every `--eval-frequency` steps each model is evaluated on a grid of x:
the biased MMD^2 on the joint [y, dy/dx] under a rational-quadratic kernel (alpha = 1), the squared error between
the predicted mean gradient and the true mean gradient E_a[a] cos(x) = 2 cos(x), and the mean |d^2y/dx^2|.

How to run
----------
    python toy_supervised_sobolev.py                        # the full experiment (unlimited + 3 dataset sizes)
    python toy_supervised_sobolev.py --num-workers 1        # same numbers, one process (about twice as long)
    python toy_supervised_sobolev.py --no-unlimited --num-points 16 32 --variants mmd_sobolev l2_sobolev
    python toy_supervised_sobolev.py --num-steps 40 --eval-frequency 20 --out-dir /tmp/toy   # smoke test

Outputs in `runs/<run_name>/` (or `--out-dir`): `summary.json`, the figures `samples_<regime>.png`,
`curves_<regime>.png` and (limited regime) `dataset_size.png`, and one TensorBoard log directory per training,
`<regime>/<variant>/` (regime = `unlimited` or `n<num_points>`), with the scalars `eval/mmd`, `eval/grad_mean_l2`,
`eval/second_derivative_norm`, `losses/loss` and `charts/SPS`; `tensorboard --logdir runs/<run_name>` overlays the
variants on the same charts. The folder is checked writable before any training. Ctrl-C or SIGTERM stops the run: the
results of the trainings that had finished go to `summary.json` (with `"interrupted": true`; no figures), one line on
stderr says where it stopped and what was saved, exit status 1.

Choices the paper leaves open, and how we fixed them
----------------------------------------------------
- Training losses. MMD variants: biased MMD^2 between the 4 generator samples and the 4 observed targets of each x,
  with the sum of 7 RBF kernels (bandwidths 0.01 ... 100), averaged over the batch. L2 variants: the single
  prediction is regressed onto each of the 4 targets (mean squared error over batch and targets); `l2_sobolev` adds
  `--grad-weight` (default 1; the paper gives no weight for this experiment) times the same error on the gradient.
  The plain variants use y only.
- Evaluation. A fixed grid of `--eval-points` x values in [0, 5]; per x, `--eval-samples` true samples (drawn once)
  against as many model samples (fixed generator noise). A deterministic model's samples are its prediction repeated.
  The mean-gradient error of a generator is measured on its `--eval-samples` sample mean, so it has a Monte-Carlo
  floor; `summary.json` reports, as `truth_reference`, the same three metrics for a second independent sample of the
  true distribution, which gives that floor (and the true mean |d^2y/dx^2|, about 1.31). Evaluation runs every 500
  steps by default: one generator evaluation (16 384 samples with second derivatives) takes ~0.5 s on a CPU thread.
- `summary.json`: `results[<regime>][<variant>]` holds the final `eval_mmd`, `grad_mean_l2`,
  `second_derivative_norm`, `train_time_s` and the evaluation `history`; plus `truth_reference`, `args`, `wall_time_s`.
- Input noise (`--input-noise`, the paper's "adding noise" appendix) perturbs x fed to the L2 models only, freshly
  every step; the targets stay those of the clean x.
- Regimes. `--unlimited/--no-unlimited` toggles the unlimited regime; `--num-points` lists the dataset sizes of the
  limited regime (empty: none). The paper does not list its sizes; our default 16, 64, 256 spans heavy to mild
  data scarcity. All variants of one size share the same dataset.
- Runtime. Each (regime, variant) training is an independent job with its own seed, so `--num-workers N` runs jobs
  in N processes (one torch thread each by default) and gives the same numbers as a sequential run.
"""

import json
import math
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import random
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Literal, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import tyro
from matplotlib.ticker import NullLocator
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

VariantName = Literal["mmd_sobolev", "mmd", "l2_sobolev", "l2"]
ALL_VARIANTS: tuple[VariantName, ...] = ("mmd_sobolev", "mmd", "l2_sobolev", "l2")
A_VALUES = (0.0, 1.0, 2.0, 3.0, 4.0)  # support of the latent amplitude a
TRUE_MEAN_A = 2.0  # E[a]: the true mean gradient is 2 cos(x)
X_MAX = 5.0  # x ~ U[0, X_MAX]
RBF_BANDWIDTHS = (0.01, 0.05, 0.1, 0.5, 1.0, 10.0, 100.0)
RQ_ALPHA = 1.0  # rational-quadratic evaluation kernel
LOG_EVERY = 100  # steps between loss logs / progress updates
METRICS = ("eval_mmd", "grad_mean_l2", "second_derivative_norm")


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment (prefix of the run name)"""
    seed: int = 1
    """seed of the experiment"""
    cuda: bool = True
    """use CUDA when it is available"""
    num_workers: int = 2
    """number of processes training (regime, variant) jobs in parallel (results do not depend on it)"""
    torch_threads: int = 1
    """CPU threads of each training process (torch.set_num_threads)"""
    out_dir: Optional[str] = None
    """output directory (None: runs/<exp_name>__<seed>__<unix time>)"""

    variants: tuple[VariantName, ...] = ALL_VARIANTS
    """which models to train"""
    unlimited: bool = True
    """run the unlimited-data regime (fresh pairs every step)"""
    num_points: tuple[int, ...] = (16, 64, 256)
    """dataset sizes (pairs (x, y_1:4)) of the limited-data regime; empty: no limited regime"""

    num_steps: int = 25_000
    """gradient steps per training"""
    batch_size: int = 256
    """pairs (x, y_1:4) per step in the unlimited regime"""
    targets_per_x: int = 4
    """observed values of a per x"""
    model_samples: int = 4
    """generator samples per x in the MMD loss"""
    noise_dim: int = 10
    """dimension of the generator's N(0, I) noise input"""
    hidden_dim: int = 256
    """width of the two hidden layers"""
    learning_rate: float = 1e-3
    """RAdam learning rate"""
    betas: tuple[float, float] = (0.5, 0.9)
    """RAdam betas"""
    grad_weight: float = 1.0
    """weight of the gradient error in the l2_sobolev loss"""
    input_noise: float = 0.0
    """std of the Gaussian noise added to x for the L2 models (0: none)"""

    eval_frequency: int = 500
    """steps between evaluations"""
    eval_points: int = 256
    """x values of the evaluation grid"""
    eval_samples: int = 64
    """true and model samples per evaluation x"""


# ----------------------------------------------------------------------------------------------------------------
# data: the mixture of sinusoids
# ----------------------------------------------------------------------------------------------------------------
def sinusoid(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """f(x; a) = a sin(x) with its first and second x-derivatives. x, a broadcastable -> (..., 3)."""
    return torch.stack([a * torch.sin(x), a * torch.cos(x), -a * torch.sin(x)], dim=-1)


def sample_amplitudes(shape: tuple[int, ...], generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Draw a uniformly from A_VALUES (with replacement)."""
    idx = torch.randint(len(A_VALUES), shape, generator=generator)
    return torch.tensor(A_VALUES)[idx]


def sample_pairs(
    num_pairs: int, targets_per_x: int, generator: Optional[torch.Generator] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x ~ U[0, 5] and `targets_per_x` draws of [a sin x, a cos x] per x -> x (N,), targets (N, K, 2)."""
    x = torch.rand(num_pairs, generator=generator) * X_MAX  # (N,)
    a = sample_amplitudes((num_pairs, targets_per_x), generator)  # (N, K)
    return x, sinusoid(x[:, None], a)[..., :2]


def derive_seed(*keys: int) -> int:
    """A reproducible 32-bit seed from a tuple of integers."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])


def limited_dataset(seed: int, num_points: int, targets_per_x: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed dataset of the limited regime; the same for every variant of a given size."""
    generator = torch.Generator().manual_seed(derive_seed(seed, num_points, 1))
    return sample_pairs(num_points, targets_per_x, generator)


@dataclass
class EvalSet:
    x: torch.Tensor  # (P,) grid over [0, 5]
    truth: torch.Tensor  # (P, S, 3) true samples [y, dy/dx, d2y/dx2]
    truth_reference: torch.Tensor  # (P, S, 3) an independent true sample (noise floor of the metrics)
    noise: torch.Tensor  # (P, S, noise_dim) fixed generator noise


def make_eval_set(args: Args, device: torch.device) -> EvalSet:
    generator = torch.Generator().manual_seed(derive_seed(args.seed, 0, 2))
    x = torch.linspace(0.0, X_MAX, args.eval_points)
    shape = (args.eval_points, args.eval_samples)
    truth = sinusoid(x[:, None], sample_amplitudes(shape, generator))
    reference = sinusoid(x[:, None], sample_amplitudes(shape, generator))
    noise = torch.randn(*shape, args.noise_dim, generator=generator)
    return EvalSet(x.to(device), truth.to(device), reference.to(device), noise.to(device))


# ----------------------------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------------------------
class MLP(nn.Module):
    """Scalar MLP, 2 hidden layers with Swish (SiLU). With noise_dim > 0 it is a generator g(x, eps)."""

    def __init__(self, noise_dim: int, hidden_dim: int):
        super().__init__()
        self.noise_dim = noise_dim
        self.net = nn.Sequential(
            nn.Linear(1 + noise_dim, hidden_dim),
            nn.SiLU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.SiLU(),
            nn.Linear(hidden_dim, 1),
        )

    def forward(self, x: torch.Tensor, noise: Optional[torch.Tensor]) -> torch.Tensor:
        """x (..., M), noise (..., M, noise_dim) or None -> y (..., M)."""
        inputs = x[..., None] if noise is None else torch.cat([x[..., None], noise], dim=-1)
        return self.net(inputs).squeeze(-1)


def sobolev_outputs(
    model: MLP, x: torch.Tensor, noise: Optional[torch.Tensor], order: int, create_graph: bool
) -> torch.Tensor:
    """Model output and its first `order` derivatives in x, per sample: x (..., M) -> (..., M, 1 + order).

    Every sample gets its own leaf copy of x, so the gradient of the summed outputs is the per-sample derivative.
    With create_graph the derivatives stay differentiable w.r.t. the weights (double backprop).
    """
    x = x.detach().clone().requires_grad_(order > 0)
    outputs = [model(x, noise)]
    for k in range(order):
        keep_graph = create_graph or k < order - 1
        (derivative,) = torch.autograd.grad(outputs[-1].sum(), x, create_graph=keep_graph)
        outputs.append(derivative)
    return torch.stack(outputs, dim=-1)


# ----------------------------------------------------------------------------------------------------------------
# kernels and losses
# ----------------------------------------------------------------------------------------------------------------
def squared_distances(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x (..., n, d), y (..., m, d) -> (..., n, m)."""
    return (x[..., :, None, :] - y[..., None, :, :]).pow(2).sum(-1)


def rbf_mixture_kernel(
    x: torch.Tensor, y: torch.Tensor, bandwidths: tuple[float, ...] = RBF_BANDWIDTHS
) -> torch.Tensor:
    """sum_i exp(-|x - y|^2 / (2 sigma_i^2)): x (..., n, d), y (..., m, d) -> (..., n, m)."""
    sigmas = torch.tensor(bandwidths, dtype=x.dtype, device=x.device)
    d2 = squared_distances(x, y)[..., None]  # (..., n, m, 1)
    return torch.exp(-d2 / (2 * sigmas**2)).sum(-1)


def rational_quadratic_kernel(x: torch.Tensor, y: torch.Tensor, alpha: float = RQ_ALPHA) -> torch.Tensor:
    """(1 + |x - y|^2 / (2 alpha))^(-alpha): x (..., n, d), y (..., m, d) -> (..., n, m)."""
    return (1 + squared_distances(x, y) / (2 * alpha)).pow(-alpha)


def mmd2(
    x: torch.Tensor, y: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """Biased MMD^2 estimate between sample sets x (..., n, d) and y (..., m, d) -> (...)."""
    k_xx = kernel(x, x).mean((-2, -1))
    k_yy = kernel(y, y).mean((-2, -1))
    k_xy = kernel(x, y).mean((-2, -1))
    return k_xx + k_yy - 2 * k_xy


def regression_loss(prediction: torch.Tensor, targets: torch.Tensor, grad_weight: float) -> torch.Tensor:
    """Squared error of one prediction against every target: (B, 1, d), (B, K, d) -> scalar; d = 2 adds the gradient."""
    sq_errors = (prediction - targets).pow(2)  # (B, K, d)
    loss = sq_errors[..., 0].mean()
    if targets.shape[-1] == 2:
        loss = loss + grad_weight * sq_errors[..., 1].mean()
    return loss


def is_generator(variant: str) -> bool:
    return variant.startswith("mmd")


def uses_gradient(variant: str) -> bool:
    return variant.endswith("_sobolev")


def training_loss(model: MLP, variant: str, x: torch.Tensor, targets: torch.Tensor, args: Args) -> torch.Tensor:
    """Loss of one step on pairs x (B,), targets (B, K, 2)."""
    order = int(uses_gradient(variant))
    targets = targets[..., : 1 + order]  # (B, K, 1 + order)
    if is_generator(variant):
        x_samples = x[:, None].expand(-1, args.model_samples)  # (B, M)
        noise = torch.randn(*x_samples.shape, args.noise_dim, device=x.device)  # (B, M, noise_dim)
        samples = sobolev_outputs(model, x_samples, noise, order, create_graph=True)  # (B, M, 1 + order)
        return mmd2(samples, targets, rbf_mixture_kernel).mean()
    x_input = x + args.input_noise * torch.randn_like(x)
    prediction = sobolev_outputs(model, x_input[:, None], None, order, create_graph=True)  # (B, 1, 1 + order)
    return regression_loss(prediction, targets, args.grad_weight)


# ----------------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------------
def sobolev_metrics(samples: torch.Tensor, x: torch.Tensor, truth: torch.Tensor) -> dict[str, float]:
    """samples (P, S, 3) = [y, dy/dx, d2y/dx2] at x (P,), against true samples (P, S', 3)."""
    eval_mmd = mmd2(samples[..., :2], truth[..., :2], rational_quadratic_kernel).mean()
    mean_gradient = samples[..., 1].mean(-1)  # (P,)
    grad_mean_l2 = (mean_gradient - TRUE_MEAN_A * torch.cos(x)).pow(2).mean()
    second_derivative_norm = samples[..., 2].abs().mean()
    return {
        "eval_mmd": eval_mmd.item(),
        "grad_mean_l2": grad_mean_l2.item(),
        "second_derivative_norm": second_derivative_norm.item(),
    }


def model_samples_on_grid(model: MLP, variant: str, eval_set: EvalSet) -> torch.Tensor:
    """[y, dy/dx, d2y/dx2] of the model on the evaluation grid -> (P, S, 3)."""
    num_points, num_samples = eval_set.noise.shape[:2]
    if is_generator(variant):
        x = eval_set.x[:, None].expand(-1, num_samples)  # (P, S)
        samples = sobolev_outputs(model, x, eval_set.noise, order=2, create_graph=False)
    else:
        prediction = sobolev_outputs(model, eval_set.x[:, None], None, order=2, create_graph=False)  # (P, 1, 3)
        samples = prediction.expand(num_points, num_samples, 3)
    return samples.detach()


# ----------------------------------------------------------------------------------------------------------------
# one training job: one variant in one data regime
# ----------------------------------------------------------------------------------------------------------------
def regime_name(num_points: Optional[int]) -> str:
    return "unlimited" if num_points is None else f"n{num_points}"


def select_device(cuda: bool) -> torch.device:
    return torch.device("cuda" if cuda and torch.cuda.is_available() else "cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_job(
    args: Args, num_points: Optional[int], variant: str, out_dir: str, progress: Callable[[int], None]
) -> dict:
    """Train one model and return its evaluation history, final metrics and final samples on the grid."""
    torch.set_num_threads(args.torch_threads)
    device = select_device(args.cuda)
    seed_everything(derive_seed(args.seed, num_points or 0, ALL_VARIANTS.index(variant), 3))
    eval_set = make_eval_set(args, device)
    dataset = None
    if num_points is not None:
        dataset = tuple(t.to(device) for t in limited_dataset(args.seed, num_points, args.targets_per_x))

    model = MLP(args.noise_dim if is_generator(variant) else 0, args.hidden_dim).to(device)
    optimizer = torch.optim.RAdam(model.parameters(), lr=args.learning_rate, betas=args.betas)
    writer = SummaryWriter(str(Path(out_dir) / regime_name(num_points) / variant))
    history: dict[str, list] = {"step": [], **{name: [] for name in METRICS}}

    def evaluate(step: int) -> None:
        metrics = sobolev_metrics(model_samples_on_grid(model, variant, eval_set), eval_set.x, eval_set.truth)
        history["step"].append(step)
        for name, value in metrics.items():
            history[name].append(value)
        writer.add_scalar("eval/mmd", metrics["eval_mmd"], step)
        writer.add_scalar("eval/grad_mean_l2", metrics["grad_mean_l2"], step)
        writer.add_scalar("eval/second_derivative_norm", metrics["second_derivative_norm"], step)

    try:  # on Ctrl-C, SIGTERM or a stop request the TensorBoard log keeps the curves so far
        evaluate(0)
        start_time = time.time()
        for step in range(1, args.num_steps + 1):
            if stop_requested():
                raise JobStopped
            if dataset is None:
                x, targets = (t.to(device) for t in sample_pairs(args.batch_size, args.targets_per_x))
            else:
                x, targets = dataset
            loss = training_loss(model, variant, x, targets, args)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            if step % LOG_EVERY == 0 or step == args.num_steps:
                writer.add_scalar("losses/loss", loss.item(), step)
                writer.add_scalar("charts/SPS", int(step / (time.time() - start_time)), step)
                progress(step % LOG_EVERY or LOG_EVERY)  # steps since the last report
            if step % args.eval_frequency == 0 or step == args.num_steps:
                evaluate(step)
        train_time = time.time() - start_time
    finally:
        writer.close()
    return {
        "regime": regime_name(num_points),
        "variant": variant,
        "final": {name: history[name][-1] for name in METRICS},
        "train_time_s": train_time,
        "history": history,
        "samples": model_samples_on_grid(model, variant, eval_set).cpu().numpy(),  # (P, S, 3)
    }


def job_cost(args: Args, job: tuple[Optional[int], str]) -> int:
    """Rough relative cost of a job (network rows per step, doubled by double backprop); longest jobs start first."""
    num_points, variant = job
    rows = (num_points or args.batch_size) * (args.model_samples if is_generator(variant) else 1)
    return rows * (2 if uses_gradient(variant) else 1)


class JobStopped(Exception):
    """A worker's training left early because the main process was interrupted."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during the trainings: the results of those that had finished (in job order), the steps done."""

    def __init__(self, finished: list[dict], steps_done: int):
        super().__init__(f"interrupted after {len(finished)} trainings")
        self.finished, self.steps_done = finished, steps_done


_worker_progress: Optional[multiprocessing.queues.Queue] = None  # set in worker processes by init_worker
_worker_stop: Optional[multiprocessing.synchronize.Event] = None


def init_worker(progress_queue: multiprocessing.queues.Queue, stop: multiprocessing.synchronize.Event) -> None:
    """A worker leaves Ctrl-C (sent to the whole process group) and SIGTERM to the main process, which stops it via
    `stop`."""
    global _worker_progress, _worker_stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _worker_progress, _worker_stop = progress_queue, stop


def report_progress(steps: int) -> None:
    """The progress callback of a job in a worker process."""
    _worker_progress.put(steps)


def stop_requested() -> bool:
    return _worker_stop is not None and _worker_stop.is_set()


def ignore_interrupts() -> None:
    """While the interrupted run saves its results, a second Ctrl-C or SIGTERM changes nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run_jobs(args: Args, jobs: list[tuple[Optional[int], str]], out_dir: str) -> list[dict]:
    """Run the jobs in this process or in a pool of `num_workers` processes; results in the order of `jobs`.
    On KeyboardInterrupt (Ctrl-C, or SIGTERM with main's handler) stop every training and raise Interrupted."""
    workers = worker_count(args, len(jobs))
    with tqdm(total=len(jobs) * args.num_steps, unit="step", smoothing=0.05) as bar:
        if workers == 1:
            results: list[dict] = []
            try:
                for n, variant in jobs:
                    results.append(train_job(args, n, variant, out_dir, bar.update))
            except KeyboardInterrupt:
                ignore_interrupts()
                raise Interrupted(results, bar.n) from None
            return results
        context = multiprocessing.get_context("spawn")
        progress_queue, stop = context.Queue(), context.Event()
        pool = ProcessPoolExecutor(
            workers, mp_context=context, initializer=init_worker, initargs=(progress_queue, stop)
        )
        futures = {}
        try:
            handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
            ignore_interrupts()  # the workers start (in submit) with both ignored: a Ctrl-C while one still imports
            for job in sorted(jobs, key=lambda job: job_cost(args, job), reverse=True):  # torch cannot kill it
                futures[job] = pool.submit(train_job, args, *job, out_dir, report_progress)
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
            pending = set(futures.values())
            while pending:
                _, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                while not progress_queue.empty():
                    bar.update(progress_queue.get())
            return [futures[job].result() for job in jobs]
        except KeyboardInterrupt:
            ignore_interrupts()
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)  # running trainings stop at their next step
            done = [futures[job] for job in jobs if job in futures and futures[job].done()]
            finished = [future.result() for future in done if not future.cancelled() and future.exception() is None]
            raise Interrupted(finished, bar.n) from None
        finally:  # also after an error in one job: the others stop instead of running to the end
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------------------------------------------
# figures
# ----------------------------------------------------------------------------------------------------------------
VARIANT_STYLE = {  # colour: gradient information (blue) or not (orange); line: MMD (solid) or L2 (dashed)
    "mmd_sobolev": {"color": "tab:blue", "linestyle": "-"},
    "mmd": {"color": "tab:orange", "linestyle": "-"},
    "l2_sobolev": {"color": "tab:blue", "linestyle": "--"},
    "l2": {"color": "tab:orange", "linestyle": "--"},
}
METRIC_TITLES = {
    "eval_mmd": "MMD$^2$ on [y, dy/dx] (RQ kernel)",
    "grad_mean_l2": "L2 error of the mean gradient",
    "second_derivative_norm": "mean |d$^2$y/dx$^2$|",
}


def plot_samples(
    path: Path, eval_set: EvalSet, results: list[dict], dataset: Optional[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """Output (left) and gradient (right) marginals: truth (blue) vs each model (red: generator, green: L2)."""
    shown = 4  # samples per grid x drawn in the scatter
    x = eval_set.x.cpu().numpy()
    truth = eval_set.truth.cpu().numpy()[:, :shown]
    fig, axes = plt.subplots(len(results), 2, figsize=(8, 2.1 * len(results)), squeeze=False, sharex=True)
    for row, result in zip(axes, results):
        samples = result["samples"]
        for col, label in enumerate(("y", "dy/dx")):
            ax = row[col]
            ax.scatter(np.repeat(x, shown), truth[..., col].ravel(), s=1, c="tab:blue", label="truth")
            if is_generator(result["variant"]):
                xs, ys = np.repeat(x, shown), samples[:, :shown, col].ravel()
                ax.scatter(xs, ys, s=1, c="tab:red", alpha=0.5, label="model")
            else:
                ax.plot(x, samples[:, 0, col], c="tab:green", lw=1.5, label="model")
            if dataset is not None:
                data_x, data_targets = (t.cpu().numpy() for t in dataset)
                xs = np.repeat(data_x, data_targets.shape[1])
                ax.scatter(xs, data_targets[..., col].ravel(), s=8, c="k", marker="x", lw=0.7, label="data")
            ax.set_ylim(-6, 6)
            ax.set_ylabel(f"{result['variant']}\n{label}", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="lower left", markerscale=4)
    for ax in axes[-1]:
        ax.set_xlabel("x")
    fig.suptitle(f"samples after {results[0]['history']['step'][-1]} steps ({results[0]['regime']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_curves(path: Path, results: list[dict], reference: dict[str, float]) -> None:
    """Evaluation metrics against training steps, one line per variant."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, metric in zip(axes, METRICS):
        for result in results:
            history = result["history"]
            ax.plot(history["step"], history[metric], label=result["variant"], **VARIANT_STYLE[result["variant"]])
        ax.axhline(reference[metric], color="gray", linestyle=":", label="true samples")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(METRIC_TITLES[metric], fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8)
    fig.suptitle(results[0]["regime"], fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_dataset_size(path: Path, summary: dict, args: Args) -> None:
    """Final metrics against the dataset size of the limited regime; hollow markers at "inf": unlimited regime."""
    sizes = sorted(args.num_points)
    unlimited_position = sizes[-1] * 4
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, metric in zip(axes, METRICS):
        for variant in args.variants:
            style = {**VARIANT_STYLE[variant], "marker": "o" if is_generator(variant) else "s"}
            values = [summary["results"][regime_name(n)][variant][metric] for n in sizes]
            ax.plot(sizes, values, label=variant, **style)
            if args.unlimited:
                unlimited_value = summary["results"]["unlimited"][variant][metric]
                ax.plot([unlimited_position], [unlimited_value], fillstyle="none", **style)
        ax.axhline(summary["truth_reference"][metric], color="gray", linestyle=":", label="true samples")
        ticks = sizes + [unlimited_position] if args.unlimited else sizes
        ax.set_xscale("log")
        ax.set_xticks(ticks, [str(n) for n in sizes] + (["inf"] if args.unlimited else []))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("dataset size (pairs)")
        ax.set_title(METRIC_TITLES[metric], fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8)
    fig.suptitle(f"after {args.num_steps} steps", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------------
# The range of every numeric flag, one rule each: (flag, requirement, test). A tuple flag is checked value by value, and
# every value must also be finite (a NaN fails no comparison, so `nan <= 0` alone would let --learning-rate nan pass).
FLAG_RULES: tuple[tuple[str, str, Callable[[float], bool]], ...] = (
    ("seed", ">= 0", lambda v: v >= 0),
    ("num_workers", ">= 1", lambda v: v >= 1),
    ("torch_threads", ">= 1", lambda v: v >= 1),
    ("num_points", ">= 1", lambda v: v >= 1),
    ("num_steps", ">= 1", lambda v: v >= 1),
    ("batch_size", ">= 1", lambda v: v >= 1),
    ("targets_per_x", ">= 1", lambda v: v >= 1),
    ("model_samples", ">= 1", lambda v: v >= 1),
    ("noise_dim", ">= 1", lambda v: v >= 1),
    ("hidden_dim", ">= 1", lambda v: v >= 1),
    ("learning_rate", "finite and > 0", lambda v: v > 0),
    ("betas", "finite and in [0, 1)", lambda v: 0 <= v < 1),
    ("grad_weight", "finite and >= 0", lambda v: v >= 0),
    ("input_noise", "finite and >= 0", lambda v: v >= 0),
    ("eval_frequency", ">= 1", lambda v: v >= 1),
    ("eval_points", ">= 1", lambda v: v >= 1),
    ("eval_samples", ">= 1", lambda v: v >= 1),
)


def check_args(args: Args) -> Optional[str]:
    """The first problem with the arguments, or None."""
    for name, requirement, test in FLAG_RULES:
        value = getattr(args, name)
        values = value if isinstance(value, tuple) else (value,)
        if not all(math.isfinite(v) and test(v) for v in values):
            return f"--{name.replace('_', '-')} must be {requirement} (got {' '.join(map(str, values))})"
    if not args.variants:
        return "--variants: give at least one variant"
    if len(set(args.variants)) != len(args.variants):
        return f"--variants: repeated variant in {' '.join(args.variants)}"
    if len(set(args.num_points)) != len(args.num_points):
        return f"--num-points: repeated size in {' '.join(map(str, args.num_points))}"
    if not args.unlimited and not args.num_points:
        return "nothing to run: --no-unlimited and no --num-points"
    return memory_problem(args)


def worker_count(args: Args, num_jobs: int) -> int:
    """The training processes: --num-workers, but no more than the jobs nor this machine's cores (more would only
    share them, and slow a stop)."""
    return max(1, min(args.num_workers, num_jobs, len(os.sched_getaffinity(0))))


def memory_problem(args: Args) -> Optional[str]:
    """Whether the trainings running at once would need more memory than they train in (the GPU's with --cuda and one,
    else this machine's RAM), by an order-of-magnitude lower bound: per worker, the weights four times (weights,
    gradients, RAdam's two moments), the largest hidden activation of a step or an evaluation, and the largest data
    set of the limited regime (x and K targets of 2 values per pair)."""
    jobs = (1 if args.unlimited else 0) + len(args.num_points)
    workers = worker_count(args, jobs * len(args.variants))
    weights = (1 + args.noise_dim) * args.hidden_dim + args.hidden_dim**2 + 2 * args.hidden_dim + 1
    rows = max(args.batch_size * max(args.model_samples, args.targets_per_x), args.eval_points * args.eval_samples)
    needed = {"the weights": 4 * 4 * weights * workers, "one hidden activation": 4 * rows * args.hidden_dim * workers}
    if args.num_points:
        needed[f"the data set of --num-points {max(args.num_points)}"] = (
            4 * max(args.num_points) * (1 + 2 * args.targets_per_x) * workers
        )
    if args.cuda and torch.cuda.is_available():
        available, where = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory, "the GPU has"
    else:
        available, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"
    if sum(needed.values()) <= available:
        return None
    part, size = max(needed.items(), key=lambda item: item[1])
    return (
        f"{part} would need ~{size / 1e9:.3g} GB over {workers} worker(s), more than the {available / 1e9:.3g} GB "
        f"{where} (an order-of-magnitude lower bound); lower --hidden-dim, --num-points, the batch or evaluation "
        "sizes, or --num-workers"
    )


def fail(message: str, status: int = 1) -> None:
    """One line on stderr, exit with `status`, no traceback."""
    print(f"{os.path.basename(__file__)}: error: {message}", file=sys.stderr)
    sys.exit(status)


def raise_keyboard_interrupt(signum: int, frame: object) -> None:
    """SIGTERM, what Slurm and most schedulers send before killing a job, stops a run like Ctrl-C."""
    raise KeyboardInterrupt


def writable_folder_problem(out_dir: Path) -> Optional[str]:
    """Why the output folder cannot be created or written to, or None (checked before any training)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as error:
        return f"cannot write to the output folder {out_dir} ({error.strerror or error})"
    return None


def write_summary(path: Path, args: Args, results: list[dict], reference: dict, wall_time: float, **extra) -> dict:
    """summary.json, written atomically (an interruption never leaves half a file)."""
    summary: dict = {
        "args": asdict(args),
        "wall_time_s": wall_time,
        "truth_reference": reference,
        **extra,
        "results": {},
    }
    for result in results:
        summary["results"].setdefault(result["regime"], {})[result["variant"]] = {
            **result["final"],
            "train_time_s": result["train_time_s"],
            "history": result["history"],
        }
    with open(path.with_suffix(".json.tmp"), "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(path.with_suffix(".json.tmp"), path)
    return summary


def main(args: Args) -> dict:
    problem = check_args(args)
    if problem is not None:
        fail(problem, status=2)
    run_name = f"{args.exp_name}__{args.seed}__{int(time.time())}"
    out_dir = Path(args.out_dir) if args.out_dir is not None else Path("runs") / run_name
    if out_dir.is_dir() and any(out_dir.iterdir()):  # a run's summary, logs and figures are never overwritten
        fail(f"--out-dir {out_dir} is not empty (an earlier run's outputs?): give a new folder, or empty it first")
    problem = writable_folder_problem(out_dir)
    if problem is not None:
        fail(problem)
    regimes: list[Optional[int]] = ([None] if args.unlimited else []) + list(args.num_points)
    jobs = [(n, variant) for n in regimes for variant in args.variants]
    if args.num_workers > (cores := len(os.sched_getaffinity(0))) and len(jobs) > cores:
        print(
            f"note: --num-workers {args.num_workers}: this machine has {cores} cores, so {cores} train", file=sys.stderr
        )
    eval_set = make_eval_set(args, torch.device("cpu"))
    reference = sobolev_metrics(eval_set.truth_reference, eval_set.x, eval_set.truth)

    # Ctrl-C or SIGTERM: the finished trainings' results go to summary.json, one line says where the run stopped
    previous_handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    total_steps, start_time, summary = len(jobs) * args.num_steps, time.time(), {}
    try:
        try:
            results = run_jobs(args, jobs, str(out_dir))
        except Interrupted as interruption:
            finished, where = interruption.finished, f"interrupted at step {interruption.steps_done} of {total_steps}"
            if not finished:
                fail(f"{where} (no training finished); no results to save (TensorBoard logs so far in {out_dir})")
            wall_time = time.time() - start_time
            write_summary(out_dir / "summary.json", args, finished, reference, wall_time, interrupted=True)
            fail(
                f"{where} ({len(finished)} of {len(jobs)} trainings finished); "
                f"their results saved in {out_dir / 'summary.json'}, no figures drawn"
            )
        wall_time = time.time() - start_time
        summary = write_summary(out_dir / "summary.json", args, results, reference, wall_time)

        for n in regimes:
            regime_results = [r for r in results if r["regime"] == regime_name(n)]
            dataset = None if n is None else limited_dataset(args.seed, n, args.targets_per_x)
            plot_samples(out_dir / f"samples_{regime_name(n)}.png", eval_set, regime_results, dataset)
            plot_curves(out_dir / f"curves_{regime_name(n)}.png", regime_results, reference)
        if args.num_points:
            plot_dataset_size(out_dir / "dataset_size.png", summary, args)
    except KeyboardInterrupt:  # after the trainings: summary.json first, then the figures
        ignore_interrupts()
        if not summary:
            write_summary(out_dir / "summary.json", args, results, reference, time.time() - start_time)
        fail(
            f"interrupted after the trainings (all {len(jobs)} finished), before all figures were drawn; "
            f"results saved in {out_dir / 'summary.json'}"
        )
    finally:
        signal.signal(signal.SIGINT, previous_handlers[0])
        signal.signal(signal.SIGTERM, previous_handlers[1])

    print(f"{'regime':>10} {'variant':>12} " + " ".join(f"{m:>22}" for m in METRICS))
    for regime, by_variant in summary["results"].items():
        for variant, metrics in by_variant.items():
            print(f"{regime:>10} {variant:>12} " + " ".join(f"{metrics[m]:>22.4g}" for m in METRICS))
    print(f"{'truth':>10} {'reference':>12} " + " ".join(f"{reference[m]:>22.4g}" for m in METRICS))
    print(f"wall time {wall_time:.0f} s; outputs in {out_dir}")
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
