"""Import rules of the house style that a test can hold: figures and configs load without torch."""

import subprocess
import sys
from pathlib import Path

import swarmctl


def test_plots_and_results_import_without_torch():
    code = ("import sys\n"
            "import swarmctl.plots.curves, swarmctl.plots.entropy, swarmctl.plots.frontier, swarmctl.plots.samples\n"
            "import swarmctl.plots.shuffle, swarmctl.studies.report, swarmctl.studies.results\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_lazy_top_level_names():
    assert swarmctl.create_model(swarmctl.ModelConfig(name="set-linear")).symmetry == "equivariant"
    assert "swarm" in swarmctl.list_models()


# Imports flow one way: a module imports only from its own folder and from folders below it. Within
# the levels of the house style (cli > studies, runs > tasks, training > models, data > layers) the
# order is fixed too, so no two folders import each other. cluster.py, the clustering feature's entry point
# (its Python API), sits on studies, under plots and cli. The base modules sit under everything; the test
# helpers (testing.py) sit on top: they may use the library, which never imports them.
LEVELS = ["layers", "data", "models", "training", "tasks", "runs", "studies", "cluster", "plots", "cli", "__main__",
          "testing"]
BASE = {"__init__", "config", "errors", "files", "devices", "rundir", "catalog", "signals", "threads"}


def _level(module: str) -> int:
    """swarmctl.a.b -> index of ``a`` in LEVELS; -1 for a base module."""
    top = module.split(".")[1] if "." in module else "__init__"
    return -1 if top in BASE else LEVELS.index(top)


def _imports(path, root):
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("swarmctl"):
            if node.module != "swarmctl":
                yield node.module
            else:  # from swarmctl import runs (a module) or __version__ (a name of the package)
                for alias in node.names:
                    is_module = (root / f"{alias.name}.py").exists() or (root / alias.name).is_dir()
                    yield f"swarmctl.{alias.name}" if is_module else "swarmctl"
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("swarmctl"))


def test_imports_flow_one_way():
    from pathlib import Path

    root = Path(swarmctl.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        module = "swarmctl." + ".".join(path.relative_to(root).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for target in _imports(path, root):
            if _level(target) > _level(module):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against the flow: " + "; ".join(wrong)


# Where a task's name may be a string literal outside tasks/, and why: a model is registered with the task it
# is trained on (its registration names it), and an HDF5 file's kind, written into the file, is the name of
# the task that reads it (the schema's values; a task maps to them through Task.data_kind). data/images.py
# says "image" of an IDX file's content in a message, not of the task.
TASK_NAMES_ALLOWED = {"models/registry.py": {"clustering"}, "models/mog.py": {"mog"}, "models/image.py": {"image"},
                      "data/hdf5.py": {"clustering", "mog"}, "data/images.py": {"image"}}


def _task_names_outside_tasks(root):
    """(module, line, literal) of each string literal in the package outside tasks/ (docstrings aside) that
    is a task's name, beyond :data:`TASK_NAMES_ALLOWED`."""
    from swarmctl.tasks import TASKS

    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        if module.startswith("tasks/"):
            continue
        for line, text in _string_literals(path):
            if text in TASKS and text not in TASK_NAMES_ALLOWED.get(module, ()):
                yield module, line, text


def test_only_tasks_know_a_task():
    """Outside tasks/ no module names a task: not its class or its module, and not its name as a string
    literal (docstrings and comments aside), except where :data:`TASK_NAMES_ALLOWED` says why; elsewhere the
    code asks a Task what it can do."""
    import re

    from swarmctl.tasks import TASKS

    root = Path(swarmctl.__file__).parent
    classes = [type(t).__name__ for t in TASKS.values()]
    modules = [type(t).__module__ for t in TASKS.values()]
    found = [f"{module}:{line}: {text!r}" for module, line, text in _task_names_outside_tasks(root)]
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] == "tasks":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(root)}: {n}" for n in classes + modules
                  if re.search(rf"\b{re.escape(n)}\b", text)]
    assert not found, f"tasks named outside tasks/: {found}"


def _library_imports():
    """(module, imported swarmctl module) for every import in the package."""
    root = Path(swarmctl.__file__).parent
    for path in sorted(root.rglob("*.py")):
        module = "swarmctl." + ".".join(path.relative_to(root).with_suffix("").parts)
        for target in _imports(path, root):
            yield module.removesuffix(".__init__"), target


def test_the_library_never_imports_the_test_helpers():
    """``swarmctl.testing`` is for tests (and users' tests): nothing the library runs depends on it."""
    wrong = [f"{m} imports {t}" for m, t in _library_imports()
             if m != "swarmctl.testing" and (t == "swarmctl.testing" or t.startswith("swarmctl.testing."))]
    assert not wrong, "; ".join(wrong)


def test_studies_never_import_the_trainer():
    """Studies read trained runs through ``runs``; devices come from the base (``swarmctl.devices``)."""
    wrong = [f"{m} imports {t}" for m, t in _library_imports()
             if m.startswith("swarmctl.studies") and t.startswith("swarmctl.training")]
    assert not wrong, "; ".join(wrong)


def test_the_tests_have_one_conftest():
    """Test modules import helpers with `from conftest import ...`; a second conftest.py below tests/ is
    imported under the same module name and shadows the first for every module collected after it."""
    tests = Path(__file__).resolve().parent
    assert sorted(p.relative_to(tests).as_posix() for p in tests.rglob("conftest.py")) == ["conftest.py"]


# ---- the run layout: one module names a run's files ------------------------------------------------------

RUN_FILE_NAMES = ("config.json", "metrics.jsonl", "best.pt", "last.pt", "curves.png", ".lock")
RUN_LAYOUT = ("swarmctl/rundir.py",)  # the one module that spells them


def _run_file_literals(path):
    """(line, literal) of each string literal in ``path`` (docstrings excepted) that is a run's file name or
    a path to one (``"best.pt"``, ``"*/config.json"``, the ``"/last.pt"`` of an f-string). A name inside a
    sentence a user reads (help text, a message) is prose, not a path, and is not counted."""
    for line, text in _string_literals(path):
        if any(part in RUN_FILE_NAMES for part in text.split("/")):
            yield line, text


def _string_literals(path):
    """(line, text) of each string literal in the module at ``path``, docstrings excepted."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_no_run_file_name_is_spelled_outside_the_run_layout():
    """Every module of the package and every benchmark asks ``swarmctl.rundir.RunDir`` (or its constants) for
    a run's files: renaming one is one line there. The tests may spell them: they check the files' contract
    (what a user finds in a run's folder), not ask where the code keeps the names."""
    root = Path(swarmctl.__file__).parent
    repo = root.parent
    modules = [*sorted(root.rglob("*.py")), *sorted((repo / "benchmarks").rglob("*.py"))]
    found = [f"{path.relative_to(repo)}:{line}: {text!r}" for path in modules
             if path.relative_to(root.parent).as_posix() not in RUN_LAYOUT for line, text in _run_file_literals(path)]
    assert not found, "run file names spelled outside swarmctl/rundir.py: " + "; ".join(found)


def test_the_run_layout_names_every_run_file():
    """The names the grep above looks for are the layout's own (a renamed file is still caught)."""
    from swarmctl import rundir

    assert {rundir.CONFIG, rundir.METRICS, rundir.BEST, rundir.LAST, rundir.CURVES, rundir.LOCK} == \
        set(RUN_FILE_NAMES)
# Commands are thin (docs/design.md): a command parses its options, calls the library for its work and prints
# what comes back. Files, data and tasks are the library's business: a command reaches them through it.
_CLI_FORBIDDEN = ("swarmctl.files", "swarmctl.data", "swarmctl.tasks")
_FILE_CALLS = {"open", "write_text", "write_bytes", "read_text", "read_bytes", "save", "savez", "savez_compressed",
               "savefig", "touch", "mkdir", "unlink", "rename", "replace", "rmdir", "atomic_write",
               "atomic_write_text", "staged_outputs"}


def _opens_a_file(node) -> bool:
    """A call that opens, writes or moves a file: not ``str.replace(old, new)``, and not the standard streams'
    reopening on ``os.devnull`` (swarmctl.cli.prepare), which is no file of the user's."""
    import ast

    f = node.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name not in _FILE_CALLS or (name in ("replace", "rename") and len(node.args) != 1):
        return False
    first = node.args[0] if node.args else None
    return not (isinstance(first, ast.Attribute) and first.attr == "devnull")


def _cli_modules():
    root = Path(swarmctl.__file__).parent
    return root, sorted((root / "cli").glob("*.py"))


def test_commands_never_import_files_data_or_tasks():
    root, paths = _cli_modules()
    wrong = [f"{path.relative_to(root)} imports {target}" for path in paths for target in _imports(path, root)
             if any(target == f or target.startswith(f + ".") for f in _CLI_FORBIDDEN)]
    assert not wrong, "commands reach files, data and tasks through the library: " + "; ".join(wrong)


def test_commands_never_open_or_write_a_file():
    import ast

    root, paths = _cli_modules()
    wrong = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _opens_a_file(node):
                f = node.func
                wrong.append(f"{path.relative_to(root)}:{node.lineno} calls {getattr(f, 'id', None) or f.attr}()")
    assert not wrong, "commands leave files to the library: " + "; ".join(wrong)


def _cli_flags() -> set[str]:
    """Every option name of every command, e.g. ``--force``, ``--no-standardize``."""
    from typer.main import get_command

    from swarmctl.cli import app

    group = get_command(app)
    flags = {o for p in group.params for o in (*p.opts, *p.secondary_opts)}
    for command in group.commands.values():
        flags |= {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
    return flags - {"--help"}


def test_the_library_never_spells_a_flag():
    """Outside cli/, messages name an option by its parameter in backticks (`force`); the command maps it to
    its flag. Docstrings and comments may spell flags."""
    import re

    flags = _cli_flags()
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
                         + r")(?![\w-])")
    root = Path(swarmctl.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "cli":
            continue
        for line, text in _string_literals(path):
            if text not in flags:  # a flag alone is an argument of another program (cc --version)
                found += [f"{path.relative_to(root)}:{line} {m}" for m in pattern.findall(text)]
    assert not found, f"{len(found)} flag spellings outside cli/: " + "; ".join(found)
