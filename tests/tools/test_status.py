"""`python -m tools.campaigns status`: each campaign's number against the paper's, and the next job's plan as the job
itself would make it (the same order, shares and step modes)."""

import json

import pytest
from conftest import fresh_campaigns

from tools.campaigns import plan
from tools.campaigns.plan import PACK_RESERVE
from tools.campaigns.status import campaign_status


def test_status_shows_the_plan_the_job_would_make(tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "mnist" / "progress.json").write_text(json.dumps({"campaign": "mnist", "best_bits_per_dim": 1.2,
                                                              "epochs": 7, "net_minutes": 2.0, "sessions": [{}]}))
    (root / "timing.json").write_text(json.dumps({"mog_ms_per_step": {"eager": 16.0, "graphs": 5.0}}))
    status = campaign_status(root, wall=1000, files=8)
    rows = {c.name: c for c in status.campaigns}
    order, waiting = plan.within_files(plan.plan(root), root, 8)
    assert waiting == ["mnist"] and status.waiting == ("mnist",)  # MoG's parts and MNIST's files: MNIST ran last
    assert [n for n, _ in order] == [n for n, c in sorted(rows.items(), key=lambda t: t[1].order or 99) if c.order]
    left = 1000 - PACK_RESERVE
    for i, (name, gap) in enumerate(order):
        assert rows[name].order == i + 1 and rows[name].gap == pytest.approx(gap)
        assert rows[name].share_s == pytest.approx(plan.share(order, i, left))  # what the ones before it left
        left -= rows[name].share_s
    assert rows["fashion-mnist"].order is None  # waits for MNIST
    assert rows["mnist"].ours == 1.2 and rows["mnist"].paper == pytest.approx(0.89) and rows["mnist"].sessions == 1
    assert rows["mog"].flags == ("--step", "graphs")  # graphs: the faster measured mode
    assert status.timing_from == str(root / "timing.json")


def test_status_command_prints_every_campaign(campaigns_cli, tmp_path):
    root = fresh_campaigns(tmp_path / "campaigns")
    r = campaigns_cli("status", "--campaigns", root)
    assert r.exit_code == 0, r.output
    assert all(f"{n}:" in r.output for n in plan.NAMES) and "next job: runs it 1st" in r.output
    assert "none measured yet" in r.output
    text = " ".join(r.output.split())
    assert "the clustering table: 18 of 18 runs left; the card's memory not known yet" in text
    # the table runs on what the others leave, not on a share of a few seconds
    assert "on what the campaigns before it leave (a group of its runs needs" in text, text


def test_the_files_a_job_may_return_are_an_option_of_the_plan(campaigns_cli, tmp_path):
    """With 3 files (the record, the logs and one archive) only the clustering table fits: MoG and MNIST,
    which return checkpoints, wait; the default (8) lets one of them run."""
    root = fresh_campaigns(tmp_path / "campaigns")
    text = " ".join(campaigns_cli("status", "--campaigns", root, "--files", "3").output.split())
    assert "waiting: mog, mnist (a job returns at most 3 files" in text, text
    text = " ".join(campaigns_cli("status", "--campaigns", root).output.split())
    assert "waiting: mnist (a job returns at most 8 files" in text, text


def test_status_runs_outside_the_repositorys_root(campaigns_cli, tmp_path, monkeypatch):
    """The clustering table's spec (sweeps/best.toml) is found beside the package when the current folder
    has none."""
    root = fresh_campaigns(tmp_path / "campaigns")
    monkeypatch.chdir(tmp_path)
    r = campaigns_cli("status", "--campaigns", root)
    assert r.exit_code == 0, r.output
    assert "18 of 18 runs left" in " ".join(r.output.split())


def test_every_paper_row_has_its_numbers_step_and_minutes_left(tmp_path):
    """One row per row of the paper's tables: the MoG row needs the paper's whole schedule (100 x 500 steps)
    at the fastest measured step until it reaches the paper; a clustering row, its runs left at the
    campaign's minutes per run, shared by the runs side by side; a reached row needs nothing."""
    from swarmctl.studies.report import paper_results
    from tools.campaigns.status import paper_rows

    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "timing.json").write_text(json.dumps({"mog_ms_per_step": {"eager": 16.0, "graphs": 6.0}}))
    first = plan.table_runs()[0]  # swarm 192-10-1, seed 0
    progress = json.loads((root / "clustering" / "progress.json").read_text())
    progress.update(minutes_per_run=4.0, side_by_side=2,
                    runs={first["name"]: {"model": "swarm", "code": "192-10-1", "seed": 0, "eval_loss": 0.5}})
    (root / "clustering" / "progress.json").write_text(json.dumps(progress))
    (root / "mnist" / "progress.json").write_text(json.dumps({"campaign": "mnist", "best_bits_per_dim": 0.88,
                                                              "sessions": []}))
    rows = paper_rows(root, 540)
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
    assert {(r.model, r.minutes_left) for r in paper_rows(root, 540) if r.campaign == "mog"} == {("swarm-mog", 0.0)}


def test_the_carried_mog_run_needs_the_rest_of_its_schedule(tmp_path):
    """The MoG row's minutes: the epochs the carried run has left of the paper's 100, 500 steps each, at the
    fastest measured step: 60 x 500 x 6 ms = 3 min; all 100 epochs without a carried run."""
    from tools.campaigns.status import paper_rows

    root = fresh_campaigns(tmp_path / "campaigns")
    (root / "timing.json").write_text(json.dumps({"mog_ms_per_step": {"eager": 16.0, "graphs": 6.0}}))
    progress = json.loads((root / "mog" / "progress.json").read_text())
    (root / "mog" / "progress.json").write_text(json.dumps({**progress, "run": "swarm-mog-3", "epoch": 40,
                                                            "best_log_likelihood": -1.7}))
    mog = next(r for r in paper_rows(root, 540) if r.campaign == "mog")
    assert mog.minutes_left == pytest.approx(3.0) and "swarm-mog-3 at epoch 40" in mog.note
    (root / "mog" / "progress.json").write_text(json.dumps({**progress, "best_log_likelihood": -1.7}))
    assert next(r for r in paper_rows(root, 540) if r.campaign == "mog").minutes_left == pytest.approx(5.0)


def test_the_clustering_table_plan_by_hand():
    """How many runs share the card (90 % of its memory over the largest run's), how long a group takes
    (60 s of evaluation and copies + its net minutes and a fifth more + 30 s of start-up), and how many jobs
    the runs left take when a job's wall, less 60 s of its own, holds whole groups."""
    gib = 2**30
    assert plan.fit_side_by_side([2 * gib, 10 * gib], 100 * gib) == 2  # 9 would fit, there are 2
    assert plan.fit_side_by_side([10 * gib] * 18, 80 * gib) == 7  # 72 GiB / 10 GiB
    assert plan.fit_side_by_side([10 * gib] * 6, 5 * gib) == 1  # never fewer than one
    assert plan.group_seconds(3.0) == pytest.approx(60 + 3 * 60 * 1.2 + 30)  # 306 s
    assert plan.table_jobs(18, 6, 3.0, 540) == 3  # 480 s hold one group of 306 s; 3 groups
    assert plan.table_jobs(18, 6, 3.0, 1000) == 1  # 940 s hold 3 groups
    assert plan.table_jobs(5, 2, 3.0, 540) == 3  # 3 groups (2, 2, 1), one a job
    assert plan.table_jobs(18, 6, 3.0, 300) is None  # 240 s hold no group
    assert plan.table_jobs(0, 6, 3.0, 300) == 0
    assert plan.card_bytes("NVIDIA H200, 140 GiB, 132 SMs") == 140 * gib and plan.card_bytes("cpu (no CUDA)") is None


def test_a_runs_memory_is_its_context_training_state_and_activations():
    """SWARM 192-10-1 on batches of 2 sets of 3 points: 1 GiB + 16 bytes per parameter + 2 x 3 x 192 x (10
    iterations x 1 layer) x 12 floats x 4 bytes."""
    from swarmctl.runs import parameter_count

    swarm = plan.table_runs()[0]["config"]
    assert plan.table_run_bytes(swarm, 2, 3) == 2**30 + 16 * parameter_count(swarm) + 2 * 3 * 192 * 10 * 12 * 4


def test_the_table_plan_of_a_campaign(tmp_path):
    """Two of the 18 runs done, 3 net minutes each, six side by side asked: on an unknown card six at once
    (16 left: 3 groups, one per 540 s job); on a card that holds only one run at a time, 16 jobs."""
    first, second = plan.table_runs()[:2]
    progress = {"minutes_per_run": 3.0, "side_by_side": 6, "runs": {first["name"]: {}, second["name"]: {}}}
    unknown = plan.table_plan(progress, 540, None)
    assert (unknown.runs, unknown.runs_left, unknown.fit, unknown.side, unknown.jobs) == (18, 16, None, 6, 3)
    small = plan.table_plan(progress, 540, 12 * 2**30)  # under two of the largest run (SWARM, about 9.6 GiB)
    assert (small.fit, small.side, small.jobs) == (1, 1, 16)
    assert plan.table_plan(progress, 540, 1000 * 2**30).side == 6  # fits many more: the campaign's six
