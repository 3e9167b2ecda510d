"""The training step helper: on the CPU a step is the plain eager step whatever is asked for (CUDA graphs
are guarded to CUDA); the graphed path itself is checked against eager steps in tests/gpu."""

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
