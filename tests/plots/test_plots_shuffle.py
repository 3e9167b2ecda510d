"""The shuffle-variance figure: its title fits inside the saved figure."""

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from swarmctl.plots.shuffle import plot_shuffle_variance
from swarmctl.studies.results import ShuffleVarianceResult


def _result(label, n_tasks=100, n_shuffles=1000):
    rng = np.random.default_rng(0)
    return ShuffleVarianceResult(label=label, task_index=np.arange(n_tasks), sizes=np.arange(100, 100 + n_tasks),
                                 mean=np.ones(n_tasks), std=rng.uniform(0.01, 0.5, n_tasks), n_shuffles=n_shuffles)


@pytest.mark.parametrize("runs", [1, 3])
def test_the_title_fits_inside_the_figure(runs):
    fig = plot_shuffle_variance([_result(f"lstm (128-3) #{k}", n_shuffles=10_000) for k in range(runs)])
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # the layout as saved
    title, page = fig.axes[0].title.get_window_extent(renderer), fig.bbox
    assert page.x0 <= title.x0 and title.x1 <= page.x1, (title, page)
    assert "10,000" in fig.axes[0].get_title() and "100 tasks" in fig.axes[0].get_title()
