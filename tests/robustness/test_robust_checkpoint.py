"""Generated faults in checkpoints: load_checkpoint refuses them with a CheckpointError, and every command
that reads a checkpoint fails in at most 3 lines with exit 1, leaving every file of the run as it was."""

from __future__ import annotations

import math
import random
import shutil

import pytest
import torch
from faults import BYTE_FAULTS, Fault, assert_clean_failure, cases, cli, snapshot

from swarmctl.errors import CheckpointError
from swarmctl.training.checkpoint import content_digest, load_checkpoint

ENTRIES = ("format", "task", "config", "state", "model", "optimizer", "digest")
STATE_KEYS = ("lr", "epoch", "cursor", "best_val", "best_epoch", "net_seconds", "history")


def _edit(fn, redigest: bool = True):
    """An edit of the loaded payload, saved again; ``redigest`` recomputes the digest, as a tool that
    rewrites checkpoints would, so that the checks besides the digest are what must catch the fault."""

    def apply(path):
        ckpt = torch.load(path, weights_only=True)
        fn(ckpt)
        if redigest and isinstance(ckpt, dict) and "digest" in ckpt:
            ckpt["digest"] = content_digest(ckpt)
        torch.save(ckpt, path)
    return apply


def _random_tensor(ckpt, rng):
    key = rng.choice(sorted(ckpt["model"]))
    return key, ckpt["model"][key]


# ---- semantic fault families --------------------------------------------------------------------------

def delete_entry(rng):
    key = rng.choice(ENTRIES)
    return Fault(f"delete {key}", _edit(lambda c: c.pop(key)))


def rename_entry(rng):
    key = rng.choice(ENTRIES)
    return Fault(f"rename {key}", _edit(lambda c: c.__setitem__(f"{key}_old", c.pop(key))))


def bad_format(rng):
    value = rng.choice([0, 3, 99, "1", "2", True, None, 2.0, [2]])
    return Fault(f"format={value!r}", _edit(lambda c: c.__setitem__("format", value)))


def bad_task(rng):
    value = rng.choice(["mog", "image", "bogus", "", 3, None])
    return Fault(f"task={value!r}", _edit(lambda c: c.__setitem__("task", value)))


def bad_config(rng):
    value = rng.choice([{}, None, "config", [], {"model": {}}])
    return Fault(f"config={value!r}", _edit(lambda c: c.__setitem__("config", value)))


def bad_config_section(rng):
    section, value = rng.choice(["model", "train", "data"]), rng.choice([None, "x", [], "delete"])

    def fn(c):
        if value == "delete":
            del c["config"][section]
        else:
            c["config"][section] = value
    return Fault(f"config {section}={value!r}", _edit(fn))


BAD_MODEL = [("pooling", "bogus"), ("pooling", ""), ("pooling", 3), ("name", "bogus"), ("name", "set-linear"),
             ("name", 5), ("dim_hidden", 9), ("dim_hidden", -1), ("dim_hidden", "8"), ("dim_hidden", 0),
             ("n_iter", 0), ("n_layers", 2), ("activation", "tanh"), ("dropout", 2.0), ("dim_in", 3),
             ("dim_out", 4), ("colour", "red")]
BAD_TRAIN = [("lr", "x"), ("lr", -1.0), ("batch_size", 0), ("device", "tpu"), ("max_epochs", "2"), ("colour", 1)]
BAD_DATA = [("path", 5), ("path", ["a"]), ("dataset", 3), ("colour", 1)]


def bad_config_value(rng):
    section = rng.choice(["model", "train", "data"])
    key, value = rng.choice({"model": BAD_MODEL, "train": BAD_TRAIN, "data": BAD_DATA}[section])
    return Fault(f"config {section}.{key}={value!r}", _edit(lambda c: c["config"][section].__setitem__(key, value)))


def bad_state(rng):
    key = rng.choice(STATE_KEYS)
    value = rng.choice(["delete", "x", None, -5, math.nan] + ([1.5] if key in ("epoch", "cursor", "best_epoch")
                                                               else [math.inf] if key != "best_val" else []))

    def fn(c):
        if value == "delete":
            del c["state"][key]
        else:
            c["state"][key] = value
    return Fault(f"state {key}={value!r}", _edit(fn))


def state_not_dict(rng):
    value = rng.choice([None, [], "state", 3])
    return Fault(f"state={value!r}", _edit(lambda c: c.__setitem__("state", value)))


def weights_not_finite(rng):
    value = rng.choice([math.nan, math.inf, -math.inf])

    def fn(c):
        _, t = _random_tensor(c, rng)
        t.view(-1)[rng.randrange(t.numel())] = value
    return Fault(f"a weight = {value}", _edit(fn))


def weights_wrong_layout(rng):
    how = rng.choice(["delete", "extra", "unsqueeze", "truncate", "int64", "float64", "list", "not-a-dict"])

    def fn(c):
        key, t = _random_tensor(c, rng)
        if how == "delete":
            del c["model"][key]
        elif how == "extra":
            c["model"]["extra.weight"] = torch.zeros(2)
        elif how == "unsqueeze":
            c["model"][key] = t.unsqueeze(0)
        elif how == "truncate":
            c["model"][key] = t.reshape(-1)[:-1].clone()
        elif how in ("int64", "float64"):
            c["model"][key] = t.to(getattr(torch, how))
        elif how == "list":
            c["model"][key] = t.tolist()
        else:
            c["model"] = [c["model"][k] for k in sorted(c["model"])]
    return Fault(f"weights {how}", _edit(fn))


def bad_optimizer(rng):
    value = rng.choice(["x", {}, {"state": 1, "param_groups": []}, {"state": {}, "param_groups": "x"},
                        {"state": {}, "param_groups": [{"lr": 0.1}]}, [1, 2]])
    return Fault(f"optimizer={value!r}", _edit(lambda c: c.__setitem__("optimizer", value)))


def changed_without_digest(rng):
    """Any changed value with the old digest: only the digest can tell."""
    what = rng.choice(["weight", "state", "config"])

    def fn(c):
        if what == "weight":
            _, t = _random_tensor(c, rng)
            t.view(-1)[rng.randrange(t.numel())] += 1e-3
        elif what == "state":
            c["state"]["net_seconds"] += 1.0
        else:
            c["config"]["run"]["name"] = "renamed"
    return Fault(f"{what} changed, digest kept", _edit(fn, redigest=False))


SEMANTIC = {fn.__name__: fn for fn in (
    delete_entry, rename_entry, bad_format, bad_task, bad_config, bad_config_section, bad_config_value, bad_state,
    state_not_dict, weights_not_finite, weights_wrong_layout, bad_optimizer, changed_without_digest)}
BYTES = {fn.__name__: fn for fn in BYTE_FAULTS}


def _check(trained_runs, tmp_path, family, seed, every_command):
    runs, _ = trained_runs
    rng = random.Random(f"ckpt-{family}-{seed}")
    root = tmp_path / "case"
    run = root / "swarm"
    shutil.copytree(runs / "swarm", run)
    target = run / rng.choice(["best.pt", "last.pt"])
    original = torch.load(target, weights_only=True)["digest"]
    fault = {**SEMANTIC, **BYTES}[family](rng)
    fault.apply(target)
    try:
        load_checkpoint(target)
    except CheckpointError as exc:
        assert "\n" not in str(exc)
    else:
        assert family in BYTES, f"{fault.name}: accepted"
        ckpt = torch.load(target, weights_only=True)
        assert ckpt["digest"] == original == content_digest(ckpt), fault.name  # nothing it reads changed
        return
    commands = [["train", "swarm", "--resume", run, "--device", "cpu"]]  # reads last.pt, then best.pt
    if target.name == "best.pt":  # the other commands read best.pt
        commands += [["eval", run, "--device", "cpu"], ["plot-entropy", run, "--grid", 4, "--device", "cpu"],
                     ["shuffle-variance", run, "--tasks", 2, "--shuffles", 2, "--device", "cpu"]]
    if not every_command:  # fast: resume and one other reader, picked by the seed
        commands = commands[:1] + ([rng.choice(commands[1:])] if len(commands) > 1 else [])
    for args in commands:
        before = snapshot(root)
        assert_clean_failure(cli(*args), root, before)


@pytest.mark.parametrize(("family", "seed"), cases({**SEMANTIC, **BYTES}, range(1)))
def test_checkpoint_faults_fail_in_one_line(trained_runs, tmp_path, family, seed):
    _check(trained_runs, tmp_path, family, seed, every_command=False)


@pytest.mark.parametrize(("family", "seed"), cases({**SEMANTIC, **BYTES}, range(1, 12)))
@pytest.mark.slow
def test_checkpoint_faults_fail_in_one_line_many(trained_runs, tmp_path, family, seed):
    _check(trained_runs, tmp_path, family, seed, every_command=True)


def test_checkpoint_round_trip_is_accepted_and_digest_covers_everything(trained_runs):
    load_checkpoint(trained_runs[0] / "swarm" / "best.pt")
    ckpt = torch.load(trained_runs[0] / "swarm" / "best.pt", weights_only=True)
    assert ckpt["format"] == 2 and ckpt["digest"] == content_digest(ckpt)
    for key in ("task", "config", "state", "model", "optimizer"):
        changed = {**ckpt, key: None}
        assert content_digest(changed) != ckpt["digest"], key


@pytest.mark.parametrize(("section", "field"), [("train", "batch_size"), ("model", "dim_hidden")])
def test_a_config_missing_a_field_is_named_not_the_valid_checkpoint(trained_runs, tmp_path, section, field):
    """A config.json of an older layout (one field missing) is what is wrong: the message names it and the
    field, and never offers to remove the valid best.pt."""
    import json

    runs, data = trained_runs
    run = tmp_path / "runs" / "swarm"
    shutil.copytree(runs / "swarm", run)
    config = json.loads((run / "config.json").read_text())
    value = config[section].pop(field)
    (run / "config.json").write_text(json.dumps(config))
    before = snapshot(tmp_path)
    r = cli("eval", run, "--device", "cpu", "--data", data, "--out", tmp_path / "e.json")
    assert_clean_failure(r, tmp_path, before)
    message = " ".join(r.output.split())
    assert "config.json" in message and field in message and str(value) in message, message
    assert "remove" not in message, message


def test_a_checkpoint_pickled_with_another_protocol_is_refused_without_pytorchs_warning(trained_runs, tmp_path):
    """PyTorch warns when a weights-only load meets a pickle protocol other than 2 (and then refuses what it
    cannot read): the user sees one error line, not PyTorch's warning too."""
    import warnings

    runs, _ = trained_runs
    path = tmp_path / "best.pt"
    torch.save(torch.load(runs / "swarm" / "best.pt", weights_only=True), path, pickle_protocol=4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match="not a readable swarmctl checkpoint"):
            load_checkpoint(path)
    assert [str(w.message) for w in seen] == []
