"""The guide's size limits hold in every git-tracked Python file: none over 400 lines and no
function over 60 (from its `def` line, decorators left out), so each reads in one sitting."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from streams.settings import REPO_ROOT

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def tracked_python_files(root: Path) -> list[Path]:
    listed = subprocess.check_output(["git", "ls-files", "-z", "--", "*.py"], cwd=root, text=True)
    # A file deleted but not yet `git rm`-ed is still listed; there is nothing left to measure.
    return [root / name for name in listed.split("\0") if name and (root / name).is_file()]


def oversized(root: Path, paths: list[Path]) -> list[str]:
    """Each file over MAX_FILE_LINES and each function over MAX_FUNCTION_LINES, with the fix."""
    problems = []
    for path in paths:
        text = path.read_text()
        name = path.relative_to(root)
        lines = len(text.splitlines())
        if lines > MAX_FILE_LINES:
            problems.append(
                f"{name}: {lines} lines (limit {MAX_FILE_LINES}): move a part that stands alone "
                "into a sibling module whose name says what it holds"
            )
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(
                        f"{name}:{node.lineno} {node.name}: {length} lines (limit "
                        f"{MAX_FUNCTION_LINES}): split it into steps, each a function named for "
                        "what it does, the caller's docstring listing them"
                    )
    return problems


def test_no_file_or_function_is_over_the_limits() -> None:
    problems = oversized(REPO_ROOT, tracked_python_files(REPO_ROOT))
    assert problems == [], "\n".join(["", *problems])


def test_the_check_names_each_long_file_and_function(tmp_path: Path) -> None:
    body = "".join(f"    x = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    short = f"def short():\n{body}"  # exactly at the limit
    long = f"@decorated\nasync def long():\n{body}    return x\n"
    (tmp_path / "ok.py").write_text(short + "\n" * (MAX_FILE_LINES - MAX_FUNCTION_LINES))
    (tmp_path / "big.py").write_text(long + "\n" * (MAX_FILE_LINES - MAX_FUNCTION_LINES))
    problems = oversized(tmp_path, [tmp_path / "ok.py", tmp_path / "big.py"])
    assert [problem.split(" (")[0] for problem in problems] == [
        "big.py: 402 lines",
        "big.py:2 long: 61 lines",
    ]
