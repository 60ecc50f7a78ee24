"""The replay buffer: it wraps and keeps rows aligned, its checkpoint holds the filled rows only, and the checkpoint
round trip lets a resumed run's buffer go on exactly as the never-stopped run's."""

import io

import numpy as np
import pytest
import torch

from replay_buffer import ReplayBatch, ReplayBuffer


def add_rows(rb: ReplayBuffer, first: int, count: int) -> None:
    """Rows first, first + 1, ..., each field of row i filled with values derived from i (so every row differs)."""
    for i in range(first, first + count):
        obs = torch.tensor([i, -i], dtype=torch.float32)
        rb.add(obs, torch.tensor([i / 10]), float(i), obs + 0.5, i % 3 == 0)


def assert_same_buffer(restored: ReplayBuffer, reference: ReplayBuffer) -> None:
    assert (restored.pos, restored.size) == (reference.pos, reference.size)
    assert restored.fill.item() == reference.fill.item() == reference.size
    for name in ReplayBatch._fields:
        torch.testing.assert_close(getattr(restored, name), getattr(reference, name), rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("rows", [3, 5, 8, 12])
def test_a_restored_buffer_given_new_rows_holds_the_never_saved_buffers_rows(rows):
    """A buffer of capacity 5 given `rows` rows (not full, exactly full, wrapped once with its write position mid-way,
    wrapped twice), saved as a checkpoint saves it (torch.save, weights_only load) and restored into a fresh buffer,
    then given 4 new rows, holds exactly the rows, write position, size and fill level of the buffer never saved and
    given the same 4 rows: the new rows overwrite the oldest ones, not the rows the saved write position does not point
    at."""
    reference = ReplayBuffer(2, 1, capacity=5, device=torch.device("cpu"))
    add_rows(reference, 0, rows)
    saved = io.BytesIO()
    torch.save(reference.state_dict(), saved)
    saved.seek(0)
    restored = ReplayBuffer(2, 1, capacity=5, device=torch.device("cpu"))
    restored.load_state_dict(torch.load(saved, weights_only=True))
    assert_same_buffer(restored, reference)
    add_rows(reference, rows, 4)
    add_rows(restored, rows, 4)
    assert_same_buffer(restored, reference)
    assert sorted(reference.rewards.tolist()) == [float(i) for i in range(max(0, rows + 4 - 5), rows + 4)]  # the newest


def test_replay_buffer_wraps_and_round_trips():
    rb = ReplayBuffer(2, 1, capacity=3, device=torch.device("cpu"))
    for i in range(5):
        rb.add(torch.full((2,), float(i)), torch.full((1,), float(i)), float(i), torch.full((2,), i + 0.5), i == 4)
    assert rb.size == 3 and rb.pos == 2
    assert sorted(rb.rewards.tolist()) == [2.0, 3.0, 4.0]
    copy = ReplayBuffer(2, 1, capacity=3, device=torch.device("cpu"))
    copy.load_state_dict(rb.state_dict())
    torch.testing.assert_close(copy.next_obs, rb.next_obs)
    batch = copy.sample(100)
    torch.testing.assert_close(batch.next_obs[:, 0], batch.obs[:, 0] + 0.5)  # rows stay aligned
    torch.testing.assert_close(batch.terminations, (batch.rewards == 4.0).float())


def test_replay_buffer_checkpoint_holds_the_filled_rows_only(tmp_path):
    rb = ReplayBuffer(3, 2, capacity=100_000, device=torch.device("cpu"))
    for i in range(10):
        rb.add(torch.full((3,), float(i)), torch.zeros(2), 1.0, torch.ones(3), False)
    torch.save(rb.state_dict(), tmp_path / "rb.pt")
    assert (tmp_path / "rb.pt").stat().st_size < 20_000  # the preallocated storage alone is 3.6 MB
    state = torch.load(tmp_path / "rb.pt", weights_only=True)
    assert state["obs"].shape == (10, 3) and state["obs"][9, 0] == 9.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_takes_the_envs_arrays_and_returns_the_stored_row_as_tensors(dtype):
    """The env's arrays (float32, as make_env casts them, or float64) and float reward go in as they come; what `add`
    returns (what a world model's normaliser takes) is the float32 row just stored: obs (S,), action (A,), reward (1,),
    next_obs (S,)."""
    rb = ReplayBuffer(3, 2, capacity=4, device=torch.device("cpu"))
    obs, action, next_obs = (np.array(v, dtype=dtype) for v in ([1, 2, 3.1], [0.5, -0.3], [4, 5, 6]))
    returned = rb.add(obs, action, 0.25, next_obs, True)
    stored = (rb.obs[0], rb.actions[0], rb.rewards[:1], rb.next_obs[0])
    assert [t.shape for t in returned] == [(3,), (2,), (1,), (3,)]
    for got, row, given in zip(returned, stored, (obs, action, np.array([0.25]), next_obs)):
        assert torch.equal(got, row) and torch.equal(got, torch.from_numpy(given.astype(np.float32)))
    assert rb.terminations[0].item() == 1.0 and rb.size == 1
