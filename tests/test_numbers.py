"""One truth for every number: the README states the results the committed records hold.

The paper rows' numbers come from `python -m tools.campaigns status` (the campaigns' records, the shipped
models' records, campaigns/earlier.json); the shipped models' table and counts from their records."""

import json
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
        # a row of several models (their paper numbers listed) is only for models no record holds a number for
        papers = [float(n.replace("−", "-")) for n in re.findall(r"(?<!± )[−-]?\d+\.\d+", cells[2])]
        for r in status_rows if len(papers) > 1 else ():
            assert not any(abs(r.paper - p) < 1e-9 for p in papers) or r.ours is None, \
                f"status holds {r.ours:.4f} for {r.model} ({r.code}): give it a row of its own, not {cells[1]!r}"
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


# ---- numbers stated in several places: each derived here from its record ---------------------------------------

def _words(path: str) -> str:
    """A page's text with its line breaks and runs of spaces as single spaces, Unicode minus as '-'."""
    return " ".join((REPO / path).read_text().split()).replace("−", "-")


def _docs() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")),
            "swarmctl/pretrained/README.md"]


def _json(path: str) -> dict:
    return json.loads((REPO / path).read_text())


def _shipped_records() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((REPO / "swarmctl/pretrained").glob("*.json"))}


def test_net_minutes_and_epochs_of_a_shipped_model_read_as_its_record_says():
    """Wherever a page states a shipped model's net minutes next to its epochs, they are its record's, rounded
    as every command rounds them (2.43 reads 2.4)."""
    from swarmctl.studies.evaluation import net_minutes

    stated = 0
    for name, record in _shipped_records().items():
        for page in _docs():
            for minutes, epochs in re.findall(r"(\d+(?:\.\d+)?) net min(?:utes)?, (\d+) epochs", _words(page)):
                if int(epochs) == record["epochs"]:
                    assert minutes == net_minutes(record["net_minutes"]), (page, name, minutes, record["net_minutes"])
                    stated += 1
    assert stated >= 4  # the clustering and MNIST models, each in two pages at least


def test_the_readme_states_each_shipped_models_net_minutes_as_its_record():
    from swarmctl.studies.evaluation import net_minutes

    for record in _shipped_records().values():
        row = next(cells for cells in _table("Shipped models") if cells[0].strip("`") == record["file"])
        assert row[2].startswith(f"{net_minutes(record['net_minutes'])} net min"), (row, record["net_minutes"])


def test_eval_of_a_shipped_model_states_its_checkpoints_minutes_and_its_records(monkeypatch, cli, tiny_h5, tmp_path):
    """`eval` states the net minutes at which the checkpoint was saved (its best epoch) and, for a shipped model,
    the whole run's as its record says: two numbers, each named, never one for the other."""
    monkeypatch.delenv("SWARMCTL_PRETRAINED")
    import torch

    from swarmctl.studies.evaluation import net_minutes

    record = _json("swarmctl/pretrained/swarm-192-10-1-clustering.json")
    state = torch.load(REPO / "swarmctl/pretrained" / record["file"], weights_only=True)["state"]
    r = cli("eval", "--data", tiny_h5, "--device", "cpu", "--runs-dir", tmp_path / "runs")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert f"saved at {net_minutes(state['net_seconds'] / 60)} net min of its run's " \
           f"{net_minutes(record['net_minutes'])} net min and {record['epochs']} epochs" in text, text


def test_campaign_notes_state_only_their_own_start_and_no_other_number_for_a_shipped_model():
    """A campaign's note states its start number as its record holds it, that number as the dated benchmark
    run that made it (benchmarks/RESULTS.md), and never another number beside a shipped model's file."""
    shipped = {r["file"]: r["eval"] for r in _shipped_records().values()}
    results = _words("benchmarks/RESULTS.md")
    for path in sorted((REPO / "campaigns").glob("*/progress.json")):
        p = json.loads(path.read_text())
        note = " ".join(p.get("start_note", "").split())
        for file, evaluation in shipped.items():
            for beside in re.findall(re.escape(file) + r"([^)]*)\)", note):  # what the note says of that model
                for value in re.findall(r"(\d+\.\d+) test bits/dim", beside):
                    assert float(value) == round(evaluation["bits_per_dim"], 3), (path, file, value)
        if "start_bits_per_dim" in p:
            start = f"{p['start_bits_per_dim']:.3f}"
            found = re.findall(r"(\d+\.\d+) test bits/dim after (\d+\.\d+) net", note)
            assert found and all(v == start for v, _ in found), (path, note)
            for value, minutes in found:  # the benchmark's row: minutes, epochs, **bits**
                assert re.search(rf"\| {re.escape(minutes)} \| \d+ \| \*\*{re.escape(value)}\*\* test bits/dim",
                                 results), (path, value, minutes)


def _mog_oracles() -> tuple[float, float]:
    """(the fixed 10,000-task test set's oracle as the MoG campaign's evaluations recorded it, the CPU
    benchmark's on its 1,000 tasks as benchmarks/RESULTS.md's mog_cpu table holds it)."""
    sessions = _json("campaigns/mog/progress.json")["sessions"]
    fixed = {round(s["oracle_log_likelihood"], 9) for s in sessions if "oracle_log_likelihood" in s}
    assert len(fixed) == 1, fixed  # one test set, one oracle
    text = (REPO / "benchmarks/RESULTS.md").read_text()
    section = text[text.index("## Parametrized amortized clustering, CPU (`benchmarks/mog_cpu.py`)"):]
    section = section[:section.index("\n## ", 1)]
    header = next(line for line in section.splitlines() if line.startswith("| model |"))
    column = [c.strip() for c in header.strip("|").split("|")].index("oracle LL")
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith(("| model", "|---"))]
    bench = {float(r.strip("|").split("|")[column]) for r in rows}
    assert len(bench) == 1, bench
    return fixed.pop(), bench.pop()


MOG_MONTE_CARLO = "-1.4755"  # the expected value over all tasks (2026-11-29, 100,000 tasks: -1.4754 ± 0.0007)


def test_every_stated_mog_oracle_is_one_of_its_records_at_four_decimals():
    """Every log-likelihood near the MoG oracle's on a page (any -1.4...) is the fixed test set's oracle (what
    `eval` prints) or the CPU benchmark's, at four decimals as both print them, or a paper's mean (its record in
    paper_results.json, or a number followed by its ±); the expected value over all tasks (about -1.4755) only
    where it is called a Monte-Carlo estimate. docs/experiments.md states the fixed test set's, where `eval` is
    described."""
    fixed, bench = _mog_oracles()
    allowed = {f"{fixed:.4f}", f"{bench:.4f}"}
    paper = {f"{r['reported']:.4f}" for r in _json("swarmctl/studies/paper_results.json")["rows"] if r["task"] == "mog"}
    seen = set()
    for page in [*_docs(), "benchmarks/RESULTS.md"]:
        text = _words(page)
        for found in re.finditer(r"(?<![\d.])-1\.4\d+", text):
            value, after = found.group(), text[found.end():found.end() + 30]
            around = text[found.start() - 60:found.end()]
            if value in paper or after.startswith(" ±"):  # a mean over runs (the paper's), not an oracle
                continue
            if value == MOG_MONTE_CARLO:
                assert re.match(r",? \(?a Monte-Carlo estimate", after), (page, around + after)
                continue
            assert value in allowed, f"{page}: {around!r}; records: {sorted(allowed)}"
            seen.add(value)
    assert seen == allowed
    experiments = _words("docs/experiments.md")
    assert f"({fixed:.4f} per point on that set" in experiments


@pytest.mark.slow
def test_the_mog_oracle_records_are_what_the_seeded_test_sets_give(tmp_path):
    """Both oracles computed again from their seeded tasks: the fixed test set `eval` scores and the CPU
    benchmark's 1,000 tasks (benchmarks/mog_cpu.py's file)."""
    from swarmctl.data.hdf5 import generate_mog_dataset, read_dataset
    from swarmctl.data.mog import generate_mog_tasks
    from swarmctl.tasks.mog import TEST_BATCH_SIZE, TEST_BATCHES, TEST_SEED, mog_batches, oracle_log_likelihood

    def oracle(tasks):
        return sum(oracle_log_likelihood(b).sum().item() for b in mog_batches(tasks, TEST_BATCH_SIZE)) / len(tasks)

    fixed, bench = _mog_oracles()
    assert oracle(generate_mog_tasks(TEST_BATCHES, TEST_BATCH_SIZE, TEST_SEED)) == pytest.approx(fixed, abs=1e-9)
    generate_mog_dataset(tmp_path / "test.h5", 1000, seed=0)
    assert round(oracle(read_dataset(tmp_path / "test.h5")[0]["test"]), 4) == bench


def test_swarm_epoch_times_on_the_h200_are_the_timing_records():
    """SWARM (192-10-1) per 9,000-task epoch on the H200: campaigns/timing.json (the compiled step: its cold-compile
    probe's steady state), the same as swarmctl/training/step_timings.json's step times x 90 steps; every page
    that states one states these, at two decimals."""
    timing = _json("campaigns/timing.json")
    per_epoch = timing["clustering_s_per_epoch"]
    compiled = timing["compile_probes"]["clustering"]["steady_s_per_epoch"]
    card = next(c for c in _json("swarmctl/training/step_timings.json")["cards"] if c["card"] == "NVIDIA H200")
    step = card["tasks"]["clustering"]["compile"]["step_seconds"]
    assert step * 90 == pytest.approx(compiled, rel=1e-4)  # the step as step_timings.json rounds it
    experiments, benchmarks = _words("docs/experiments.md"), _words("docs/benchmarks.md")
    for text in (experiments, benchmarks):
        assert f"{per_epoch['fp32']:.2f}" in text and f"{per_epoch['tf32']:.2f}" in text
    assert (f"{per_epoch['fp32']:.2f} s per 9,000-task epoch in strict float32, {per_epoch['tf32']:.2f} s with TF32 "
            f"(the default), {per_epoch['bf16-autocast']:.2f} s with `--step amp` and {compiled:.2f} s with "
            "`--step compile`") in experiments
    assert f"{compiled:.2f} with `--step compile` (steady state: {step * 1000:.1f} ms × 90 steps" in benchmarks
    assert f"SWARM {compiled:.2f} s per epoch (compiled)" in benchmarks
    checked = 0
    for page in _docs():  # no page states another number for the compiled step
        text = _words(page)
        for found in re.finditer(r"(\d+\.\d+) s? ?(?:with `--step compile`|per epoch \(compiled\))", text):
            before = re.findall(r"SWARM|MNIST|MoG|swarm-image|swarm-mog",
                                text[max(found.start() - 300, 0):found.start()])
            if before and before[-1] == "SWARM":  # the last model named before the number
                assert found.group(1) == f"{compiled:.2f}", (page, found.group(0))
                checked += 1
    assert checked >= 3


def test_the_h200_step_times_and_targets_read_as_the_timing_records_and_as_status_prints_them():
    """docs/benchmarks.md's step times of MoG and MNIST are campaigns/timing.json's, at one decimal as `campaigns
    status` prints a step (9.853 ms reads 9.9), and the page states one target per task."""
    timing = _json("campaigns/timing.json")
    probes = timing["compile_probes"]
    page = _words("docs/benchmarks.md")
    row = page.split("| step times, fastest mode", 1)[1][:400]
    assert (f"MoG {timing['mog_ms_per_step']['graphs']:.1f} ms per step (CUDA graphs; "
            f"{probes['mog']['steady_ms_per_step']:.1f} ms compiled after a {probes['mog']['compile_s']:.0f} s "
            f"compile), MNIST {probes['image']['steady_s_per_epoch']:.1f} s per epoch (compiled)") in row, row
    targets = re.findall(r"targets?:? (?:MoG )?(\d+(?:\.\d+)?) ms", page)
    assert len(set(targets)) == 1, targets  # the MoG step's target, the only one in milliseconds


def test_mog_backtracking_reads_the_same_in_models_and_the_docs_and_is_what_the_trainer_does(cli):
    """With the MoG task's beta the authors' rule cannot fire on any finite history (checked on the trainer's own
    rule), so `models` and docs/experiments.md both say it backtracks only on a non-finite loss, with its alpha."""
    import math
    import random

    from swarmctl.cli.models import backtracking
    from swarmctl.tasks import get_task
    from swarmctl.training.loop import should_backtrack

    def fires(beta: float) -> bool:
        rng = random.Random(0)
        for _ in range(300):
            history = [math.inf]
            for epoch in range(60):
                v = rng.choice([history[-1] if epoch else 2.0, 1.0 + rng.random(), 9.0])  # ties, noise, bad plateaus
                if should_backtrack(history, v, epoch, beta):
                    return True
                history.append(v)
        return False

    for task in ("clustering", "mog"):
        d = get_task(task).defaults
        said = backtracking(d.beta, d.alpha)
        assert ("only on a non-finite validation loss" in said) == (not fires(d.beta)), (task, said)
        assert said in " ".join(cli("models").output.split())
    mog = get_task("mog").defaults
    experiments = _words("docs/experiments.md")
    section = experiments[experiments.index("swarmctl train swarm-mog"):experiments.index("## SWARM Transformer")]
    assert backtracking(mog.beta, mog.alpha).rstrip(")") in section
    assert "no backtracking" not in section


def test_the_cpu_table_states_what_report_prints_over_the_committed_runs(cli, tmp_path):
    """README's Table 2 on a CPU is `swarmctl report --runs-dir campaigns/clustering-cpu/runs`, rounded as report
    rounds: every finished configuration there is a row here with the same mean (± std over its seeds), seeds,
    hardware, net minutes and epochs; a configuration with no finished seed states no loss."""
    r = cli("report", "--runs-dir", REPO / "campaigns" / "clustering-cpu" / "runs", "--out", tmp_path / "rep", "--json")
    assert r.exit_code == 0, r.output
    finished = {(row["model"], row["code"]): row for row in json.loads(r.stdout) if row["status"] == "finished"}
    table = {(cells[0].strip("`"), cells[1]): cells for cells in _table("Table 2 on a CPU")}
    assert len(table) == 6 and set(finished) <= set(table), (sorted(table), sorted(finished))
    paper = {(r["model"], r["code"]): r for r in _json("swarmctl/studies/paper_results.json")["rows"]}
    for key, cells in table.items():
        assert cells[2] == f"{paper[key]['reported']:g} ± {paper[key]['std']:g}", (cells, paper[key])
        row = finished.get(key)
        if row is None:
            assert _number(cells[3]) is None, f"README states a loss for {key}, which has no finished seed: {cells}"
            continue
        loss = f"{row['val_loss_mean']:.4f}" + ("" if row["val_loss_std"] is None else f" ± {row['val_loss_std']:.4f}")
        assert cells[3] == loss and cells[4].startswith(f"{row['n']} of 3"), (cells, row)
        assert (cells[5], cells[6], cells[7]) == (row["hardware"], f"{row['net_minutes']:.1f}", f"{row['epochs']:.0f}")


def test_the_cpu_tables_best_epochs_are_the_finished_runs():
    """Below README's Table 2 on a CPU, each finished seed's best epoch of its last (0-based, as metrics.jsonl
    counts them), seeds in order, for every row with a finished seed: `MODEL` B of L, B of L, ..."""
    progress = _json("campaigns/clustering-cpu/progress.json")["runs"]
    runs = REPO / "campaigns" / "clustering-cpu" / "runs"
    want: dict[str, list[str]] = {}
    for name, rec in sorted(progress.items(), key=lambda kv: (kv[1]["model"], kv[1]["seed"])):
        rows = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines() if line]
        best = next(r["epoch"] for r in rows if r["val_loss"] == rows[-1]["best_val"])
        want.setdefault(rec["model"], []).append(f"{best} of {rows[-1]['epoch']}")
    section = " ".join(_section("Table 2 on a CPU").split())
    stated = {m: re.findall(r"\d+ of \d+", epochs)
              for m, epochs in re.findall(r"`([a-z-]+)` ((?:\d+ of \d+(?:, |; |\.))+)", section)}
    assert stated == want, f"README: {stated}; the runs' metrics: {want}"


def test_the_exact_150_map_times_are_the_benchmarks_record():
    """The exact entropy map of 150 x 150 locations at N 500, on the H200 and on the 2-core CPU, as
    benchmarks/RESULTS.md recorded them; every page that states one states these."""
    results = _words("benchmarks/RESULTS.md")
    card = re.search(r"exact entropy map \(150 × 150 grid, 500-entity task\) took (\d+(?:\.\d+)?) s on the card",
                     results).group(1)
    cpu = re.search(r"\*\*1,239 s \((\d+\.\d) min\)\*\*", results).group(1)
    stated = {"H200": [], "CPU": []}
    for page in _docs():
        text = _words(page)
        within = r"(?:(?!\. ).){0,120}?"  # in the same sentence
        stated["H200"] += re.findall(rf"150 × 150 (?:map|grid){within} (\d+(?:\.\d+)?) s on (?:an|the) H200", text)
        stated["CPU"] += re.findall(r"(\d+(?:\.\d+)?) minutes for the 150 × 150 map", text)
        stated["CPU"] += re.findall(rf"150 × 150 map{within} (\d+(?:\.\d+)?) minutes on the 2-core CPU", text)
    assert stated["H200"] and set(stated["H200"]) == {card}, (stated, card)
    assert stated["CPU"] and set(stated["CPU"]) == {cpu}, (stated, cpu)


def test_the_pages_state_the_entropy_figures_grid_and_points_as_make_figures_draws_them():
    """docs/entropy.png's grid (tools/figures.py's options) and its task's points (its title, as the README's
    caption states them) wherever a page describes that figure."""
    from tools.figures import ENTROPY_OPTIONS

    grid = ENTROPY_OPTIONS[ENTROPY_OPTIONS.index("--grid") + 1]
    readme = " ".join((REPO / "README.md").read_text().split())
    points = re.search(r"!\[entropy map\]\(docs/entropy\.png\) \*[^*]*?(\d+) points", readme).group(1)
    assert re.findall(r"the figure above: (\d+) x (\d+), N (\d+)", readme) == [(grid, grid, points)]
    experiments = _words("docs/experiments.md")
    caption = experiments[experiments.index("![entropy map](entropy.png)"):][:600]
    assert f"{points} points" in caption and f"each of {grid} × {grid} locations" in caption, caption
