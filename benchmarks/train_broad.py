"""Train a SWARM clustering model for real data on the broad prior (swarmctl.data.clustering_generator:
BroadParams), on the CPU: the shipped paper model (192-10-1) fine-tuned with 16 cluster slots.

    nice -n 19 python benchmarks/train_broad.py --minutes 60 --threads 2 [--name broad-cpu]

Every epoch draws fresh tasks (RandomState(10_000 + epoch)): ``--broad`` from the broad prior (N up to
``--n-max``: larger sets cost time on the CPU and the model runs any N) and ``--paper`` from the paper's
generator, so that it keeps what it knew. Each task is mapped to the training scale exactly as `swarmctl
cluster` maps a user's points (centred, one factor), so the model sees what it will be given. Validation:
200 fixed broad-prior tasks (seed 999). The run folder is runs/NAME, as `swarmctl train` writes one; ship it
with `--export`:

    python benchmarks/train_broad.py --export runs/broad-cpu/best.pt --record numbers.json

writes swarmctl/pretrained/swarm-192-10-1-clustering-broad-16slots.pt and its record (``default_for: ["cluster"]``:
`swarmctl cluster` uses it when no run is named; `eval` and `plot-entropy` keep the paper's model), the
record holding ``numbers.json`` (the benchmark's numbers).

With ``--count`` it trains the model with a count head (``swarm-count``: the same SWARM and a head that
predicts the number of clusters) on the wide prior (``WIDE_PRIOR``: overlap, unequal weights,
warped clusters, 30..1000 points) and the paper's tasks, starting from the shipped broad model's weights
(the head new), and ``--count --export`` ships it as swarmctl/pretrained/swarm-count-192-10-1-clustering-wide.pt,
the default for `swarmctl cluster` in place of the broad model:

    nice -n 10 python benchmarks/train_broad.py --count --minutes 75 --threads 1 --name count-cpu
    python benchmarks/train_broad.py --count --export runs/count-cpu/best.pt --record numbers.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from swarmctl.config import DataConfig, ModelConfig, TrainConfig, to_dict
from swarmctl.data.clustering_generator import (
    BROAD_MAX_CLUSTERS,
    WIDE_PRIOR,
    BroadParams,
    ClusteringParams,
    ClusteringTasks,
    draw_broad_task,
    generate_clustering,
)
from swarmctl.data.dataset import bucketed_batches
from swarmctl.files import atomic_write_text
from swarmctl.models.registry import complete_config, count_parameters, create_model, paper_code
from swarmctl.rundir import RunDir
from swarmctl.runs import load_model, run_lock, shipped_for
from swarmctl.tasks.clustering import COUNT_MODEL, clustering_loss
from swarmctl.tasks.point_clusters import standardization
from swarmctl.training.checkpoint import RunWriter
from swarmctl.training.loop import TrainingData, fit

TARGET_STD = ClusteringParams().point_std()
PRETRAINED = Path(__file__).resolve().parent.parent / "swarmctl" / "pretrained"
BROAD_MODEL = PRETRAINED / "swarm-192-10-1-clustering-broad-16slots.pt"
COUNT_FILE = "swarm-count-192-10-1-clustering-wide.pt"


def generate_broad(params: BroadParams, seed: int) -> ClusteringTasks:
    """``params.n_tasks`` tasks of the broad prior from ``RandomState(seed)``, as ragged tasks with
    ``BROAD_MAX_CLUSTERS`` slots for the means, covariances and weights (zero beyond each task's K)."""
    rs = np.random.RandomState(seed)
    n, slots = params.n_tasks, BROAD_MAX_CLUSTERS
    means, covs, weights = np.zeros((n, slots, 2)), np.zeros((n, slots, 2, 2)), np.zeros((n, slots))
    n_clusters, sizes = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    all_points, all_labels = [], []
    for t in range(n):
        pts, lab, mu, cov, w = draw_broad_task(params, rs)
        K = len(mu)
        means[t, :K], covs[t, :K], weights[t, :K], n_clusters[t], sizes[t] = mu, cov, w, K, len(pts)
        all_points.append(pts)
        all_labels.append(lab)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return ClusteringTasks(np.concatenate(all_points), np.concatenate(all_labels), offsets, n_clusters, means, covs,
                           weights)


def standardized(tasks: ClusteringTasks) -> ClusteringTasks:
    """Every task mapped as `swarmctl cluster` maps a user's points."""
    points = tasks.points.astype(np.float64).copy()
    for t in range(len(tasks)):
        sl = slice(tasks.offsets[t], tasks.offsets[t + 1])
        points[sl] = standardization(points[sl], TARGET_STD).apply(points[sl])
    return dataclasses.replace(tasks, points=points.astype(np.float32))


def widen(tasks: ClusteringTasks, slots: int) -> ClusteringTasks:
    pad = slots - tasks.means.shape[1]
    return dataclasses.replace(tasks, means=np.pad(tasks.means, ((0, 0), (0, pad), (0, 0))),
                               covs=np.pad(tasks.covs, ((0, 0), (0, pad), (0, 0), (0, 0))),
                               weights=np.pad(tasks.weights, ((0, 0), (0, pad))))


def widened(paper: dict[str, torch.Tensor], new: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The paper model's weights in a model with more cluster slots: the output layer's 10 slots copied,
    then the extra slots as copies of them, slightly perturbed and lowered."""
    for key, value in paper.items():
        if new[key].shape == value.shape:
            new[key] = value
        else:
            rows = value.shape[0]
            new[key][:rows] = value
            extra = new[key].shape[0] - rows
            src = value[torch.arange(extra) % rows]
            new[key][rows:] = src + 0.01 * torch.randn_like(src) if value.dim() == 2 else src - 1.0
    return new


def concat(a: ClusteringTasks, b: ClusteringTasks) -> ClusteringTasks:
    return ClusteringTasks(np.concatenate([a.points, b.points]), np.concatenate([a.labels, b.labels]),
                           np.concatenate([a.offsets, b.offsets[1:] + a.offsets[-1]]),
                           np.concatenate([a.n_clusters, b.n_clusters]), np.concatenate([a.means, b.means]),
                           np.concatenate([a.covs, b.covs]), np.concatenate([a.weights, b.weights]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--name", default="broad-cpu")
    ap.add_argument("--runs-dir", type=Path, default=Path("runs"))
    ap.add_argument("--broad", type=int, default=240, help="broad-prior tasks per epoch")
    ap.add_argument("--paper", type=int, default=80, help="paper-generator tasks per epoch")
    ap.add_argument("--n-max", type=int, default=None, help="the most points of a broad-prior task [default: 800; "
                    "with --count the wide prior's 1000]")
    ap.add_argument("--count", action="store_true", help="train the model with a count head on the wide prior")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init", type=Path, default=None,
                    help="continue from this 16-slot checkpoint (e.g. the shipped broad model) instead of widening the "
                         "paper's model; the epochs then draw new tasks (RandomState(10_000 + --first-epoch + epoch))")
    ap.add_argument("--first-epoch", type=int, default=0, help="offset of the epochs' task seeds (with --init: the "
                    "number of epochs the checkpoint has seen, so no task repeats)")
    ap.add_argument("--export", type=Path, default=None, help="ship this checkpoint instead of training")
    ap.add_argument("--record", type=Path, default=None, help="with --export: a JSON object added to the record")
    args = ap.parse_args()
    if args.export is not None:
        export(args.export, json.loads(args.record.read_text()) if args.record else {}, args.count)
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model_cfg = complete_config(ModelConfig(name=COUNT_MODEL if args.count else "swarm", dim_hidden=192, n_iter=10,
                                            n_layers=1, dim_out=BROAD_MAX_CLUSTERS))
    model = create_model(model_cfg)
    if args.count:  # the SWARM's weights from --init or the shipped broad model; the count head starts new
        start = load_model(args.init if args.init is not None else BROAD_MODEL)[0].state_dict()
        missing, unexpected = model.load_state_dict(start, strict=False)
        assert not unexpected and all(k.startswith("count.") for k in missing), (missing, unexpected)
    elif args.init is not None:
        model.load_state_dict(load_model(args.init)[0].state_dict())
    else:
        model.load_state_dict(widened(load_model(shipped_for("cluster"))[0].state_dict(), model.state_dict()))

    if args.count:
        broad = WIDE_PRIOR if args.n_max is None else dataclasses.replace(WIDE_PRIOR, n_max=args.n_max)
    else:
        broad = BroadParams(n_max=800 if args.n_max is None else args.n_max)
    slots = BROAD_MAX_CLUSTERS

    def draw(epoch: int, n_broad: int, n_paper: int) -> ClusteringTasks:
        epoch += args.first_epoch
        b = generate_broad(dataclasses.replace(broad, n_tasks=n_broad), 10_000 + epoch)
        if n_paper == 0:
            return standardized(b)
        p = generate_clustering(ClusteringParams(n_tasks=n_paper), 20_000 + epoch)
        return standardized(concat(b, widen(p, slots)))

    cache: dict[int, list] = {}

    def train(epoch: int):
        if epoch not in cache:
            cache.clear()
            cache[epoch] = bucketed_batches(draw(epoch, args.broad, args.paper), args.batch_size)
        return cache[epoch]

    val = bucketed_batches(standardized(generate_broad(dataclasses.replace(broad, n_tasks=200), 999)), 50)
    train_cfg = TrainConfig(lr=args.lr, batch_size=args.batch_size, minutes=args.minutes, device="cpu", seed=0)
    data_cfg = DataConfig(path=None)
    run_dir = args.runs_dir / args.name
    run_dir.mkdir(parents=True, exist_ok=False)
    config = {"model": to_dict(model_cfg), "train": to_dict(train_cfg), "data": to_dict(data_cfg),
              "run": {"name": args.name, "task": "clustering", "parameters": count_parameters(model),
                      "code": paper_code(model_cfg), "device": "cpu", "world_size": 1,
                      "recipe": f"benchmarks/train_broad.py {vars(args)}"}}
    with run_lock(run_dir):  # the run's writer holds its folder, as `swarmctl train` does
        atomic_write_text(RunDir(run_dir).config, json.dumps(config, indent=2) + "\n")
        res = fit(model, TrainingData(train=train, val=val, loss_fn=clustering_loss), train_cfg,
                  RunWriter(run_dir, config, "clustering"), device=torch.device("cpu"))
    print(res)


def export(checkpoint: Path, extra: dict, count: bool = False) -> None:
    """Ship ``checkpoint`` as the default model of `swarmctl cluster` with its record; with ``count`` (the model with a
    count head) under its own name, the broad model's record then losing its ``default_for``."""
    import platform

    from tools.campaigns.shipping import export_weights

    dest = PRETRAINED / (COUNT_FILE if count else BROAD_MODEL.name)
    config = json.loads(RunDir(checkpoint.parent).config.read_text())
    metrics = [json.loads(line) for line in RunDir(checkpoint.parent).metrics.read_text().splitlines()]
    dataset = ("wide prior (swarmctl.data.clustering_generator.WIDE_PRIOR: overlap, unequal weights, warped "
               "clusters, 1..16 clusters, 30..1000 points)" if count else
               "broad prior (swarmctl.data.clustering_generator.BroadParams, N up to 800)")
    record = {"dataset": f"{dataset} and the paper's generator, drawn fresh every epoch",
              "trained_on": f"2-core {platform.machine()} CPU shared with other jobs, torch {torch.__version__}, "
                            "nice 19 (threads and any earlier checkpoint it continued from: see command)",
              "epochs": len(metrics), "command": config["run"].get("recipe", "benchmarks/train_broad.py"),
              "default_for": ["cluster"], **extra}
    export_weights(checkpoint, dest, data_path=None, record=record)
    print(f"wrote {dest} and {dest.with_suffix('.json')}")
    if count:  # one default for `cluster`: the new model
        old = BROAD_MODEL.with_suffix(".json")
        broad = json.loads(old.read_text())
        if broad.pop("default_for", None) is not None:
            atomic_write_text(old, json.dumps(broad, indent=2) + "\n")
            print(f"{old.name} is no longer the default for cluster")


if __name__ == "__main__":
    main()
