"""The GPU campaigns: training that continues the paper's experiments from one job with a wall-time limit
to the next (campaigns/README.md). :mod:`.plan` decides where a job's minutes go, :mod:`.runners` continue
each campaign, :mod:`.job` is the job (`python -m tools.campaigns run`), :mod:`.processes` its commands and
signals, :mod:`.commit` puts what a job returned into the repository (`python -m tools.campaigns commit`), and
:mod:`.status` shows where each campaign stands (`python -m tools.campaigns status`).

This module holds only the campaigns' names (no PyTorch), so that the command's help reads them.
"""

IMAGES = ("mnist", "fashion-mnist")  # the image campaigns (a dataset each)
NAMES = ("clustering", "mog", *IMAGES)  # every campaign
# what a job's cold-compile probe may measure: a task's step, or (+amp) its bf16 autocast step
PROBES = ("mog", "image", "clustering", "mog+amp", "image+amp", "clustering+amp", "none")

DEVICES = ("cuda", "cpu")  # a job on the card (every campaign), or Table 2 on this machine's CPU

NO_CUDA = "cpu (no CUDA)"  # a job's card where it found no CUDA (only a --smoke job trains there)

__all__ = ["DEVICES", "IMAGES", "NAMES", "NO_CUDA", "PROBES"]
