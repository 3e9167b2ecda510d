"""Put what a device session returned (session.py's OUT) into the repository: the one step after a card.

    python benchmarks/gpu/commit_session.py RETURNED [--campaigns campaigns] [--pretrained swarmctl/pretrained]
    make campaign-commit FROM=RETURNED        # the same, then git add + commit

For each campaign archive NAME.tgz: its progress.json replaces campaigns/NAME/progress.json; the image
campaign's NAME-last.pt and NAME-best.pt become campaigns/NAME/last.pt and best.pt (with its config,
metrics, evaluation, curves and samples beside them); finished clustering and MoG runs go to
campaigns/NAME/runs/ (config, metrics, evaluation; SWARM's weights). A first session's step timings go
to campaigns/timing.json, and every session adds a line to campaigns/sessions.jsonl.

The shipped model of the same model, code and data in swarmctl/pretrained/ is replaced (weights only, as
shipped models are, by swarmctl.runs.export_weights) when the campaign's recorded evaluation beats the one
recorded in its .json; the .json is rewritten, and the script says which row of the shipped models'
README.md to update by hand.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE_FILES = ("config.json", "metrics.jsonl", "eval-test.json", "curves.png", "samples.png")


def _copy_tree(src: Path, dest: Path) -> None:
    for path in src.rglob("*"):
        if path.is_file():
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def _shipped(pretrained: Path, model: str, code: str, data: str) -> Path | None:
    """The .json of the shipped model with this model, code and data (``data``: a dataset name or 'clustering')."""
    for path in sorted(pretrained.glob("*.json")):
        info = json.loads(path.read_text())
        if info.get("model") == model and info.get("code") == code and data in (info.get("dataset"), info.get("task")):
            return path
    return None


def _replace_shipped(info_path: Path, weights_from: Path, new_eval: dict, metric: str, source: dict) -> str | None:
    """Replace the shipped model when ``new_eval[metric]`` is lower than its recorded one: its weights
    (without optimizer state) and its record, written by swarmctl's own export."""
    info = json.loads(info_path.read_text())
    old = info.get("eval", {}).get(metric)
    new = new_eval.get(metric)
    if new is None or (old is not None and new >= old):
        return None
    sys.path.insert(0, str(REPO))
    from swarmctl.runs import export_weights

    keep = {k: info[k] for k in ("paper",) if k in info}
    scored = {k: v for k, v in new_eval.items() if k != "checkpoint"}  # a path on the device machine
    export_weights(weights_from, info_path.with_name(info["file"]), record={**keep, **source, "eval": scored})
    return f"{info['file']}: {metric} {old} -> {new}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("returned", type=Path, help="the folder a session's files came back to")
    ap.add_argument("--campaigns", type=Path, default=REPO / "campaigns")
    ap.add_argument("--pretrained", type=Path, default=REPO / "swarmctl" / "pretrained")
    a = ap.parse_args()
    returned, root = a.returned, a.campaigns
    session_path = returned / "session.json"
    if not session_path.is_file():
        print(f"{returned}: no session.json; pass the folder session.py wrote (its OUT)", file=sys.stderr)
        return 1
    session = json.loads(session_path.read_text())
    changed, replaced = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for archive in sorted(returned.glob("*.tgz")):
            name = archive.name[: -len(".tgz")]
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            src, dest = Path(tmp) / name, root / name
            dest.mkdir(parents=True, exist_ok=True)
            if (src / "progress.json").is_file():
                shutil.copy2(src / "progress.json", dest / "progress.json")
            if (src / "runs").is_dir():
                _copy_tree(src / "runs", dest / "runs")
            for file in IMAGE_FILES:
                if (src / file).is_file():
                    shutil.copy2(src / file, dest / file)
            for pt in ("last.pt", "best.pt"):
                if (returned / f"{name}-{pt}").is_file():
                    shutil.copy2(returned / f"{name}-{pt}", dest / pt)
            changed.append(name)
            progress = json.loads((dest / "progress.json").read_text()) if (dest / "progress.json").is_file() else {}
            last = (progress.get("sessions") or [{}])[-1]
            source = {"trained_on": f"{session.get('card', '?')}, campaign {name} (campaigns/{name})",
                      "net_minutes": progress.get("net_minutes"), "epochs": progress.get("epochs"),
                      "command": "benchmarks/gpu/session.py (the campaign; see campaigns/README.md)",
                      "session": last.get("date")}
            if (dest / "best.pt").is_file() and (dest / "eval-test.json").is_file():  # an image campaign
                config = json.loads((dest / "config.json").read_text())
                shipped = _shipped(a.pretrained, config["model"]["name"], config["run"]["code"], name)
                if shipped:
                    scored = json.loads((dest / "eval-test.json").read_text())
                    what = _replace_shipped(shipped, dest / "best.pt", scored, "bits_per_dim", source)
                    replaced += [what] if what else []
            for run in sorted((dest / "runs").glob("*/eval-val.json")) if name == "clustering" else ():
                config = json.loads((run.parent / "config.json").read_text())
                shipped = _shipped(a.pretrained, config["model"]["name"], config["run"]["code"], "clustering")
                if shipped and (run.parent / "weights.pt").is_file():
                    source = {**source, "net_minutes": None, "epochs": None, "run": run.parent.name}
                    what = _replace_shipped(shipped, run.parent / "weights.pt", json.loads(run.read_text()), "loss",
                                            source)
                    replaced += [what] if what else []
    if session.get("timing_measured") and session.get("timing"):
        (root / "timing.json").write_text(json.dumps(session["timing"], indent=2) + "\n")
    with open(root / "sessions.jsonl", "a") as fh:
        fh.write(json.dumps({k: session.get(k) for k in ("card", "wall", "plan", "flags", "seconds",
                                                          "gpu_tests_exit")}) + "\n")
    print(f"campaigns updated: {', '.join(changed) or 'none'}")
    for line in replaced:
        print(f"shipped model replaced: {line} (update its row in {a.pretrained / 'README.md'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
