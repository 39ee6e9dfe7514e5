"""The commands a pip install gives: `ferry`, `ferryd` and `python -m ferry`."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import ferry


def scripts_dir() -> Path:
    return Path(sysconfig.get_path("scripts"))


def run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def test_the_ferry_command_is_installed_and_runs():
    ferry_command = scripts_dir() / "ferry"
    assert ferry_command.exists(), f"pip installed no `ferry` command in {scripts_dir()}"
    assert run(str(ferry_command), "--version").strip() == ferry.__version__
    assert "keygen" in run(str(ferry_command), "--help")


def test_python_dash_m_ferry_is_the_ferry_command():
    assert run(sys.executable, "-m", "ferry", "--version").strip() == ferry.__version__


def test_the_ferryd_command_is_installed_and_runs():
    ferryd_command = scripts_dir() / "ferryd"
    assert ferryd_command.exists(), f"pip installed no `ferryd` command in {scripts_dir()}"
    assert ferry.__version__ in run(str(ferryd_command), "--version")


def test_the_notebook_tools_docs_python_md_names_are_installed():
    # docs/python.md: `.venv/bin/jupyter lab ...` and `.venv/bin/jupyter nbconvert ...`.
    for command in ("jupyter", "jupyter-lab", "jupyter-nbconvert"):
        assert (scripts_dir() / command).exists(), f"{command} is not in {scripts_dir()} (scripts/python-env.sh)"
