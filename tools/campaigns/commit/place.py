"""The commit's last step: everything checked, the files go into the campaigns folder and the shipped
models all at once (``files.staged_outputs``: written beside their targets, published together at the end;
``all_or_none``: every replaced or removed file put back if publishing fails), under a lock on the campaigns
folder, with the session recorded last in campaigns/sessions.jsonl."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from swarmctl.errors import SwarmctlError, describe_os_error
from swarmctl.files import (
    atomic_write,
    atomic_write_text,
    holding,
    shipped_folder,
    staged_outputs,
)
from swarmctl.rundir import LAST
from tools.campaigns.commit.reevaluate import CommitOptions, Replacement, _shipped_data_path, consider, find_shipped
from tools.campaigns.commit.unpack import (
    Refused,
    Returned,
    _copy_returned,
    _one_line,
    _untrusted,
    card_sessions,
    check_session,
    committed_sessions,
    is_smoke,
    scan_returned,
    unpack,
)
from tools.campaigns.commit.validate import Campaign, _check_destination, check_campaign
from tools.campaigns.files import all_or_none, copy_file, remove_file
from tools.campaigns.parts import joined_bytes, manifest_path, read_manifest
from tools.campaigns.plan import TIMING
from tools.campaigns.runners import MOG_RETURNED
from tools.campaigns.shipping import export_weights

SESSIONS = "sessions.jsonl"  # one line per committed job, in the campaigns folder


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the campaigns folder itself (no lock file): one commit at a time."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"another commit is writing {root}; wait for it to end") from None
        yield
    finally:
        os.close(fd)


def _staging(top: Path) -> Path:
    return Path(tempfile.mkdtemp(prefix=f".{top.name}-commit-", dir=top.parent))


def commit(returned: Path, root: Path, pretrained: Path | None, opts: CommitOptions,
           say: Callable[[str], None] = lambda line: None) -> list[str]:
    """Check everything ``returned`` holds, then put it into ``root`` (campaigns/) and ``pretrained`` (None:
    the folder of shipped models) all at once. Returns the lines to print (``say`` tells what takes long, as
    it starts); raises Refused, saying that nothing changed, for anything it cannot trust or write."""
    try:
        return _commit(returned, root, pretrained or shipped_folder(), opts, say)
    except Refused as exc:
        raise Refused(f"refused, nothing changed: {exc}") from None
    except SwarmctlError as exc:
        raise Refused(f"refused, nothing changed: {_one_line(exc)}") from None
    except OSError as exc:
        raise Refused(f"refused, nothing changed: {describe_os_error(exc)}") from None


def _commit(returned: Path, root: Path, pretrained: Path, opts: CommitOptions,
            say: Callable[[str], None]) -> list[str]:
    found = scan_returned(returned)
    session = check_session(found.session_bytes)
    if not pretrained.is_dir():
        raise Refused(f"{pretrained} is not a folder; pass the folder of shipped models with `pretrained` (or "
                      "leave it out)")
    digest = hashlib.sha256(found.session_bytes).hexdigest()
    planned = {step["campaign"] for step in session.get("plan", [])}
    for name in found.archives:
        if "plan" in session and name not in planned:
            raise Refused(f"{name}.tgz came back, but session.json's plan has no campaign {name!r}")
    if not root.is_dir():
        raise Refused(f"{root} is not a folder; pass the repository's campaigns folder with `campaigns`")
    with contextlib.ExitStack() as stack:
        stack.enter_context(_locked(root))
        if digest in committed_sessions(root):
            raise Refused(f"the session in {returned} (session.json sha256 {digest[:12]}) is already committed in "
                          f"{root / SESSIONS}")
        if is_smoke(session) and card_sessions(root):
            raise Refused(f"{returned} is a --smoke job's (tiny models): committed into {root}, which holds real "
                          "jobs, it would replace their step timings and carried runs; commit it into a trial "
                          "folder that records no real job (`mkdir DIR`, then `campaigns` DIR) or run the job "
                          "without --smoke")
        stage = _staging(root)
        stack.callback(shutil.rmtree, stage, ignore_errors=True)
        base = {"trained_on": session["card"], "command": "python -m tools.campaigns run (see campaigns/README.md)",
                "session_sha256": digest}
        try:
            campaigns = _checked_campaigns(found, root, stage, base)
            notes = [n for c in campaigns for n in c.notes]
            replacements = _replacements(campaigns, pretrained, opts, notes, say)
        except (Refused, SwarmctlError) as exc:  # a message names a returned file, not where it was unpacked
            raise Refused(_returned_names(str(exc) if isinstance(exc, Refused) else _one_line(exc), stage)) from None
        lines = _place(root, pretrained, campaigns, replacements, session, digest)
    changed = [c.name for c in campaigns if c.files]
    return [f"campaigns updated: {', '.join(changed) or 'none'}", *notes, *lines,
            f"session {digest[:12]} recorded in {root / SESSIONS}"]


def _returned_names(text: str, stage: Path) -> str:
    """``text`` with the paths of the commit's temporary folder (``stage``) as the returned files' own names:
    an archive's member (``clustering/runs/RUN/config.json``) or a returned file (``mnist-last.pt``)."""
    for folder in (stage / "unpacked", stage / "returned", stage):
        text = text.replace(f"{folder}{os.sep}", "")
    return text


def _checked_campaigns(found: Returned, root: Path, stage: Path, base: dict[str, Any]) -> list[Campaign]:
    """Each returned archive unpacked into ``stage`` (and its checkpoints copied there), checked in full."""
    unpacked, copies = stage / "unpacked", stage / "returned"
    unpacked.mkdir()
    copies.mkdir()
    campaigns = []
    for name in sorted(found.archives):
        with _untrusted(f"{name}.tgz"):
            unpack(found.archives[name], name, unpacked)
            pts = {}
            for which, path in found.checkpoints.get(name, {}).items():
                pts[which] = copies / f"{name}-{which}"
                _copy_returned(path, pts[which], path.name)
            if name == "mog":
                pts = _joined_mog(found, unpacked / name, copies)
            campaigns.append(check_campaign(name, unpacked, pts, root, base))
    if found.parts and not manifest_path(unpacked / "mog", MOG_RETURNED).is_file():
        mog = next((c for c in campaigns if c.name == "mog"), None)
        if mog is None:
            campaigns.append(mog := Campaign("mog"))
        mog.notes.append(f"{', '.join(sorted(found.parts))} came back without their manifest (the job stopped "
                         "before packing mog.tgz): not taken")
    return campaigns


def _joined_mog(found: Returned, folder: Path, copies: Path) -> dict[str, Path]:
    """MoG's last.pt from the returned parts, each copied beside the manifest mog.tgz brought (regular files
    only) and checked against it (names, sizes, SHA-256 of each part and of the whole); {} when none came
    back. A manifest without a part, or a part it does not list: refused; parts without their manifest (a
    job stopped while splitting or packing) are not taken."""
    manifest = manifest_path(folder, MOG_RETURNED)
    if not manifest.is_file():  # no part is taken without its manifest (written last: nothing half-split)
        return {}
    listed = {file for file, _, _ in read_manifest(manifest).parts}
    extra = sorted(set(found.parts) - listed)
    if extra:
        raise Refused(f"{extra[0]} came back, but {manifest.name} does not list it")
    for file in sorted(listed & set(found.parts)):
        _copy_returned(found.parts[file], folder / file, file)
    try:
        data = joined_bytes(manifest)
    except SwarmctlError as exc:
        raise Refused(_one_line(exc).replace(str(folder) + "/", "")) from None
    joined = copies / MOG_RETURNED
    atomic_write(joined, lambda fh: fh.write(data))
    return {LAST: joined}


def _replacements(campaigns: list[Campaign], pretrained: Path, opts: CommitOptions, notes: list[str],
                  say: Callable[[str], None]) -> dict[Path, Replacement]:
    """The shipped models to replace (by their record), each by the best candidate for it."""
    replacements: dict[Path, Replacement] = {}
    considered: set[Path] = set()
    for cand in sorted((c for camp in campaigns for c in camp.candidates), key=lambda c: c.scored[c.metric]):
        with _untrusted(f"the re-evaluation of {cand.label}"):
            found_record = find_shipped(pretrained, cand)
            if found_record is None or found_record[0] in considered:
                continue  # only the best candidate for each shipped model (they come best first)
            considered.add(found_record[0])
            chosen = consider(cand, pretrained, opts, notes, say)
        if chosen is not None:
            replacements[chosen.record_path] = chosen
    return replacements


def _place(root: Path, pretrained: Path, campaigns: list[Campaign], replacements: dict[Path, Replacement],
           session: dict[str, Any], digest: str) -> list[str]:
    """Every file into place at once (one staged group), the session's line in sessions.jsonl last: the
    mark that the session is in. Returns the lines saying which shipped models were replaced."""
    files = [(root / camp.name / rel, src) for camp in campaigns for rel, src in sorted(camp.files.items())]
    timing = session.get("timing") if session.get("timing_measured") else None
    shipped = [(pretrained / rep.record["file"], rep) for rep in replacements.values()]
    log = root / SESSIONS
    targets = [dest for dest, _ in files] + [root / TIMING] * bool(timing) + [log]
    targets += [p for dest, _ in shipped for p in (dest, dest.with_suffix(".json"))]
    for dest in targets:
        _check_destination(dest, pretrained if dest.parent == pretrained else root)
    old_log = log.read_bytes() if log.is_file() else b""
    entry = {k: session.get(k) for k in ("card", "wall", "plan", "flags", "seconds", "gpu_tests_exit")}
    entry["smoke"] = is_smoke(session)
    lines = []
    with contextlib.ExitStack() as held:
        for folder in sorted({dest.parent for dest in targets}):
            held.enter_context(holding(folder))  # the commit is the one writer of these folders
        with all_or_none(targets), staged_outputs():
            for dest, src in files:
                if src is None:  # a file that did not come back described the old checkpoint
                    remove_file(dest)
                else:
                    copy_file(src, dest)
            if timing:
                atomic_write_text(root / TIMING, json.dumps(timing, indent=2) + "\n")
            for dest, rep in shipped:
                lines.append(_ship(rep, dest))
            line = (json.dumps({**entry, "session_sha256": digest}) + "\n").encode()
            atomic_write(log, lambda fh: fh.write(old_log + line))
    return lines


def _ship(rep: Replacement, dest: Path) -> str:
    """The candidate of ``rep`` written as the shipped model ``dest`` (staged); the line saying so."""
    cand = rep.cand
    keep = {k: rep.record[k] for k in ("paper",) if k in rep.record}
    scored = {k: v for k, v in cand.scored.items() if k != "checkpoint"}  # a path on the device machine
    export_weights(cand.weights, dest, data_path=_shipped_data_path(rep.record, cand),
                   record={**keep, **cand.source, "eval": scored, "commit_check": rep.check.record()})
    other = "" if rep.same_data else ", on other data"
    return (f"shipped model replaced: {dest.name}: {cand.metric} {rep.old}{other} -> {cand.scored[cand.metric]} "
            f"({cand.label}; re-evaluated here on {rep.check.items} of {rep.check.of} {rep.check.split} items); "
            f"update its row in {dest.parent / 'README.md'}")
