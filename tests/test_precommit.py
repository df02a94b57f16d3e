"""The pre-commit hook checks planc specs wherever they live and leaves other YAML alone.

The hook has no `files:` pattern: pre-commit names every staged YAML file and the entry's
--skip-non-specs applies the content test (planc.cli.discover.looks_like_spec). The entry is run as
pre-commit would run it; where pre-commit is installed, `pre-commit try-repo` runs the real hook
(it builds planc into its own environment, so that test takes tens of seconds).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from planc.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
HOOKS = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
GOOD = (ROOT / "examples" / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
BAD = (ROOT / "examples" / "invalid" / "PLC006" / "llama3-70b-8x8.yaml").read_text("utf-8")
K8S = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: training-job
spec:
  template:
    spec:
      containers:
        - name: trainer
          image: nvcr.io/nvidia/pytorch:24.05-py3
          args: ["torchrun", "--nnodes=8", "train.py"]
      restartPolicy: Never
"""
FILES = {
    "infra/clusters/prod-a.yaml": GOOD,
    "ml/jobs/pretrain/llama.yml": BAD,  # PLC006
    "k8s/training-job.yaml": K8S,
    "docker-compose.yaml": 'version: "3.8"\nservices:\n  web:\n    image: nginx\n',
    ".github/workflows/ci.yml": "name: ci\non: [push]\njobs: {}\n",
}


def _repo(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_hooks_match_every_yaml_file_and_skip_non_specs() -> None:
    for hook in HOOKS.values():
        assert hook["types"] == ["yaml"] and "files" not in hook
        # One summary and one exit code for the whole commit, not one per chunk of files.
        assert hook["require_serial"] is True
        assert "--skip-non-specs" in shlex.split(hook["entry"])


@pytest.mark.parametrize("hook_id", sorted(HOOKS))
def test_entry_as_pre_commit_calls_it(
    hook_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _repo(tmp_path, FILES)
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    program, command, *args = shlex.split(HOOKS[hook_id]["entry"])
    assert (program, command) == ("planc", "check")
    # pre-commit passes the staged files of the hook's types, relative to the repository root.
    result = CliRunner().invoke(main, [command, *args, *FILES], env={"GITHUB_ACTIONS": ""})
    assert result.exit_code == 1
    reported = {line.split(":", 1)[0] for line in result.output.splitlines() if ": error " in line}
    assert reported == {"ml/jobs/pretrain/llama.yml"}
    assert result.output.splitlines()[-1].startswith("2 files checked")
    # Without the failing spec the hook passes: the Kubernetes job is not a finding.
    clean = [name for name in FILES if not name.startswith("ml/")]
    assert CliRunner().invoke(main, [command, *args, *clean]).exit_code == 0


def test_configuration_exclude_reaches_named_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _repo(tmp_path, FILES)
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.planc]\nexclude = ["ml/jobs"]\n')
    monkeypatch.chdir(tmp_path)
    _, command, *args = shlex.split(HOOKS["planc-check"]["entry"])
    assert CliRunner().invoke(main, [command, *args, *FILES]).exit_code == 0


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(shutil.which("pre-commit") is None, reason="pre-commit is not installed")
def test_pre_commit_try_repo(tmp_path: Path) -> None:
    repo = tmp_path / "infra"
    repo.mkdir()
    _repo(repo, FILES)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    run = subprocess.run(
        ["pre-commit", "try-repo", str(ROOT), "planc-check", "--all-files", "--verbose"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "ml/jobs/pretrain/llama.yml:31:17: error PLC006" in out, out
    assert "k8s/training-job.yaml" not in out and "docker-compose.yaml" not in out, out
    # pre-commit may split the files over parallel runs, each with its own summary.
    checked = [int(n) for n in re.findall(r"^(\d+) files? checked", out, re.MULTILINE)]
    assert sum(checked) == 2, out
