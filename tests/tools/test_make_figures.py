"""`make figures` (tools/figures.py) draws every figure in docs/, and only those, from what the repository holds."""

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tools.figures import TABLE_RUNS, figure_names, figures

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
