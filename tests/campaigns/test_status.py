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
