"""The training step helper: on the CPU a step is the plain eager step whatever is asked for (CUDA graphs
are guarded to CUDA); the graphed path itself is checked against eager steps in tests/gpu."""

import copy

import numpy as np
import torch

from swarmctl import ModelConfig, create_model
from swarmctl.data.mog import sample_mog_batch
from swarmctl.tasks.mog import mog_loss
from swarmctl.training.steps import TrainStep, graphs_available


def _model_and_opt():
    torch.manual_seed(0)
    model = create_model(ModelConfig(name="swarm-mog", dim_hidden=16, n_iter=3))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def _plain_steps(model, opt, batches):
    losses = []
    for b in batches:
        loss = mog_loss(model, b).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_graphs_are_guarded_to_cuda_and_the_cpu_step_is_unchanged():
    batches = [sample_mog_batch(np.random.default_rng([1, i]), 4) for i in range(4)]
    model, opt = _model_and_opt()
    step = TrainStep(model, opt, mog_loss, torch.device("cpu"), graphs=True)
    assert not step.graphs and not graphs_available(torch.device("cpu"))
    assert all(not g["capturable"] for g in opt.param_groups)
    got = [step(b).item() for b in batches]
    ref_model, ref_opt = _model_and_opt()
    assert got == _plain_steps(ref_model, ref_opt, batches)  # bitwise: the same operations in the same order
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_checkpoint_saved_with_capturable_adam_loads_for_a_cpu_step():
    """A run trained with CUDA graphs saves its Adam groups with capturable=True; a CPU run resuming it
    must not inherit the flag (capturable Adam refuses CPU tensors)."""
    model, opt = _model_and_opt()
    for g in opt.param_groups:
        g["capturable"] = True
    state = opt.state_dict()
    fresh_model, fresh_opt = _model_and_opt()
    fresh_opt.load_state_dict(state)
    step = TrainStep(fresh_model, fresh_opt, mog_loss, torch.device("cpu"), graphs=True)
    assert torch.isfinite(step(sample_mog_batch(np.random.default_rng(3), 4)))


# ---- the graphed path on a stand-in backend (capture runs the step, replay runs it again) ----------------

import io  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402

from swarmctl.training.steps import HostGraphs, place_optimizer_state, uncaptured_adam_ok  # noqa: E402


def _batches(n):
    """Three batches of two shapes (two graphs), repeated; each call draws with a new seed from the same
    shapes (the points differ: a graph replays on new inputs)."""
    from swarmctl.data.mog import sample_mog_batch_torch

    return [sample_mog_batch_torch(np.random.default_rng([2, i]), (4, 6, 4)[i % 3], bucket=500) for i in range(n)]


def _counting(opt):
    calls = []
    opt.register_step_post_hook(lambda *_: calls.append(1))
    return calls


def test_every_call_is_exactly_one_optimizer_update_capture_included():
    model, opt = _model_and_opt()
    backend = HostGraphs()
    step = TrainStep(model, opt, mog_loss, torch.device("cpu"), graphs=True, backend=backend)
    calls = _counting(opt)
    for i, b in enumerate(_batches(12)):
        step(b)
        assert len(calls) == i + 1, f"call {i}: {len(calls)} optimizer updates"
    assert backend.captures == 2 and backend.replays > 0  # both paths taken: warm-up, capture, replay


def _run(batches, graphs, lr_at=None, reload_at=None, resume_at=None):
    """Steps over ``batches`` with a learning-rate change, a reloaded optimizer state (a backtrack) and a resume
    through a serialised checkpoint (new model, optimizer and step) on the way."""
    model, opt = _model_and_opt()
    make = lambda m, o: TrainStep(m, o, mog_loss, torch.device("cpu"), graphs=graphs,  # noqa: E731
                                  backend=HostGraphs() if graphs else None)
    step, snapshot, losses = make(model, opt), None, []
    for i, b in enumerate(batches):
        if i == lr_at:
            for g in opt.param_groups:
                g["lr"] = 0.003
        if i == 4:
            snapshot = copy.deepcopy(opt.state_dict())
        if i == reload_at:
            opt.load_state_dict(copy.deepcopy(snapshot))
        if i == resume_at:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
            buf.seek(0)
            saved = torch.load(buf, weights_only=True)
            model, opt = _model_and_opt()
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["opt"])
            step = make(model, opt)
        losses.append(step(b).item())
    return losses, model


def test_graphed_steps_reach_the_eager_weights_through_lr_changes_a_reload_and_a_resume():
    batches = _batches(24)
    plan = {"lr_at": 9, "reload_at": 13, "resume_at": 18}
    eager_losses, eager = _run(batches, graphs=False, **plan)
    graph_losses, graphed = _run(batches, graphs=True, **plan)
    assert graph_losses == pytest.approx(eager_losses, rel=1e-6, abs=1e-7)
    for p, q in zip(eager.parameters(), graphed.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)


def test_the_uncaptured_capturable_adam_warning_is_silenced_and_only_it(monkeypatch):
    """PyTorch warns when a capturable Adam steps outside a capture (the warm-up steps do, by design); the
    test suite turns warnings into errors, so the graphed path must silence that warning, and only it. The
    real check runs here with CUDA made to look present and idle."""
    model, opt = _model_and_opt()
    for g in opt.param_groups:
        g["capturable"] = True

    class Idle:
        def is_capturing(self):
            return False

    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda *a, **k: Idle())
    def uncaptured_step():
        """A step of a copy of the optimizer, without gradients (only PyTorch's checks run): a new optimizer
        is marked as warned already, a copy warns once."""
        copy.deepcopy(opt).step()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with uncaptured_adam_ok():
            uncaptured_step()
        with pytest.raises(UserWarning, match="capturable=True"):  # the same step outside: the real warning
            uncaptured_step()
        with pytest.raises(UserWarning, match="another"), uncaptured_adam_ok():
            warnings.warn("another warning", UserWarning, stacklevel=1)


def test_a_capturable_optimizer_gets_its_step_counts_on_the_parameters_device():
    """Capturable Adam reads its step counts inside the graph: they must sit on the parameters' device (the
    meta device stands in for a GPU here; the other direction, plain Adam's counts back on the host after a
    resume on a GPU, is tests/gpu's)."""
    params = [torch.nn.Parameter(torch.zeros(3, device="meta")) for _ in range(2)]
    opt = torch.optim.Adam(params, lr=0.01)
    for p in params:
        opt.state[p] = {"step": torch.tensor(7.0), "exp_avg": torch.zeros(3, device="meta")}
    place_optimizer_state(opt, capturable=True)
    assert all(s["step"].device.type == "meta" and s["step"].dtype == torch.float32 for s in opt.state.values())
    assert all(g["capturable"] for g in opt.param_groups)


def test_a_step_places_a_reloaded_optimizer_state_for_its_mode(monkeypatch):
    """TrainStep notices a replaced optimizer state (a backtrack or resume) by itself, in eager mode too,
    and places it before the next update."""
    import swarmctl.training.steps as steps

    placed = []
    real = steps.place_optimizer_state
    monkeypatch.setattr(steps, "place_optimizer_state", lambda opt, c: (placed.append(c), real(opt, c)))
    model, opt = _model_and_opt()
    step = TrainStep(model, opt, mog_loss, torch.device("cpu"))
    batches = _batches(4)
    step(batches[0])
    step(batches[1])
    assert placed == [False]  # at construction only: the first step's new Adam state is no reload
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))
    step(batches[2])
    assert placed == [False, False]
