"""The distributional critic losses and the TQC truncation checked against independent plain-Python computations (loops
over critics, pairs and points; none of the scripts' own mmd2 or kernel): the multiquadric MMD^2 loss of
dsdpg_mmd_sobolev, its max-sliced form in dsdpg_msmmd_sobolev at zero slicing steps (the initial direction), and every
copy of truncate_top against a sort. Each check is a function of the module, so it can be run on a mutated copy."""

import importlib
import math

import pytest
import torch

ESTIMATORS = ["biased", "unbiased"]
TRUNCATING = ["mmd_critic", "iqn", "dsdpg_mmd_sobolev", "dsdpg_msmmd_sobolev"]


def kernel(u: list[float], v: list[float], h: float) -> float:
    """k_h(u, v) = -sqrt(1 + h^2 |u - v|^2) of two points given as lists."""
    return -math.sqrt(1.0 + h**2 * sum((a - b) ** 2 for a, b in zip(u, v)))


def mmd2_loop(x: list[list[float]], y: list[list[float]], h: float, estimator: str) -> float:
    """MMD^2 between point lists x (n points) and y (m points): biased, the V-statistic (all pairs, i == j included,
    divided by n^2); unbiased, the within-set means over i != j only (divided by n (n - 1))."""
    n, m = len(x), len(y)
    unbiased = estimator == "unbiased"
    xx = sum(kernel(x[i], x[j], h) for i in range(n) for j in range(n) if not (unbiased and i == j))
    yy = sum(kernel(y[i], y[j], h) for i in range(m) for j in range(m) if not (unbiased and i == j))
    xy = sum(kernel(x[i], y[j], h) for i in range(n) for j in range(m))
    if unbiased:
        return xx / (n * (n - 1)) + yy / (m * (m - 1)) - 2 * xy / (n * m)
    return xx / n**2 + yy / m**2 - 2 * xy / (n * m)


def loss_loop(predictions: list, targets: list, h: float, estimator: str, directions: list | None = None) -> float:
    """Sum over critics e of the mean over the batch b of MMD^2(predictions[e][b], targets[b]); with directions[e][b]
    (unit vectors) both sets are first projected onto that direction (1-D points)."""
    total = 0.0
    for e, critic_predictions in enumerate(predictions):
        per_pair = []
        for b, (x, y) in enumerate(zip(critic_predictions, targets)):
            if directions is not None:
                theta = directions[e][b]
                x = [[sum(p * t for p, t in zip(point, theta))] for point in x]
                y = [[sum(p * t for p, t in zip(point, theta))] for point in y]
            per_pair.append(mmd2_loop(x, y, h, estimator))
        total += sum(per_pair) / len(per_pair)
    return total


def random_sets(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """predictions (E=2, B=3, N=4, D=3) and targets (B=3, K=5, D=3), float64, random."""
    generator = torch.Generator().manual_seed(seed)
    predictions = torch.randn(2, 3, 4, 3, generator=generator, dtype=torch.float64)
    targets = torch.randn(3, 5, 3, generator=generator, dtype=torch.float64) * 1.5 + 0.3
    return predictions, targets


def check_mmd_critic_loss(module, estimator: str) -> None:
    """dsdpg_mmd_sobolev.critic_loss against the loops."""
    predictions, targets = random_sets()
    h = 0.7
    loss = module.critic_loss(predictions, targets, h, estimator)
    assert loss.shape == ()
    expected = loss_loop(predictions.tolist(), targets.tolist(), h, estimator)
    assert math.isclose(loss.item(), expected, rel_tol=1e-5, abs_tol=1e-9), (loss.item(), expected)


def check_msmmd_critic_loss(module, estimator: str) -> None:
    """dsdpg_msmmd_sobolev.critic_loss at 0 slicing steps: the 1-D MMD^2 along the normalised initial direction."""
    predictions, targets = random_sets()
    h = 0.7
    initial_theta = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2.0
    loss, theta = module.critic_loss(predictions, targets, h, estimator, (0, 0.1, "adam", initial_theta))
    assert loss.shape == () and theta.shape == (2, 3, 3)
    directions = [
        [[t / math.sqrt(sum(c * c for c in row)) for t in row] for row in rows] for rows in initial_theta.tolist()
    ]
    torch.testing.assert_close(theta, torch.tensor(directions, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    expected = loss_loop(predictions.tolist(), targets.tolist(), h, estimator, directions)
    assert math.isclose(loss.item(), expected, rel_tol=1e-5, abs_tol=1e-9), (loss.item(), expected)


def check_truncate_top(module, p: float) -> None:
    """truncate_top keeps, per set, exactly the n - round(n p / 100) rows of smallest return coordinate."""
    generator = torch.Generator().manual_seed(2)
    samples = torch.randn(2, 3, 8, 4, generator=generator)  # (..., n=8, d=4), rows distinct
    kept = module.truncate_top(samples, p)
    count = 8 - round(8 * p / 100)
    assert kept.shape == (2, 3, count, 4)
    for rows, kept_rows in zip(samples.flatten(0, 1).tolist(), kept.flatten(0, 1).tolist()):
        expected = sorted(rows, key=lambda row: row[0])[:count]
        assert sorted(map(tuple, kept_rows)) == sorted(map(tuple, expected))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_mmd_critic_loss_matches_a_loop(estimator):
    check_mmd_critic_loss(importlib.import_module("dsdpg_mmd_sobolev"), estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_msmmd_critic_loss_at_zero_steps_matches_a_loop_along_the_initial_direction(estimator):
    check_msmmd_critic_loss(importlib.import_module("dsdpg_msmmd_sobolev"), estimator)


def test_the_estimators_differ_on_these_sets():
    """The two estimators give different losses here, so a critic_loss ignoring `estimator` cannot pass both checks."""
    predictions, targets = random_sets()
    biased, unbiased = (loss_loop(predictions.tolist(), targets.tolist(), 0.7, e) for e in ESTIMATORS)
    assert not math.isclose(biased, unbiased, rel_tol=1e-3)


@pytest.mark.parametrize("p", [0, 10, 25, 40, 90])
@pytest.mark.parametrize("name", TRUNCATING)
def test_truncate_top_keeps_the_smallest_returns(name, p):
    check_truncate_top(importlib.import_module(name), p)
