"""Which files `planc check` looks at: directories walked in order, non-specs and excludes left out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from planc.cli.discover import Excludes, discover, looks_like_spec

ROOT = Path(__file__).resolve().parent.parent
SPEC = (ROOT / "examples" / "llama3-8b-1node.yaml").read_text(encoding="utf-8")
K8S_JOB = """\
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
"""


@pytest.mark.parametrize(
    "text",
    [
        SPEC,
        "version: 1\nmodel: {preset: llama3-8b}\n",
        '\ufeff"version": 1\n"hardware":\n  gpu: h100-sxm\n',
        "---\nversion: 1\nhardware: [broken\n",  # a syntax error later on: still a spec, reported
        "version: 1\r\nmodel:\r\n  preset: llama3-8b\r\n",
        "version: 1\nsearch: {tensor: [4, 8]}\nmodel: {preset: llama3-8b}\n",  # a search spec
    ],
)
def test_specs_look_like_specs(text: str) -> None:
    assert looks_like_spec(text.encode("utf-8"))


@pytest.mark.parametrize(
    "text",
    [
        K8S_JOB,
        'version: "3.8"\nservices:\n  web:\n    image: nginx\n',  # docker-compose
        "apiVersion: v2\nname: chart\nversion: 0.1.0\n",  # Helm Chart.yaml
        "name: ci\non: [push]\njobs: {}\n",  # GitHub workflow
        "model: {preset: llama3-8b}\ntraining: {seq_len: 1}\n",  # no version
        "  version: 1\n  model: {}\n",  # nested, not top level
        "versions: 1\nmodels: 2\n",
        "",
        # A Helm values file: version and training, but neither model nor hardware.
        "version: 2.1.0\ntraining:\n  image: trainer:latest\n  gpus: 8\nresources: {}\n",
        "version: 1\r\nparallelism:\r\n  tensor: 2\r\n",  # no model, no hardware
    ],
)
def test_other_yaml_does_not(text: str) -> None:
    assert not looks_like_spec(text.encode("utf-8"))


def _tree(root: Path) -> None:
    files = {
        "b/spec.yaml": SPEC,
        "a/z.yml": SPEC,
        "a/sub/x.yaml": SPEC,
        "a/readme.txt": SPEC,  # not YAML by name
        "k8s/training-job.yaml": K8S_JOB,
        ".hidden/spec.yaml": SPEC,
        "node_modules/pkg/spec.yaml": SPEC,
        "top.yaml": SPEC,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _rel(paths: list[str], root: Path) -> list[str]:
    return [Path(p).relative_to(root).as_posix() for p in paths]


def test_walk_is_sorted_and_keeps_only_specs(tmp_path: Path) -> None:
    _tree(tmp_path)
    found = discover([str(tmp_path)])
    assert _rel(found, tmp_path) == ["a/sub/x.yaml", "a/z.yml", "b/spec.yaml", "top.yaml"]
    assert discover([str(tmp_path)]) == found  # deterministic


def test_named_files_are_checked_as_given(tmp_path: Path) -> None:
    _tree(tmp_path)
    k8s, missing = str(tmp_path / "k8s" / "training-job.yaml"), str(tmp_path / "nope.yaml")
    assert discover([k8s, missing, "-", str(tmp_path / "b")]) == [
        k8s,
        missing,
        "-",
        str(tmp_path / "b" / "spec.yaml"),
    ]


def test_skip_non_specs_applies_the_content_test_to_named_files(tmp_path: Path) -> None:
    _tree(tmp_path)
    k8s, spec = str(tmp_path / "k8s" / "training-job.yaml"), str(tmp_path / "top.yaml")
    missing = str(tmp_path / "nope.yaml")
    assert discover([k8s, spec, missing], only_specs=True) == [spec, missing]


def test_each_file_once_in_argument_order(tmp_path: Path) -> None:
    _tree(tmp_path)
    top = str(tmp_path / "top.yaml")
    found = discover([top, str(tmp_path), top])
    assert found[0] == top and found.count(top) == 1 and len(found) == 4


def test_excludes_prune_directories_and_match_names(tmp_path: Path) -> None:
    _tree(tmp_path)
    for pattern, expected in [
        ("a", ["b/spec.yaml", "top.yaml"]),
        ("a/sub", ["a/z.yml", "b/spec.yaml", "top.yaml"]),
        ("*.yml", ["a/sub/x.yaml", "b/spec.yaml", "top.yaml"]),
        ("b/*.yaml", ["a/sub/x.yaml", "a/z.yml", "top.yaml"]),
    ]:
        excludes = Excludes((pattern,), str(tmp_path))
        assert _rel(discover([str(tmp_path)], excludes.match), tmp_path) == expected, pattern


def test_named_files_escape_excludes_unless_forced(tmp_path: Path) -> None:
    _tree(tmp_path)
    top = str(tmp_path / "top.yaml")
    excludes = Excludes(("top.yaml",), str(tmp_path))
    assert discover([top], excludes.match) == [top]
    assert discover([top], excludes.match, force_exclude=True) == []


def test_a_directory_named_like_a_spec_is_reported_not_walked(tmp_path: Path) -> None:
    # `docker run -v spec.yaml:/spec.yaml` makes a directory when the file is missing.
    odd = tmp_path / "spec.yaml"
    odd.mkdir()
    (odd / "inner.yaml").write_text(SPEC, encoding="utf-8")
    assert discover([str(odd)]) == [str(odd)]


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_symlinked_directories_are_not_followed(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "b" / "loop").symlink_to(tmp_path, target_is_directory=True)
    assert _rel(discover([str(tmp_path / "b")]), tmp_path) == ["b/spec.yaml"]


def test_walking_the_current_directory_gives_plain_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert discover(["."]) == ["a/sub/x.yaml", "a/z.yml", "b/spec.yaml", "top.yaml"]
    assert discover(["b"]) == ["b/spec.yaml"]


def test_a_helm_values_file_is_passed_over_when_walking(tmp_path: Path) -> None:
    chart = tmp_path / "charts" / "trainer"
    chart.mkdir(parents=True)
    values = "version: 2.1.0\ntraining:\n  image: trainer:latest\n  replicas: 8\n"
    (chart / "values.yaml").write_text(values, encoding="utf-8")
    (tmp_path / "spec.yaml").write_text(SPEC, encoding="utf-8")
    assert discover([str(tmp_path)]) == [str(tmp_path / "spec.yaml")]
    # Named on the command line it is still checked as given (and fails as a spec would).
    assert discover([str(chart / "values.yaml")]) == [str(chart / "values.yaml")]
