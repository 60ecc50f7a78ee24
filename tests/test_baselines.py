"""Tests of the distributional baselines mmd_critic.py and iqn.py: the quantile Huber loss by hand, both critics
learning a known bimodal return law on a one-state problem, and both scripts end to end."""

import math

import pytest
import torch
from helpers import only_run_dir, read_scalars, read_summary, run_script

import dsdpg_msmmd_sobolev
import iqn
import mmd_critic

TINY = [
    *(
        "--total-timesteps 200 --learning-starts 100 --hidden-dim 16 --wm-hidden-dim 16 --updates-per-step 2 "
        "--batch-size 16 --num-samples 4 --num-samples-policy 3 --eval-frequency 100 --eval-episodes 2"
    ).split()
]


def bimodal_returns(n: int) -> torch.Tensor:
    """Half N(-2, 0.3^2), half N(3, 0.5^2)."""
    first = torch.rand(n) < 0.5
    return torch.where(first, -2.0 + 0.3 * torch.randn(n), 3.0 + 0.5 * torch.randn(n))


def test_quantile_huber_loss_by_hand():
    quantiles = torch.tensor([0.0, 1.0, 2.0])
    taus = torch.tensor([0.1, 0.5, 0.9])
    targets = torch.tensor([0.5, 3.0, -1.0])
    # errors y_j - z_i; Huber_1: 0.5 e^2 if |e| <= 1 else |e| - 0.5; weight |tau - 1{e < 0}|
    expected = 0.0
    for z, tau in zip(quantiles.tolist(), taus.tolist()):
        row = []
        for y in targets.tolist():
            e = y - z
            huber = 0.5 * e * e if abs(e) <= 1 else abs(e) - 0.5
            row.append(abs(tau - (1.0 if e < 0 else 0.0)) * huber)
        expected += sum(row) / 3
    # e.g. z = 0, tau = 0.1: e = 0.5 -> 0.1 * 0.125; e = 3 -> 0.1 * 2.5; e = -1 -> 0.9 * 0.5
    assert iqn.quantile_huber_loss(quantiles, taus, targets).item() == pytest.approx(expected)
    assert expected == pytest.approx((0.0125 + 0.25 + 0.45) / 3 + (0.0625 + 0.75 + 0.75) / 3 + (0.1 + 0.45 + 0.25) / 3)


def test_cosine_embedding_shape_and_values():
    taus = torch.rand(2, 5)
    embedding = iqn.cosine_embedding(taus, 64)
    assert embedding.shape == (2, 5, 64)
    torch.testing.assert_close(embedding[1, 3, 7], torch.cos(math.pi * 7 * taus[1, 3]))
    torch.testing.assert_close(embedding[..., 0], torch.ones(2, 5))


def huber_quantiles(samples: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
    """The minimisers of E |tau - 1{y < q}| Huber_1(y - q), what the loss converges to. The loss is convex in q: its
    derivative, -E |tau - 1{y < q}| clip(y - q, -1, 1), rises with q from <= 0 at min(y) to >= 0 at max(y); its root,
    by bisection."""
    low, high = torch.full_like(taus, samples.min().item()), torch.full_like(taus, samples.max().item())
    for _ in range(40):
        q = (low + high) / 2
        errors = samples[None] - q[:, None]  # (T, N)
        descent = ((taus[:, None] - (errors < 0).float()).abs() * errors.clamp(-1, 1)).mean(1)  # -d loss / dq
        low, high = torch.where(descent > 0, q, low), torch.where(descent > 0, high, q)
    return (low + high) / 2


@pytest.mark.slow
def test_iqn_learns_the_quantiles_of_a_bimodal_return():
    torch.manual_seed(0)
    critic = iqn.Critic(2, 1, 64, 64)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
    obs, actions = torch.zeros(8, 2), torch.zeros(8, 1)
    for _ in range(2000):
        quantiles, taus = iqn.return_samples(critic, obs, actions, 32)
        loss = iqn.critic_loss(quantiles, taus, bimodal_returns(8 * 64).reshape(8, 64, 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    levels = torch.tensor([0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95])
    with torch.no_grad():
        predicted = critic(torch.zeros(10, 2), torch.zeros(10, 1), levels[None].expand(2, -1))  # (2, 10)
    assert (predicted[:, 1:] > predicted[:, :-1]).all()  # ordered quantiles
    torch.testing.assert_close(
        predicted, huber_quantiles(bimodal_returns(100_000), levels).expand(2, -1), atol=0.25, rtol=0
    )
    assert predicted[0, 4] < 0 < predicted[0, 5]  # both modes are represented


@pytest.mark.slow
def test_mmd_critic_learns_a_bimodal_return():
    torch.manual_seed(1)
    critic = mmd_critic.Critic(2, 1, 64, noise_dim=8)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3)
    obs, actions = torch.zeros(16, 2), torch.zeros(16, 1)
    for _ in range(1000):
        predictions = mmd_critic.return_samples(critic, obs, actions, 16)
        loss = mmd_critic.critic_loss(predictions, bimodal_returns(16 * 32).reshape(16, 32, 1), 1.0, "biased")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        samples = mmd_critic.return_samples(critic, torch.zeros(1, 2), torch.zeros(1, 1), 2000)[0, 0]  # (2000, 1)
    truth = bimodal_returns(2000)[:, None]
    learned = mmd_critic.mmd2(samples, truth, 1.0).item()
    best_gaussian = mmd_critic.mmd2(truth.mean() + truth.std() * torch.randn(2000, 1), truth, 1.0).item()
    assert learned < 0.1 * best_gaussian
    low = samples[samples < 0.5]
    assert 0.4 < low.numel() / 2000 < 0.6 and abs(low.mean().item() + 2.0) < 0.3


def test_max_sliced_mmd_on_returns_is_the_mmd():
    """Why mmd_critic has no max-sliced metric: on 1-D returns every slice is +-1, so the max-sliced MMD (DSDPG-MSMMD's)
    equals mmd_critic's MMD loss."""
    torch.manual_seed(2)
    predictions, targets = torch.randn(2, 5, 4, 1), torch.randn(5, 6, 1) + 1.0
    mmd = mmd_critic.critic_loss(predictions, targets, 100.0, "biased")
    sliced, _ = dsdpg_msmmd_sobolev.max_sliced_mmd2(predictions, targets, 100.0, 20, 0.1, "biased")
    torch.testing.assert_close(sliced.mean(1).sum(), mmd)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["mmd_critic.py", "iqn.py"])
def test_baselines_run_end_to_end(tmp_path, script):
    result = run_script(script, "--env-id", "PointMass-v0", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    scalars = read_scalars(run_dir)
    for tag in [
        "losses/qf_loss",
        "losses/actor_loss",
        "losses/qf1_values",
        "losses/world_model_loss",
        "charts/episodic_return",
        "eval/episodic_return",
    ]:
        assert scalars[tag] and all(math.isfinite(v) for _, v in scalars[tag]), tag
    assert read_summary(run_dir)["eval_steps"] == [100, 200]
