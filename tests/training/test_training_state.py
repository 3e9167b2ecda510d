"""The training state a checkpoint holds: a typed TrainState, checked in one place when read back, and
stored as the same dict as before, so every committed checkpoint still loads."""

import math
from pathlib import Path

import pytest
import torch

from swarmctl.errors import CheckpointError
from swarmctl.training.checkpoint import TrainState, content_digest, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted([*(ROOT / "swarmctl" / "pretrained").glob("*.pt"), *(ROOT / "campaigns").rglob("*.pt")])


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_every_committed_checkpoint_loads_with_its_stored_state(path):
    stored = torch.load(path, map_location="cpu", weights_only=True)["state"]
    state = load_checkpoint(path).state
    assert isinstance(state, TrainState)
    assert state.to_dict() == stored  # the format on disk is unchanged: nothing added, nothing lost


def test_a_state_round_trips_and_the_history_is_its_own():
    state = TrainState(lr=0.01, epoch=3, best_val=0.5, best_epoch=2, history=[math.inf, 0.9, 0.5, 0.6],
                       finished=True, stop_reason="max epochs", backtracks=1)
    stored = state.to_dict()
    back = TrainState.from_dict(stored)
    assert back == state
    back.history.append(1.0)  # the trainer advances a loaded state in place
    assert stored["history"] == state.history


def test_a_negative_best_validation_loss_is_a_valid_state():
    """A validation loss that is a negative log-likelihood (a mixture's density above 1) can be below 0."""
    state = TrainState(lr=0.01, epoch=3, best_val=-1.47, best_epoch=2, history=[math.inf, -1.2, -1.47])
    assert TrainState.from_dict(state.to_dict()) == state


def _good():
    return TrainState(lr=0.01, epoch=2, best_val=0.5, best_epoch=1, history=[math.inf, 0.6, 0.5]).to_dict()


BAD = [("lr", 0), ("lr", math.inf), ("epoch", -1), ("epoch", 1.5), ("epoch", True), ("cursor", None),
       ("best_epoch", -2), ("best_val", math.nan), ("best_val", -math.inf), ("net_seconds", -1.0),
       ("history", [0.5, "x"]),
       ("history", None), ("eval_seconds", math.nan), ("backtracks", -1), ("epoch_loss_count", 2.5),
       ("epoch_loss_sum", math.inf), ("finished", "yes"), ("lr_decayed", 1), ("stop_reason", 3)]


@pytest.mark.parametrize(("key", "value"), BAD, ids=[f"{k}={v!r}" for k, v in BAD])
def test_a_state_field_of_the_wrong_type_or_range_is_refused_naming_it(key, value):
    with pytest.raises(ValueError, match=key):
        TrainState.from_dict({**_good(), key: value})


@pytest.mark.parametrize("key", ["lr", "epoch", "cursor", "best_val", "best_epoch", "net_seconds", "history"])
def test_a_required_state_field_that_is_missing_is_refused(key):
    stored = _good()
    del stored[key]
    with pytest.raises(ValueError, match=key):
        TrainState.from_dict(stored)


def test_a_checkpoint_with_a_bad_state_field_is_one_line_naming_it(tmp_path):
    """The load path uses the same check: a state the trainer would misread is a damaged checkpoint."""
    source = COMMITTED[0]
    raw = torch.load(source, map_location="cpu", weights_only=True)
    raw["state"]["finished"] = "yes"
    raw["digest"] = content_digest(raw)  # well-formed bytes, wrong content
    path = tmp_path / "bad.pt"
    torch.save(raw, path)
    with pytest.raises(CheckpointError, match="finished") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value)
