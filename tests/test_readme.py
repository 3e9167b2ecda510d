"""The README's Python example runs as written."""

import re
from pathlib import Path


def test_readme_python_example_runs():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_readme_starts_with_make_demo_and_make_test():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert first_block.splitlines()[0].startswith("make demo") and first_block.splitlines()[1].startswith("make test")
