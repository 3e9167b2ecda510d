"""The step modes `train --step auto` may pick on CUDA are proven here (training/modes.py): every bf16 mode a
task lists keeps the loss of the same trained weights within AMP_RTOL of float32's: the shipped model's, or
for MoG (which ships none) the run its campaign carries across jobs (campaigns/mog/last.pt, in parts)."""

from pathlib import Path

import pytest
import torch
from conftest import write_fake_mnist

from swarmctl import create_model
from swarmctl.config import DataConfig, TrainConfig
from swarmctl.data.clustering_generator import ClusteringParams
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.rundir import LAST
from swarmctl.tasks import get_task
from swarmctl.training.checkpoint import load_checkpoint
from swarmctl.training.loop import validation_loss
from swarmctl.training.modes import AMP_RTOL, MODES
from tools.campaigns import parts

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
PRETRAINED = REPO / "swarmctl" / "pretrained"
SHIPPED = {"clustering": "swarm-192-10-1-clustering.pt", "image": "swarm-image-256-10-1-mnist.pt"}
CARRIED = {"mog": parts.manifest_path(REPO / "campaigns" / "mog", LAST)}  # a campaign's run, in checked parts


def proof_weights(task_name: str, folder: Path) -> Path | None:
    """The trained checkpoint a task's bf16 modes are proven on: shipped, or joined from the parts its campaign
    committed (every part checked); None where the task has neither."""
    if task_name in SHIPPED:
        return PRETRAINED / SHIPPED[task_name]
    manifest = CARRIED.get(task_name)
    if manifest is None or not manifest.is_file():
        return None
    parts.join(manifest, folder / LAST)
    return folder / LAST


def _data(task: str, folder: Path) -> DataConfig:
    if task == "mog":
        return DataConfig()  # its validation tasks are drawn (seeded)
    if task == "clustering":
        generate_dataset(folder / "d.h5", ClusteringParams(n_tasks=400, val_fraction=0.5), seed=0)
        return DataConfig(path=str(folder / "d.h5"))
    write_fake_mnist(folder, n_train=40, n_test=200)
    return DataConfig(path=str(folder), dataset="mnist")


def same_weights_losses(task_name: str, device: torch.device, folder: Path) -> tuple[float, float]:
    """The validation loss of the task's proof weights in float32 and under bf16 autocast."""
    task = get_task(task_name)
    ckpt = load_checkpoint(proof_weights(task_name, folder))
    model = create_model(ckpt.model_config)
    model.load_state_dict(ckpt.model)
    model.to(device)
    data = task.prepare(TrainConfig(), _data(task_name, folder))
    batches = list(data.val_batches(0))
    full = validation_loss(model, batches, data.loss_fn, device, amp=False)
    half = validation_loss(model, batches, data.loss_fn, device, amp=True)
    return full, half


AMP_TASKS = sorted(name for name in (*SHIPPED, *(t for t, m in CARRIED.items() if m.is_file()))
                   if any(MODES[m].amp for m in get_task(name).proven_modes))


@pytest.mark.parametrize("task_name", AMP_TASKS)
def test_bf16_step_modes_keep_the_same_weights_loss_within_amp_rtol(task_name, tmp_path):
    torch.backends.cuda.matmul.allow_tf32 = True  # as training runs: TF32 is the float32 baseline there
    full, half = same_weights_losses(task_name, torch.device("cuda"), tmp_path)
    assert abs(half - full) <= AMP_RTOL * abs(full), (task_name, full, half)


def test_every_task_that_lists_a_bf16_mode_has_its_proof_here():
    from swarmctl.tasks import TASKS

    listed = {t.name for t in TASKS.values() if any(MODES[m].amp for m in t.proven_modes)}
    assert listed <= set(AMP_TASKS), f"a bf16 step mode without a proof: {sorted(listed - set(AMP_TASKS))}"
