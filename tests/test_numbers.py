"""One truth for every number: the README states the results the committed records hold.

The paper rows' numbers come from `python -m tools.campaigns status` (the campaigns' records, the shipped
models' records, campaigns/earlier.json); the shipped models' table and counts from their records."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"[−-]?\d+(?:\.\d+)?")
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _table(title: str) -> list[list[str]]:
    rows = [line for line in _section(title).splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _number(text: str) -> tuple[float, int] | None:
    """The first number in a cell and its decimals (a Unicode minus read as one)."""
    found = NUMBER.search(text.replace("**", ""))
    if not found:
        return None
    digits = found.group().replace("−", "-")
    return float(digits), len(digits.split(".")[1]) if "." in digits else 0


@pytest.fixture
def status_rows(monkeypatch):
    monkeypatch.delenv("SWARMCTL_PRETRAINED")  # the shipped models' records, as a user has them
    from tools.campaigns.status import paper_rows

    return paper_rows(REPO / "campaigns", 540.0)


def test_the_reproduction_table_states_the_best_number_known_for_each_row(status_rows):
    checked = 0
    for cells in _table("Reproducing the paper"):
        paper, ours = _number(cells[2]), cells[3]
        row = next((r for r in status_rows if paper and abs(r.paper - paper[0]) < 1e-9), None)
        if row is None or row.ours is None:  # no record holds a number for it: the README states none either
            assert _number(ours) is None, f"README states {ours!r} for a row no record holds: {cells}"
            continue
        stated = _number(ours)
        assert stated is not None, f"README states no number for {row.model} ({row.code}); status: {row.ours}"
        assert stated[0] == round(row.ours, stated[1]), f"README {stated[0]} against status {row.ours}: {cells}"
        checked += 1
    assert checked >= 4  # SWARM and Set Transformer clustering, SWARM MoG, MNIST


def test_the_shipped_models_are_counted_and_scored_as_their_records_say(monkeypatch):
    monkeypatch.delenv("SWARMCTL_PRETRAINED")
    from swarmctl.runs.shipped import shipped_models

    models = {m.checkpoint.name: m.record for m in shipped_models()}
    word = WORDS[len(models)]
    assert f"the {word} shipped models" in _section("Install")
    assert _section("Shipped models").lower().count(f"{word} models ship") == 1
    table = _table("Shipped models")
    assert sorted(cells[0].strip("`") for cells in table) == sorted(models)
    for cells in table:
        record = models[cells[0].strip("`")]
        stated = _number(cells[3])
        value = record["eval"].get("loss", record["eval"].get("bits_per_dim"))
        if "bits_per_dim" in record["eval"]:
            value = record["eval"]["bits_per_dim"]
        elif "loss" not in record["eval"]:  # the broad model: its benchmark's adjusted Rand index
            value = next(v["ari"] for v in record["eval"].values() if isinstance(v, dict) and "ari" in v)
        assert stated is not None and stated[0] == round(value, stated[1]), (cells, value)


def test_cluster_help_counts_the_shipped_clustering_models(monkeypatch, cli):
    monkeypatch.delenv("SWARMCTL_PRETRAINED")
    from swarmctl.runs.shipped import shipped_models

    models = shipped_models()
    clustering = sum(1 for m in models if m.task == "clustering")
    text = " ".join(cli("cluster", "--help").output.split())
    assert f"{WORDS[clustering].capitalize()} clustering models ship (of the {WORDS[len(models)]} shipped models)" \
        in text, text
