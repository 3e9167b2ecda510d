"""`make figures` (tools/figures.py) draws every figure in docs/, and only those, from what the repository holds."""

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tools.figures import TABLE_RUNS, check_figures, difference, figure_names, figures, iris_args, make_figures

REPO = Path(__file__).resolve().parents[2]


def test_make_figures_runs_the_figures_tool():
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^figures:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert target and "-m tools.figures" in target.group(1)
    assert re.search(r"^\.PHONY:.*\bfigures\b", makefile, flags=re.M)


def test_every_figure_in_docs_is_drawn_by_make_figures_and_no_other():
    assert sorted(figure_names()) == sorted(p.name for p in (REPO / "docs").glob("*.png"))


def test_every_figure_a_page_shows_is_drawn_by_make_figures():
    shown = set()
    for page in ["README.md", *(REPO / "docs").glob("*.md")]:
        text = (REPO / page).read_text()
        shown |= {Path(target).name for target in re.findall(r"\]\(((?:docs/)?[^)/]+\.png)\)", text)}
    assert shown and shown <= set(figure_names())


def test_each_figure_names_a_source_the_repository_holds():
    for step in figures():
        assert (REPO / step.source.split(" and ")[0]).exists(), step.source


def test_the_frontier_is_drawn_once_the_table_runs_are_committed(tmp_path):
    assert "frontier.png" not in figure_names(tmp_path)
    (tmp_path / TABLE_RUNS / "set-linear-64-6-s0").mkdir(parents=True)
    assert "frontier.png" in figure_names(tmp_path)


def test_the_figures_drawn_in_seconds_are_docs_figures(tmp_path, cli, monkeypatch):
    """The iris figure (its command in this process) and the MNIST campaign's curves are what the code draws now
    from what the repository holds; the slow test below checks every figure."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SWARMCTL_PRETRAINED", raising=False)
    r = cli(*iris_args(tmp_path))
    assert r.exit_code == 0, r.output
    assert difference(tmp_path / "iris.png", REPO / "docs" / "cluster-iris.png") is None, "make figures"
    curves = "curves-swarm-image-256-10-1-mnist-gpu.png"
    make_figures(out=tmp_path, only=[curves])
    assert difference(tmp_path / curves, REPO / "docs" / curves) is None, "make figures"


def test_a_figure_differs_from_another_picture_and_not_from_itself(tmp_path):
    import numpy as np
    from PIL import Image

    picture = np.full((200, 300, 3), 255, dtype=np.uint8)
    picture[50:60, 20:100] = 0  # a word of a title
    Image.fromarray(picture).save(tmp_path / "a.png")
    assert difference(tmp_path / "a.png", tmp_path / "a.png") is None
    picture[50:60, 100:130] = 0  # the word one longer
    Image.fromarray(picture).save(tmp_path / "b.png")
    assert "of its pixels differ" in difference(tmp_path / "b.png", tmp_path / "a.png")
    Image.fromarray(picture[:, :200]).save(tmp_path / "c.png")
    assert difference(tmp_path / "c.png", tmp_path / "a.png") == "200 x 200 pixels drawn, 300 x 200 kept"


@pytest.mark.slow
def test_make_figures_draws_every_figure_it_lists(tmp_path):
    """The whole tool, as `make figures` runs it, into a scratch folder (about 15 minutes on 2 busy cores, most
    of it the exact entropy map)."""
    r = subprocess.run([sys.executable, "-m", "tools.figures", "--out", str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in figure_names():
        head = (tmp_path / name).read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n", name
        width, height = struct.unpack(">II", head[16:24])
        assert width > 100 and height > 100, name
        assert difference(tmp_path / name, REPO / "docs" / name) is None, f"docs/{name}: redraw it with make figures"


@pytest.mark.slow
def test_the_check_names_a_figure_older_than_the_code(tmp_path):
    """`--check` against a copy of the repository whose iris figure is another picture (the curves' figure)."""
    import shutil

    copy = tmp_path / "repo"
    top = {".git", ".venv", "runs", "data"}  # the checkout's own, not the repository's
    shutil.copytree(REPO, copy, ignore=lambda folder, names: top & set(names) if Path(folder) == REPO else ())
    shutil.copyfile(copy / "docs" / "frontier.png", copy / "docs" / "cluster-iris.png")
    stale = check_figures(copy, only=["cluster-iris.png", "frontier.png"])
    assert list(stale) == ["cluster-iris.png"], stale


def _steps(drawn: dict[str, bytes | BaseException | None]):
    """Steps of one figure each that write its bytes, raise the exception given, or (None) write nothing, in the
    order given."""
    from tools.figures import Step

    def draw(name, what):
        def run(repo, work):
            if isinstance(what, BaseException):
                raise what
            if what is not None:
                (work / name).write_bytes(what)
        return run

    return lambda repo=REPO: [Step("a test", {name: name}, draw(name, what)) for name, what in drawn.items()]


def _main(monkeypatch, capsys, drawn, *args):
    import tools.figures

    monkeypatch.setattr(tools.figures, "figures", _steps(drawn))
    code = tools.figures.main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


@pytest.mark.parametrize("failure", [KeyboardInterrupt(), subprocess.CalledProcessError(130, ["python", "-m", "x"]),
                                     subprocess.CalledProcessError(1, ["python", "-m", "x"]),
                                     "a figure its step never drew"])
def test_a_failure_part_way_leaves_the_figures_as_they_were(tmp_path, monkeypatch, capsys, failure):
    """Ctrl-C (here, or in a command that exits 130 first) or a command failing while the figures are drawn, or
    one figure missing when they are put in place: a one-line error, no figure replaced (the first one drawn
    neither), nothing half-written beside them."""
    out = tmp_path / "docs"
    out.mkdir()
    (out / "a.png").write_bytes(b"old a")
    drawn = {"a.png": b"new a", "b.png": failure if isinstance(failure, BaseException) else None}
    code, err = _main(monkeypatch, capsys, drawn, "--out", out)
    interrupted = isinstance(failure, KeyboardInterrupt) or getattr(failure, "returncode", 0) == 130  # Ctrl-C
    assert code == (130 if interrupted else 1) and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["a.png"] and (out / "a.png").read_bytes() == b"old a"


def test_a_folder_that_cannot_be_written_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("")
    code, err = _main(monkeypatch, capsys, {"a.png": b"new a"}, "--out", tmp_path / "a-file")
    assert code == 1 and "a-file" in err and len(err.strip().splitlines()) == 1, err


def test_a_figure_name_that_is_not_drawn_is_a_bad_argument(tmp_path, monkeypatch, capsys):
    code, err = _main(monkeypatch, capsys, {"a.png": b"new a"}, "--check", "nosuch.png")
    assert code == 2 and "no figure named nosuch.png" in err and "a.png" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kept", [b"not a png", b"\x89PNG\r\n\x1a\n" + b"\0" * 40])
def test_a_damaged_figure_in_docs_differs_from_the_drawn_one(tmp_path, kept):
    """--check names a damaged or truncated figure in docs/ as one to redraw, instead of stopping on it."""
    from PIL import Image

    Image.new("RGB", (30, 20), "white").save(tmp_path / "drawn.png")
    (tmp_path / "kept.png").write_bytes(kept)
    assert difference(tmp_path / "drawn.png", tmp_path / "kept.png").startswith("not a readable image")
