"""Sweep specs are user input: generated faults in every key, bytes that are not UTF-8, and damaged run
folders. Each fault ends the same way with and without --dry-run (exit 1, one line, nothing written, the
spec unchanged): what --dry-run accepts, the sweep does not refuse later, after training earlier runs."""

import random

import pytest
from conftest import tiered
from faults import cli, snapshot

from swarmctl.runs import run_lock

GOOD = {"name": '"t"', "seeds": "[0]", "minutes": "5", "max_epochs": "1", "batch_size": "6", "device": '"cpu"',
        "data": '"DATA"'}  # DATA: replaced by the test dataset's path
GRID = '[[grid]]\nmodel = "set-linear"\nhidden = 4\nlayers = 2\n'

# key -> TOML values a spec may not hold there
BAD_VALUES = {
    "seeds": ["[true]", "[false, 1]", "[4294967296]", "[-1]", "[0.5]", '["0"]', "[]", "[1, 1]", "[[0]]"],
    "minutes": ["0", "-1", "nan", "inf", "true", '"5"', "[5]"],
    "max_epochs": ["0", "true", "1.5", '"1"'],
    "batch_size": ["0", "-3", "false", "2.0"],
    "device": ['"cuda:x"', '"tpu"', '"cuda:"', '"CUDA"', "0", "[\"cpu\"]", '""'],
    "data": ['""', '"  "', "5", "[\"a.h5\"]"],
    "name": ['"../x"', '""', '".hidden"', '"a b"'],
}
BAD_GRIDS = [
    "grid = [1, 2]\n", 'grid = ["swarm"]\n', "grid = [[1]]\n", "grid = 3\n", "grid = []\n",
    '[[grid]]\nmodel = 5\n', '[[grid]]\nmodel = ["swarm"]\n', '[[grid]]\nhidden = 4\n',
    '[[grid]]\nmodel = "swarm"\nhidden = [4, true]\n', '[[grid]]\nmodel = "swarm"\nhidden = 0\n',
    '[[grid]]\nmodel = "swarm"\nhidden = "4"\n', '[[grid]]\nmodel = "swarm"\nhidden = {a = 1}\n',
    '[[grid]]\nmodel = "set-transformer"\nhidden = 30\n',  # 4 heads do not divide 30
    '[[grid]]\nmodel = "lstm"\npooling = "mean"\n', '[[grid]]\nmodel = "swarm-mog"\nlayers = 2\n',
    '[[grid]]\nmodel = "swarm-image"\n',
]


def _spec(body_keys=None, grid=GRID, drop=()):
    keys = {**GOOD, **(body_keys or {})}
    return "".join(f"{k} = {v}\n" for k, v in keys.items() if k not in drop) + grid


def _cases():
    for key, values in BAD_VALUES.items():
        for value in values:
            yield f"{key}={value}", _spec({key: value}).encode()
    for i, grid in enumerate(BAD_GRIDS):
        yield f"grid{i}", _spec(grid=grid).encode()
    rng = random.Random(0)
    good = _spec().encode()
    for i in range(6):  # bytes that are not UTF-8, anywhere in an otherwise valid spec
        at = rng.randrange(len(good))
        yield f"not-utf8-{i}", good[:at] + rng.choice([b"\xff", b"\xc3(", b"\x80\x80", b"\xe2\x82"]) + good[at:]


CASES = list(_cases())


@pytest.fixture
def data(tiny_h5):
    return tiny_h5


def _write(path, content: bytes, data) -> None:
    path.write_bytes(content.replace(b"DATA", str(data).encode()))


def _assert_refused(r, root, before, where):
    out = r.output
    assert r.exit_code == 1, f"{where}: exit {r.exit_code}: {out}"
    assert r.exception is None or isinstance(r.exception, SystemExit), (where, repr(r.exception))
    assert "Traceback" not in out and len([x for x in out.splitlines() if x.strip()]) == 1, (where, out)
    assert snapshot(root) == before, where


@pytest.mark.parametrize(("label", "content"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_spec_is_refused_alike_with_and_without_dry_run(tmp_path, data, label, content):
    spec = tmp_path / "t.toml"
    _write(spec, content, data)
    before = snapshot(tmp_path)
    for extra in (["--dry-run"], []):
        _assert_refused(cli("sweep", spec, "--runs-dir", tmp_path / "runs", *extra), tmp_path, before,
                        f"{label} {extra}")


def test_the_good_spec_trains(tmp_path, data):
    spec = tmp_path / "t.toml"
    _write(spec, _spec().encode(), data)
    r = cli("sweep", spec, "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 0, r.output


# the default suite: JSON that is not a config (test_lifecycle has text that is not JSON); every damage slow
@pytest.mark.parametrize("damage", [tiered(damage, default=damage == '{"model": 1}')
                                    for damage in ("not json", "{}", '{"model": 1}', "[]", "\xff")])
def test_a_damaged_run_config_is_one_line_naming_it(tmp_path, data, damage):
    spec = tmp_path / "t.toml"
    _write(spec, _spec({"seeds": "[0, 1]"}).encode(), data)
    assert cli("sweep", spec, "--runs-dir", tmp_path / "runs", "--shard", "1/2").exit_code == 0
    run = tmp_path / "runs" / "sweep-t" / "set-linear-4-2-s1"
    (run / "config.json").write_bytes(damage.encode("latin-1"))  # beside its checkpoints
    before = snapshot(tmp_path)
    for extra in (["--dry-run"], []):
        r = cli("sweep", spec, "--runs-dir", tmp_path / "runs", *extra)
        _assert_refused(r, tmp_path, before, extra)
        assert "set-linear-4-2-s1" in r.output and "damaged" in r.output


def test_every_mog_model_in_one_grid(tmp_path):
    from swarmctl.models import list_models

    grids = "".join(f'[[grid]]\nmodel = "{m}"\nhidden = 8\n' for m in list_models("mog"))
    spec = tmp_path / "mog.toml"
    spec.write_text(f'seeds = [0]\nminutes = 1\ndevice = "cpu"\n{grids}')
    r = cli("sweep", spec, "--runs-dir", tmp_path / "runs", "--dry-run")
    assert r.exit_code == 0, r.output
    assert all(m in r.output for m in list_models("mog")) and "drawn fresh" in r.output
    assert not (tmp_path / "runs").exists()


def test_dry_run_counts_a_model_too_large_for_memory_without_allocating_it(tmp_path, data):
    spec = tmp_path / "big.toml"
    _write(spec, (_spec() + '[[grid]]\nmodel = "swarm"\nhidden = 1000000\nlayers = 100\n').encode(), data)
    r = cli("sweep", spec, "--runs-dir", tmp_path / "runs", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "1000000-10-100" in r.output  # counted on the meta device: about 10^13 parameters
    before = snapshot(tmp_path)
    r = cli("sweep", spec, "--runs-dir", tmp_path / "runs")  # refused before the first (small) run trains
    _assert_refused(r, tmp_path, before, "sweep")
    assert "memory" in r.output


def test_a_second_sweep_never_touches_a_live_run(tmp_path, data):
    """The first epoch of a run holds its lock and has a config.json but no last.pt yet: a second sweep of
    the same shard is refused on it and leaves every file as it was."""
    spec = tmp_path / "t.toml"
    _write(spec, _spec().encode(), data)
    assert cli("sweep", spec, "--runs-dir", tmp_path / "runs").exit_code == 0
    run = tmp_path / "runs" / "sweep-t" / "set-linear-4-2-s0"
    for name in ("last.pt", "best.pt"):  # as in its first epoch
        (run / name).unlink()
    with run_lock(run):
        before = snapshot(tmp_path)
        r = cli("sweep", spec, "--runs-dir", tmp_path / "runs")
        assert r.exit_code == 1 and "being written by process" in r.output, r.output
        assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_spec_that_is_not_a_file_is_named_for_what_it_is(tmp_path, kind):
    import os

    spec = tmp_path / "t.toml"
    os.mkfifo(spec) if kind == "fifo" else spec.mkdir()
    before = snapshot(tmp_path)
    for extra in (["--dry-run"], []):
        r = cli("sweep", spec, "--runs-dir", tmp_path / "runs", *extra)
        _assert_refused(r, tmp_path, before, f"{kind} {extra}")
        assert ("FIFO" if kind == "fifo" else "folder") in r.output, r.output
