"""Clustering points with a trained SWARM model, refined by EM: the one entry point (docs/cluster.md).

- :class:`SwarmClustering`: the Python API, in scikit-learn's conventions (``fit``, ``predict``,
  ``predict_proba``, ``fit_predict``, ``labels_``, ``n_clusters_``, ``get_params``/``set_params``), without
  scikit-learn as a dependency;
- :func:`cluster_file`: what `swarmctl cluster` runs (a file of points in, a CSV and a figure out).

Where the parts live, from the top: this module; ``studies/clusters.py`` (a file or an array of points
through the model and EM, the warnings, the one wording of which start won); ``tasks/mixtures.py`` (EM,
BIC, the search for K, the shapes of a fit); ``tasks/point_clusters.py`` (the map to the training scale, a
model's logits to clusters); ``data/points.py`` (point files in, the CSV out).
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from swarmctl.errors import SwarmctlWarning
from swarmctl.runs import open_run
from swarmctl.studies.clusters import (
    ClusterResult,
    cluster_file,
    cluster_values,
    default_model,
    made_by,
    start_of,
    values_warnings,
)
from swarmctl.tasks.mixtures import REG, EMResult, Mixture, e_step, m_step

__all__ = ["ClusterResult", "EMResult", "SwarmClustering", "cluster_file"]


@functools.lru_cache(maxsize=4)
def _open(model: str | None, runs_dir: str, device: str):
    """The run ``model`` (None: the shipped clustering model), opened once per process and device."""
    return open_run(default_model() if model is None else model, Path(runs_dir), device, study="cluster",
                    needs_data=False)


class SwarmClustering:
    """Cluster points (N, D) with a trained SWARM model and EM, as `swarmctl cluster` does.

    Parameters (stored as given; checked when :meth:`fit` runs, as scikit-learn's estimators do):

    - ``n_clusters``: the number of clusters if you know it (EM at exactly that many from the model's
      answer), or None to settle it by BIC (the default);
    - ``model``: a run name, run folder or checkpoint file (None: the shipped clustering model);
    - ``refine``: EM after the model's pass (False: the model's clusters as they are);
    - ``standardize``, ``per_coordinate``: the map to the training scale (docs/cluster.md);
    - ``device``: ``"cpu"``, ``"cuda"`` or ``"auto"``; ``runs_dir``: where run names are looked up.

    After :meth:`fit`: ``labels_`` (N,) the cluster of each point (0 = the largest), ``n_clusters_``,
    ``probabilities_`` (N, n_clusters_) each point's probability of each cluster (None with ``refine=False``),
    ``model_clusters_`` (the clusters the model proposed before EM), ``k_probabilities_`` (a model with a count
    head: its probabilities of 1, 2, ... clusters, the last that many or more; else None), ``weights_``, ``means_``,
    ``covariances_`` (the Gaussians that :meth:`predict` uses, in your units),
    ``made_by_`` (what produced the clusters, the summary line's words), ``start_`` (which start won:
    "the model's start" or "a fresh k-means++ start"; "" unrefined) and ``warnings_`` (each also issued
    as a :class:`~swarmctl.errors.SwarmctlWarning`).
    """

    def __init__(self, n_clusters: int | None = None, *, model: str | Path | None = None, refine: bool = True,
                 standardize: bool = True, per_coordinate: bool = False, device: str = "cpu",
                 runs_dir: str | Path = "runs") -> None:
        self.n_clusters = n_clusters
        self.model = model
        self.refine = refine
        self.standardize = standardize
        self.per_coordinate = per_coordinate
        self.device = device
        self.runs_dir = runs_dir

    _PARAMS = ("n_clusters", "model", "refine", "standardize", "per_coordinate", "device", "runs_dir")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments as stored (``deep`` is scikit-learn's; nothing here nests)."""
        return {name: getattr(self, name) for name in self._PARAMS}

    def set_params(self, **params: Any) -> SwarmClustering:
        """Set constructor arguments by name; an unknown name is refused (ValueError), as in scikit-learn."""
        for name, value in params.items():
            if name not in self._PARAMS:
                raise ValueError(f"invalid parameter {name!r} for SwarmClustering; valid ones: "
                                 f"{', '.join(self._PARAMS)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        changed = [f"{k}={v!r}" for k, v in self.get_params().items()
                   if v != type(self)().get_params()[k]]
        return f"SwarmClustering({', '.join(changed)})"

    def fit(self, X: Any, y: Any = None) -> SwarmClustering:
        """Cluster the points ``X`` (N, D); ``y`` is ignored (scikit-learn's signature)."""
        run = _open(None if self.model is None else str(self.model), str(self.runs_dir), self.device)
        x = _points(X, run.model_cfg.dim_in)
        found, model_k, fit = cluster_values(run.task, run.model, x, run.device, standardize=self.standardize,
                                             per_coordinate=self.per_coordinate, refine=self.refine,
                                             clusters=self.n_clusters)
        K = len(found.sizes)
        if fit is not None:
            counts = np.bincount(fit.resp.argmax(axis=1), minlength=len(fit.mixture))
            order = np.argsort(-counts, kind="stable")[:K]  # the component of each cluster, as numbered
            mix = Mixture(fit.mixture.weights[order], fit.mixture.means[order], fit.mixture.covs[order])
        else:  # the model's clusters: one Gaussian fitted to each, to predict with
            reg = REG * max(float(np.var(x, axis=0).mean()), np.finfo(float).tiny)
            mix = m_step(x, np.eye(K)[found.cluster], reg)
        self.labels_ = found.cluster
        self.n_clusters_ = K
        self.probabilities_ = found.probabilities
        self.weights_ = mix.weights / mix.weights.sum()
        self.means_, self.covariances_ = mix.means, mix.covs
        self.model_clusters_ = model_k
        counts = found.counts if found.counts is not None else (np.array(fit.counts) if fit and fit.counts else None)
        self.k_probabilities_ = counts
        self.start_ = start_of(self.refine, fit)
        self.made_by_ = made_by(run.label, self.refine, fit, self.n_clusters, K)
        self.warnings_ = values_warnings(run.task, run.model_cfg, x, found, model_k, fit,
                                         standardize=self.standardize, refine=self.refine, clusters=self.n_clusters)
        for line in self.warnings_:
            warnings.warn(line, SwarmctlWarning, stacklevel=2)
        return self

    def fit_predict(self, X: Any, y: Any = None) -> np.ndarray:
        """:meth:`fit`, then ``labels_``."""
        return self.fit(X).labels_

    def predict_proba(self, X: Any) -> np.ndarray:
        """Each point's probability (N, n_clusters_) of each cluster found, under the fitted Gaussians."""
        if not hasattr(self, "means_"):
            raise ValueError("this SwarmClustering is not fitted yet: call fit(X) first")
        x = _points(X, self.means_.shape[1])
        resp = e_step(x, Mixture(self.weights_, self.means_, self.covariances_))[0]
        total = resp.sum(axis=1, keepdims=True)
        return np.where(total > 0, resp / np.where(total > 0, total, 1.0), 1.0 / resp.shape[1])

    def predict(self, X: Any) -> np.ndarray:
        """The most probable cluster (N,) of each point (:meth:`predict_proba`)."""
        return self.predict_proba(X).argmax(axis=1)


def _points(X: Any, dim: int) -> np.ndarray:
    """``X`` as a finite float64 array (N, dim), N >= 1, or a ValueError that says what is wrong."""
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != dim or not len(x):
        raise ValueError(f"expected points of shape (N, {dim}) with N >= 1, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{int((~np.isfinite(x)).any(axis=1).sum())} of the {len(x)} points hold NaN or infinite "
                         "values; drop or fill them first")
    return x
