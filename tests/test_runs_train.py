"""`runs.train`, the whole of `swarmctl train` (start or resume, then the curves), and `runs.finish_runs`,
what follows training in `train` and `sweep`."""

import errno

import pytest
from conftest import tiered

from swarmctl.errors import ConfigError, ResourceError
from swarmctl.plots.curves import save_run_curves
from swarmctl.rundir import RunDir
from swarmctl.runs import FitResult, finish_runs, train

TINY = dict(model_options={"dim_hidden": 4, "n_layers": 1}, train_options={"max_epochs": 1, "batch_size": 6,
                                                                              "device": "cpu"})


def _train(tiny_h5, runs, **kw):
    return train("set-linear", TINY["model_options"], {**TINY["train_options"], **kw.pop("train", {})}, runs,
                 data=tiny_h5, draw=save_run_curves, **kw)


def test_train_starts_a_run_and_says_what_it_wrote_and_how_to_continue(tiny_h5, tmp_path):
    told = []
    trained = _train(tiny_h5, tmp_path / "runs", name="a", on_continue=told.append)
    run = RunDir(tmp_path / "runs" / "a")
    assert trained.run == run and not trained.interrupted and trained.result.epochs == 1
    assert set(trained.files) == {run.config, run.metrics, run.best, run.last, run.curves}
    assert trained.finished.curves == (run.curves,)
    assert told == [trained.continue_with] and "--resume a" in trained.continue_with
    assert "--runs-dir" in trained.continue_with  # not the default runs folder


def test_train_with_resume_continues_the_run_with_its_resumable_options(tiny_h5, tmp_path):
    runs = tmp_path / "runs"
    _train(tiny_h5, runs, name="a")
    more = train("set-linear", {}, {"max_epochs": 3, "device": "cpu"}, runs, resume="a", draw=save_run_curves)
    assert more.run == RunDir(runs / "a") and more.result.epochs == 3
    assert more.finished.curves == (RunDir(runs / "a").curves,)


# a training option and a model option in the default suite (the command line's every option: test_lifecycle);
# the data and the name slow
@pytest.mark.parametrize("setting, model_options, train_options, named", [
    tiered("lr", {}, {"lr": 123.0}, {}, default=True), tiered("dim_hidden", {"dim_hidden": 8}, {}, {}, default=True),
    tiered("data", {}, {}, {"data": "other.h5"}, default=False), tiered("name", {}, {}, {"name": "b"}, default=False)])
def test_train_with_resume_refuses_a_setting_the_run_cannot_change(tiny_h5, tmp_path, setting, model_options,
                                                                   train_options, named):
    """A Python caller who resumes with a new ``lr`` (or model size, data, name) is told, not ignored."""
    runs = tmp_path / "runs"
    _train(tiny_h5, runs, name="a")
    before = RunDir(runs / "a").last.read_bytes()
    with pytest.raises(ConfigError) as err:
        train("set-linear", model_options, {"max_epochs": 3, **train_options}, runs, resume="a", **named)
    assert f"`{setting}` cannot change when resuming" in str(err.value)
    assert "`max_epochs`" in str(err.value) and "may change" in str(err.value)  # what may be given instead
    assert RunDir(runs / "a").last.read_bytes() == before


def _result(run_dir, stop="max epochs", epochs=2):
    return FitResult(run_dir, 0.5, 1, epochs, 1.0, 0.1, 0, stop)


def test_finish_draws_the_runs_trained_now_and_finished_runs_that_lack_curves(tmp_path):
    drawn = []

    def draw(run_dir):
        drawn.append(run_dir)
        return RunDir(run_dir).curves

    has = tmp_path / "has"
    has.mkdir()
    RunDir(has).curves.write_bytes(b"png")
    done = finish_runs([_result(tmp_path / "a"), None, _result(tmp_path / "b")], "swarmctl again",
                       finished=[tmp_path / "lacks", has], draw=draw)
    assert drawn == [tmp_path / "a", tmp_path / "b", tmp_path / "lacks"]
    assert done.curves == tuple(RunDir(p).curves for p in drawn) and done.interrupted is None


def test_finish_of_an_interrupted_run_draws_nothing_for_it_and_says_how_to_continue(tmp_path):
    drawn = []
    cut = _result(tmp_path / "cut", "interrupted (SIGTERM)", epochs=3)
    done = finish_runs([_result(tmp_path / "a"), cut], "swarmctl again", draw=drawn.append)
    assert drawn == [tmp_path / "a"]
    assert done.interrupted == cut
    assert done.message == (f"interrupted (SIGTERM): saved {RunDir(tmp_path / 'cut').last} at the start of epoch 3 "
                            "(3 epochs done); continue with: swarmctl again")


def test_curves_that_cannot_be_written_are_one_error_saying_the_training_is_saved(tmp_path):
    def full_disk(run_dir):
        raise OSError(errno.ENOSPC, "No space left on device", str(RunDir(run_dir).curves))

    with pytest.raises(ResourceError) as err:
        finish_runs([_result(tmp_path / "a")], "swarmctl again", draw=full_disk)
    text = str(err.value)
    assert "\n" not in text and "no space left" in text.lower() and str(RunDir(tmp_path / "a").curves) in text
    assert f"the training finished and is saved in {tmp_path / 'a'}" in text
    assert text.endswith("draw its curves again with: swarmctl again")
