"""CI runs exactly the README's test command, and fails when it fails or tests nothing."""
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _readme_test_command() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("Run the tests", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    (line,) = [ln for ln in block.strip().splitlines() if "pytest" in ln]
    return line.split(". .venv/bin/activate && ", 1)[1]


def test_ci_runs_the_readme_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    cmd = _readme_test_command()
    calls = [ln.strip() for ln in ci.splitlines() if "python -m pytest" in ln and not ln.lstrip().startswith("#")]
    assert len(calls) == 1 and calls[0].startswith(cmd + " ||"), (cmd, calls)


@pytest.mark.parametrize("pytest_rc", [0, 1, 5])
def test_ci_exits_with_pytest_status(tmp_path, pytest_rc):
    """.ci/run with stand-ins for python3, pip and pytest (no install): it exits with pytest's status,
    so a failure fails CI, and "no tests collected" (5) says so and fails too."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "run").write_text((REPO / ".ci" / "run").read_text(encoding="utf-8"))
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    # python3 -m venv makes a .venv whose activate puts the stand-ins first
    (bin_ / "python3").write_text(
        "#!/bin/sh\nmkdir -p .venv/bin\n"
        f"printf 'PATH=\"{bin_}:$PATH\"\\n' > .venv/bin/activate\n")
    (bin_ / "pip").write_text("#!/bin/sh\nexit 0\n")
    (bin_ / "python").write_text(f"#!/bin/sh\nexit {pytest_rc}\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True,
                          env={"PATH": f"{bin_}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == pytest_rc, proc.stderr
    assert ("collected no tests" in proc.stderr) == (pytest_rc == 5)
