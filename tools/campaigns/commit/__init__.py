"""`python -m tools.campaigns commit`: put what a campaign job returned (its OUT) into the repository, trusting
none of it. Four steps, one module each: :mod:`.unpack` (the returned files, read without trust),
:mod:`.validate` (every campaign checked against the committed one), :mod:`.reevaluate` (whether a
candidate replaces a shipped model) and :mod:`.place` (everything into place at once).

    python -m tools.campaigns commit RETURNED [--campaigns campaigns] [--pretrained swarmctl/pretrained]
        [--data-dir DIR] [--clustering-data FILE] [--subset N] [--keep-shipped]
    make campaign-commit FROM=RETURNED [COMMIT_OPTS="--data-dir DIR"]   # the same, then git add + commit

What goes where: NAME.tgz's progress.json becomes campaigns/NAME/progress.json; MoG's mog-last.pt.partK
(listed, with their sizes and SHA-256, by mog/mog-last.pt.parts.json in mog.tgz) are joined, checked like an
image campaign's last.pt (it must continue the committed one, or start a new run once the committed one
finished the schedule) and written as campaigns/mog/last.pt.partK and last.pt.parts.json (in the parts it
came back in, so the repository holds no file over a job's limit), beside the carried run's files in
campaigns/mog/runs/RUN/; an image campaign's
NAME-last.pt and NAME-best.pt become campaigns/NAME/last.pt and best.pt, with config.json, metrics.jsonl,
eval-test.json, curves.png and samples.png beside them (a metrics, evaluation, curves or samples file that
did not come back is removed: it described the old checkpoint); finished clustering and MoG runs go to
campaigns/NAME/runs/RUN/ (config, metrics, evaluation, curves; SWARM's weights.pt). A session that
measured step timings writes campaigns/timing.json, and every session adds a line to
campaigns/sessions.jsonl holding the SHA-256 of its session.json: a session already recorded is refused, and
so is a ``--smoke`` job's (tiny models, a CPU's timings) into a campaigns folder that records a real job.

Everything is checked before anything changes:
- the returned folder: session.json, NAME.tgz, NAME-{last,best}.pt and mog-last.pt.partK are regular files,
  never links; NAME is one of the campaigns (checkpoints: an image campaign's, with its archive; parts: MoG's,
  each listed by the manifest in mog.tgz, none missing, each of its size and SHA-256, the whole of its
  SHA-256; parts without their manifest, left by a job stopped while splitting, are not taken); other files
  (logs.tgz, logs) are not read;
- each archive: a gzip tar of regular files and folders only, every member inside NAME/, relative, without
  '.', '..', control characters or duplicates, within size limits; only the files named above are taken;
- every JSON file: parsed strictly (no NaN or Infinity), of the shape the job writes and reads, numbers
  finite and in range; the returned progress.json continues the committed one (its sessions and finished
  runs begin with the committed ones) and agrees with the evaluations returned beside it;
- every checkpoint: loaded with swarmctl's load_checkpoint (digest, state, finite weights, config), of the
  campaign's task (and dataset), of the run its config.json describes, its weights loaded with strict=True
  into the model that config.json builds; last.pt has its Adam state (loaded into Adam) and continues the
  committed last.pt.

Shipped models (swarmctl/pretrained/). A candidate (an image campaign's best.pt, a finished clustering run's
weights.pt) meets the record of the same model and code (and dataset and model config where the record holds
them). It replaces that shipped model only when
 1. its returned number beats the recorded one (when the record's data checksum differs from the run's, the
    numbers are on other data and this step is skipped; 3 is then required);
 2. the commit's own evaluation of it, on the CPU, on a fixed subset of the split the number is on (the
    first --subset items of a seed-0 permutation: by default all 1,000 tasks of the clustering validation
    split, 500 of the 10,000 test images) agrees with the returned number: within 4 standard errors of the
    subset's own per-item losses, with the finite-population correction (the whole split leaves only a
    0.1 % allowance for rounding; TF32 on the card changes these losses in the fifth decimal,
    benchmarks/RESULTS.md);
 3. on the same items it scores lower than the shipped weights (when the shipped .pt exists; a record
    without its weights has only its number, and one of other data without its weights stays).
A candidate that fails 2 reports a false number: the whole commit is refused. One that fails 3 is committed
to its campaign and the shipped model stays. The data for 2 must be the data the run was trained on (the
same content checksum): clustering, --clustering-data FILE, else the file the run's config names (absolute,
or relative to the repository's root), else the clustering task's default file, data/clustering-seed0.h5
(`swarmctl gen-data --seed 0`, about 30 s); images, --data-dir DIR, else the run's data folder, else the one
data folder, data/ (torchvision's layout: data/MNIST/raw/). When none is there the commit is refused with
one line saying what to provide; --keep-shipped commits the session without re-evaluating or replacing any
shipped model.

All or nothing: the returned files are unpacked into a temporary folder beside campaigns/ and checked
there; then every file is written beside its target and all are published together (``files.staged_outputs``),
and a failure on the way puts every replaced or removed file back (``tools/campaigns/files.py:all_or_none``). A
refusal is one line on stderr and exit 1, and leaves campaigns/ and the shipped models as they were.
"""

from tools.campaigns.commit.place import commit
from tools.campaigns.commit.reevaluate import SUBSET, CommitOptions
from tools.campaigns.commit.unpack import Refused

__all__ = ["SUBSET", "CommitOptions", "Refused", "commit"]
