"""A poisoned kernel cache and broken compilers: the fused SWARM kernels are loaded and checked before
they are used, rebuilt once when the cached library is not one of them, renamed into the cache only after
they load, and a failure costs one log line and the PyTorch path, never a traceback or a run folder left
behind.

Generated like the file faults of ``faults.py``: every :data:`PLANTED` entry puts something other than
a good library under the cache's file name; every :data:`COMPILERS` entry is a compiler (a shell
script standing in for ``CXX``) that misbehaves in one way. A real C++ compiler builds the genuine
library, a foreign one and one of another ABI version once per module, so the tests need one and are
skipped only where there is none.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import tiered

from swarmctl.layers import _ext
from swarmctl.layers.swarm import SwarmLayer
from swarmctl.testing import random_sets

FAKE_VERSION = "fake-cxx 1.0"
FOREIGN_SRC = 'extern "C" int unrelated(void) { return 1; }\n'
OLD_ABI_SRC = "".join(
    [f'extern "C" int swarm_abi_version(void) {{ return {_ext.ABI_VERSION - 1}; }}\n']
    + [f'extern "C" void {name}(void) {{}}\n' for name in _ext.SYMBOLS[1:]]
)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Paths of a genuine kernel library, a foreign library and one of an older ABI, built by the real
    compiler (skipped only where none exists)."""
    cxx = _ext._compiler()
    if cxx is None:
        pytest.skip("no C++ compiler: there is no kernel cache to poison")
    root = tmp_path_factory.mktemp("libs")
    out = {}
    for name, src in (("good", _ext.SOURCE), ("foreign", FOREIGN_SRC), ("old-abi", OLD_ABI_SRC)):
        if isinstance(src, str):
            (root / f"{name}.cpp").write_text(src)
            src = root / f"{name}.cpp"
        out[name] = root / f"{name}.so"
        subprocess.run([cxx, "-O1", *_ext.COMMON_FLAGS, str(src), "-o", str(out[name])], check=True,
                       capture_output=True, timeout=300)
    return out


def fake_compiler(folder: Path, libs: dict[str, Path], action: str) -> Path:
    """A ``CXX`` stand-in: answers ``--version``, logs every other call to ``calls.log``, finds the
    ``-o`` file, then runs ``action`` (a shell line that may use $out and $GOOD, $FOREIGN, $OLD_ABI)."""
    script = folder / "cxx.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = "--version" ] && {{ echo "{FAKE_VERSION}"; exit 0; }}\n'
        f'echo "$@" >> "{folder}/calls.log"\n'
        'out=""; flags="$*"\n'
        'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
        f'GOOD="{libs["good"]}"; FOREIGN="{libs["foreign"]}"; OLD_ABI="{libs["old-abi"]}"\n'
        f"{action}\n"
    )
    script.chmod(0o755)
    return script


def calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def library(cache: Path, flags: list[str] = _ext.FLAG_SETS[0]) -> Path:
    """Where the fake compiler's library for ``flags`` is cached."""
    return cache / "ext" / _ext.library_name(_ext.SOURCE.read_bytes(), FAKE_VERSION + "\n", flags)


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process that has not looked for the kernels yet, with its cache in ``tmp_path/cache``."""
    monkeypatch.setattr(_ext, "_state", {})
    monkeypatch.delenv("SWARMCTL_NO_EXT", raising=False)
    monkeypatch.setenv("SWARMCTL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def new_process(monkeypatch) -> None:
    monkeypatch.setattr(_ext, "_state", {})


def assert_kernels_work(k: _ext.Kernels | None) -> None:
    """The kernels loaded and give the PyTorch path's outputs."""
    assert k is not None, _ext.unavailable_reason()
    layer = SwarmLayer(2, 4, 3, 3).double()
    x, mask = random_sets(2, 5, 2, dtype=torch.float64)
    fused = layer(x, mask)
    os.environ["SWARMCTL_NO_EXT"] = "1"
    try:
        plain = layer(x, mask)
    finally:
        del os.environ["SWARMCTL_NO_EXT"]
    torch.testing.assert_close(fused, plain, atol=1e-12, rtol=1e-10)


def assert_no_temporaries(cache: Path) -> None:
    left = [p.name for p in (cache / "ext").glob(".*")] if (cache / "ext").exists() else []
    assert left == [], f"temporary files left in the cache: {left}"


# ---- something other than a good library under the cache's name ----------------------------------

@dataclass(frozen=True)
class Planted:
    """``plant(path, libs)`` puts a bad library (or a non-file) at ``path``; ``rebuilt``: the loader
    replaces it with a good build (else it leaves it alone and refuses in one log line, naming ``message``)."""

    name: str
    plant: Callable[[Path, dict[str, Path]], None]
    rebuilt: bool = True
    message: str = ""


def _write(data: Callable[[dict[str, Path]], bytes]) -> Callable[[Path, dict[str, Path]], None]:
    return lambda path, libs: path.write_bytes(data(libs))


def _nonempty_folder(path: Path, libs: dict[str, Path]) -> None:
    path.mkdir()
    (path / "keep").write_text("a user's file")


PLANTED = [
    Planted("zero-bytes", _write(lambda libs: b"")),
    Planted("garbage", _write(lambda libs: os.urandom(4096))),
    Planted("foreign-library", _write(lambda libs: libs["foreign"].read_bytes())),
    Planted("older-abi", _write(lambda libs: libs["old-abi"].read_bytes())),
    # the loader would map pages past the end of the file: SIGBUS, not an error, once they are touched
    Planted("truncated-library", _write(lambda libs: libs["good"].read_bytes()[: libs["good"].stat().st_size // 2])),
    Planted("dangling-link", lambda path, libs: path.symlink_to(path.with_name("nowhere.so")), rebuilt=False,
            message="symbolic link"),
    Planted("link-to-foreign", lambda path, libs: path.symlink_to(libs["foreign"])),  # the link goes
    Planted("fifo", lambda path, libs: os.mkfifo(path), rebuilt=False, message="FIFO"),
    Planted("nonempty-folder", _nonempty_folder, rebuilt=False, message="is a folder"),
]


# every kind planted in an empty cache in the default suite, and over a good build one that is rebuilt and one that is
# left alone; every kind over a good build in the slow one
@pytest.mark.parametrize(("case", "after_a_build"), [
    tiered(case, after_a_build, default=not after_a_build or case.name in ("zero-bytes", "fifo"))
    for after_a_build in (False, True) for case in PLANTED],
    ids=[f"{c.name}-{'over-a-good-build' if after else 'planted'}" for after in (False, True) for c in PLANTED])
def test_a_bad_cached_library_is_rebuilt_once(case, after_a_build, libs, fresh, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path, libs, 'cp "$GOOD" "$out"')))
    originals = {name: path.read_bytes() for name, path in libs.items()}
    target = library(fresh)
    if after_a_build:  # a good library, then replaced
        assert_kernels_work(_ext.kernels())
        (tmp_path / "calls.log").unlink()
        new_process(monkeypatch)
        target.unlink()
    else:
        target.parent.mkdir(parents=True)
    case.plant(target, libs)
    with caplog.at_level(logging.WARNING, logger="swarmctl.layers._ext"):
        k = _ext.kernels()
    warnings = [r.getMessage() for r in caplog.records]
    if case.rebuilt:
        assert_kernels_work(k)
        assert k.path == target and target.is_file() and not target.is_symlink()
        assert len(calls(tmp_path)) == 1 and warnings == []  # built once, silently
        new_process(monkeypatch)
        assert _ext.kernels().path == target and len(calls(tmp_path)) == 1  # later processes use it
    else:
        assert k is None and len(warnings) == 1 and case.message in warnings[0], warnings
        assert calls(tmp_path) == [] and os.path.lexists(target)  # what is not a file swarmctl wrote stays
        if case.name == "nonempty-folder":
            assert (target / "keep").read_text() == "a user's file"
    assert {name: path.read_bytes() for name, path in libs.items()} == originals  # no link written through
    assert_no_temporaries(fresh)


# ---- compilers that misbehave ---------------------------------------------------------------------

@dataclass(frozen=True)
class Compiler:
    """A ``CXX`` that runs ``action`` after finding its output file; ``works``: the kernels load in the end."""

    name: str
    action: str
    works: bool = False


COMPILERS = [
    Compiler("exits-0-writes-nothing", "exit 0"),
    Compiler("exits-0-removes-output", 'rm -f "$out"; exit 0'),
    Compiler("exits-0-writes-empty-file", ': > "$out"'),
    Compiler("exits-0-writes-garbage", 'head -c 4096 /dev/urandom > "$out"'),
    Compiler("exits-0-writes-foreign-library", 'cp "$FOREIGN" "$out"'),
    Compiler("exits-0-writes-older-abi", 'cp "$OLD_ABI" "$out"'),
    Compiler("exits-0-writes-truncated-library", 'head -c $(($(wc -c < "$GOOD") / 2)) "$GOOD" > "$out"'),
    Compiler("fails", 'echo "error: broken" >&2; exit 1'),
    Compiler("killed", 'kill -9 $$'),
    Compiler("fails-with-openmp-only",
             'case "$flags" in *-fopenmp*) echo "error: no omp" >&2; exit 1;; esac; cp "$GOOD" "$out"', works=True),
]


@pytest.mark.parametrize("case", COMPILERS, ids=lambda c: c.name)
def test_a_misbehaving_compiler_caches_nothing_bad(case, libs, fresh, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path, libs, case.action)))
    with caplog.at_level(logging.WARNING, logger="swarmctl.layers._ext"):
        k = _ext.kernels()
        assert _ext.kernels() is k  # resolved once per process
    warnings = [r.getMessage() for r in caplog.records]
    first = calls(tmp_path)
    if case.works:
        assert_kernels_work(k)
        assert warnings == [] and k.path == library(fresh, _ext.FLAG_SETS[2])  # the first set without OpenMP
    else:
        assert k is None and len(warnings) == 1 and "PyTorch code" in warnings[0], warnings
        libraries = sorted(p.name for p in (fresh / "ext").glob("*.so"))
        assert libraries == [], f"a bad build was cached: {libraries}"
        assert len(first) == len(_ext.FLAG_SETS)  # every set tried
    assert_no_temporaries(fresh)

    new_process(monkeypatch)  # the next process: a set that built is used without compiling again
    again = _ext.kernels()
    assert (again is None) == (k is None)
    assert len(calls(tmp_path)) - len(first) == (0 if case.works else len(_ext.FLAG_SETS))


# ---- the cache folder ------------------------------------------------------------------------------

def test_an_unwritable_cache_folder_falls_back_to_a_private_temporary_one(libs, monkeypatch, tmp_path):
    monkeypatch.setattr(_ext, "_state", {})
    monkeypatch.delenv("SWARMCTL_NO_EXT", raising=False)
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("SWARMCTL_CACHE", str(tmp_path / "a-file" / "cache"))  # cannot be created, even by root
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path, libs, 'cp "$GOOD" "$out"')))
    k = _ext.kernels()
    assert_kernels_work(k)
    fallback = tmp_path / "tmp" / f"swarmctl-{os.getuid()}" / "ext"
    assert k.path.parent == fallback and (fallback.parent.stat().st_mode & 0o777) == 0o700
    new_process(monkeypatch)
    assert _ext.kernels().path == k.path and len(calls(tmp_path)) == 1  # the fallback is a cache too
    assert (tmp_path / "a-file").read_text() == "not a folder"


def test_a_killed_builds_temporary_library_is_removed(libs, fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path, libs, 'cp "$GOOD" "$out"')))
    folder = fresh / "ext"
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    orphan = folder / f".{library(fresh).name}.{dead}-abc123.tmp"  # as atomic_write names it
    orphan.write_bytes(b"half a library")
    live = folder / f".{library(fresh).name}.{os.getpid()}-def456.tmp"  # a build still running
    live.write_bytes(b"being written")
    assert_kernels_work(_ext.kernels())
    assert not orphan.exists() and live.exists()
    # the next process finds the library cached and still removes what a killed build left
    live.unlink()
    orphan.write_bytes(b"half a library")
    new_process(monkeypatch)
    assert_kernels_work(_ext.kernels())
    assert not orphan.exists() and len(calls(tmp_path)) == 1


@pytest.mark.slow
def test_a_build_killed_with_sigkill_leaves_a_temporary_that_the_next_process_removes(libs, fresh, monkeypatch,
                                                                                     tmp_path):
    started = tmp_path / "compiling"
    slow = fake_compiler(tmp_path, libs, f'echo $$ > "{started}"; sleep 120; cp "$GOOD" "$out"')
    env = {**os.environ, "CXX": str(slow), "SWARMCTL_CACHE": str(fresh), "SWARMCTL_NO_EXT": "0"}
    proc = subprocess.Popen([sys.executable, "-c", "from swarmctl.layers import _ext; _ext.kernels()"], env=env)
    try:
        deadline = time.monotonic() + 120
        while not (started.exists() and started.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), "the build never started"
    finally:
        proc.kill()
        proc.wait()
    os.kill(int(started.read_text()), 9)  # the orphaned compiler too
    left = [p.name for p in (fresh / "ext").glob(".*.tmp")]
    assert len(left) == 1, left  # what a killed build leaves
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path, libs, 'cp "$GOOD" "$out"')))
    assert_kernels_work(_ext.kernels())
    assert_no_temporaries(fresh)


# ---- through the command line ----------------------------------------------------------------------

TRAIN = ["train", "swarm", "--hidden", "8", "--iters", "3", "--batch-size", "6", "--max-epochs", "1"]


def _train_in_process(cli, tiny_h5, runs):
    result = cli(*TRAIN, "--data", tiny_h5, "--runs-dir", runs)
    assert result.exit_code == 0, result.output
    assert result.exception is None and "Traceback" not in result.output
    return result


# a library of no bytes in the default suite, another build's library slow
@pytest.mark.parametrize("case", [tiered(c, default=c.name == "zero-bytes") for c in PLANTED
                                  if c.name in ("zero-bytes", "foreign-library")], ids=lambda c: c.name)
def test_train_runs_on_rebuilt_kernels_after_a_poisoned_cache(case, libs, fresh, monkeypatch, tmp_path, tiny_h5,
                                                             cli):
    monkeypatch.setenv("CXX", str(fake_compiler(tmp_path, libs, 'cp "$GOOD" "$out"')))
    target = library(fresh)
    target.parent.mkdir(parents=True)
    case.plant(target, libs)
    _train_in_process(cli, tiny_h5, tmp_path / "runs")
    assert _ext._state["lib"] is not None and _ext._state["lib"].path == target
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["swarm-8-3-1-s0"]


def _train_process(tmp_path: Path, data: Path, env: dict[str, str]):
    return subprocess.run([sys.executable, "-m", "swarmctl", *TRAIN, "--data", str(data), "--runs-dir",
                           str(tmp_path / "runs")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200", **env})


@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED + COMPILERS, ids=lambda c: c.name)
def test_train_in_a_fresh_process_survives_every_poisoned_cache(case, libs, tmp_path, tiny_h5):
    cache = tmp_path / "cache"
    env = {"SWARMCTL_CACHE": str(cache), "SWARMCTL_NO_EXT": "0"}
    if isinstance(case, Planted):
        env["CXX"] = str(fake_compiler(tmp_path, libs, 'cp "$GOOD" "$out"'))
        library(cache).parent.mkdir(parents=True)
        case.plant(library(cache), libs)
    else:
        env["CXX"] = str(fake_compiler(tmp_path, libs, case.action))
    proc = _train_process(tmp_path, tiny_h5, env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    kernels_load = case.rebuilt if isinstance(case, Planted) else case.works
    warnings = [ln for ln in proc.stderr.splitlines() if "kernels" in ln]
    assert len(warnings) == (0 if kernels_load else 1), proc.stderr  # one line when the PyTorch path runs
    assert (tmp_path / "runs" / "swarm-8-3-1-s0" / "best.pt").exists()
    assert_no_temporaries(cache)
