"""`swarmctl campaign status`: each campaign's number against the paper's, and the next job's plan as the job
itself would make it (the same order, shares and step modes)."""

import json

import pytest
from conftest import fresh_campaigns

from swarmctl.campaigns import plan
from swarmctl.campaigns.job import PACK_RESERVE
from swarmctl.campaigns.status import campaign_status


def test_status_shows_the_plan_the_job_would_make(tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "mnist" / "progress.json").write_text(json.dumps({"campaign": "mnist", "best_bits_per_dim": 1.2,
                                                              "epochs": 7, "net_minutes": 2.0, "sessions": [{}]}))
    (root / "timing.json").write_text(json.dumps({"mog_ms_per_step": {"eager": 16.0, "graphs": 5.0}}))
    status = campaign_status(root, wall=1000)
    rows = {c.name: c for c in status.campaigns}
    order = plan.plan(root)
    assert [n for n, _ in order] == [n for n, c in sorted(rows.items(), key=lambda t: t[1].order or 99) if c.order]
    left = 1000 - PACK_RESERVE
    for i, (name, gap) in enumerate(order):
        assert rows[name].order == i + 1 and rows[name].gap == pytest.approx(gap)
        assert rows[name].share_s == pytest.approx(plan.share(order, i, left))  # what the ones before it left
        left -= rows[name].share_s
    assert rows["fashion-mnist"].order is None  # waits for MNIST
    assert rows["mnist"].ours == 1.2 and rows["mnist"].paper == pytest.approx(0.89) and rows["mnist"].sessions == 1
    assert rows["mog"].flags == ("--cuda-graphs",)  # graphs: the faster measured mode
    assert status.timing_from == str(root / "timing.json")


def test_status_command_prints_every_campaign(cli, tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    r = cli("campaign", "status", "--campaigns", root)
    assert r.exit_code == 0, r.output
    assert all(f"{n}:" in r.output for n in plan.NAMES) and "next job: #1" in r.output
    assert "none measured yet" in r.output


def test_every_paper_row_has_its_numbers_step_and_minutes_left(tmp_path):
    """One row per row of the paper's tables: the MoG row needs the paper's whole schedule (100 x 500 steps)
    at the fastest measured step until it reaches the paper; a clustering row, its runs left at the
    campaign's minutes per run, shared by the runs side by side; a reached row needs nothing."""
    from swarmctl.campaigns.status import paper_rows
    from swarmctl.studies.report import paper_results

    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "timing.json").write_text(json.dumps({"mog_ms_per_step": {"eager": 16.0, "graphs": 6.0}}))
    first = plan.table_runs()[0]  # swarm 192-10-1, seed 0
    progress = json.loads((root / "clustering" / "progress.json").read_text())
    progress.update(minutes_per_run=4.0, side_by_side=2,
                    runs={first["name"]: {"model": "swarm", "code": "192-10-1", "seed": 0, "eval_loss": 0.5}})
    (root / "clustering" / "progress.json").write_text(json.dumps(progress))
    (root / "mnist" / "progress.json").write_text(json.dumps({"campaign": "mnist", "best_bits_per_dim": 0.88,
                                                              "sessions": []}))
    rows = paper_rows(root)
    assert len(rows) == len(paper_results()["rows"])
    by = {(r.model, r.code, r.dataset): r for r in rows}
    mog = by["swarm-mog", "768-20-1", None]
    assert mog.step_s == pytest.approx(0.006) and mog.minutes_left == pytest.approx(100 * 500 * 0.006 / 60)
    swarm = by["swarm", "192-10-1", None]
    assert swarm.ours == 0.5 and swarm.paper == 0.416 and swarm.minutes_left == pytest.approx(2 * 4.0 / 2)
    assert by["set-transformer", "32-60-3", None].minutes_left == pytest.approx(3 * 4.0 / 2)
    assert by["swarm-image", "256-10-1", "mnist"].minutes_left == 0.0  # 0.88 <= 0.89: reached
    assert by["swarm-image", "512-20-1", "cifar10"].campaign is None

    progress = json.loads((root / "mog" / "progress.json").read_text())
    (root / "mog" / "progress.json").write_text(json.dumps({**progress, "best_log_likelihood": -1.49}))
    assert {(r.model, r.minutes_left) for r in paper_rows(root) if r.campaign == "mog"} == {("swarm-mog", 0.0)}
