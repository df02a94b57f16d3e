"""What an editor shows for a model without a preset or its dimensions: PLC109's text, not
yaml-language-server's "Missing property "layers"". The published schema carries it as the
`errorMessage` of each branch of the model's anyOf (yaml-language-server and
vscode-json-languageservice report a missing `required` property with it), the schema stays
valid for jsonschema, and, where yaml-language-server is installed (PLANC_YAML_LANGUAGE_SERVER
or on PATH; CI installs it from npm), the real server publishes that text."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

import jsonschema
import pytest
import yaml

from planc.spec.models import MODEL_REQUIREMENT_MESSAGE

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "schemas" / "spec.schema.json"
PUBLISHED = json.loads(SCHEMA_FILE.read_text("utf-8"))
SPEC = (ROOT / "examples" / "llama3-8b-1node.yaml").read_text("utf-8")
# What the README promises an editor shows (its "Editor set-up" paragraph).
PROMISED = "a model preset, or layers + hidden + heads + vocab"


def test_every_branch_of_the_model_requirement_says_plc109() -> None:
    branches = PUBLISHED["$defs"]["ModelSpec"]["anyOf"]
    assert [b["required"] for b in branches] == [
        ["preset"],
        ["hf_config"],
        ["layers", "hidden", "heads", "vocab"],
    ]
    assert {b["errorMessage"] for b in branches} == {MODEL_REQUIREMENT_MESSAGE}
    assert "PLC109" in MODEL_REQUIREMENT_MESSAGE and PROMISED in MODEL_REQUIREMENT_MESSAGE
    assert f'"{PROMISED}"' in " ".join((ROOT / "README.md").read_text("utf-8").split())


def test_the_schema_with_messages_is_valid_and_still_validates() -> None:
    jsonschema.Draft202012Validator.check_schema(PUBLISHED)
    validator = jsonschema.Draft202012Validator(PUBLISHED)
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(example.read_text("utf-8"))))
        assert errors == [], (example.name, errors[:1])
    data = yaml.safe_load(SPEC)
    data["model"] = {"hidden": 4096}
    assert not validator.is_valid(data)  # errorMessage is a message, not a loosened rule


def _server() -> list[str] | None:
    named = os.environ.get("PLANC_YAML_LANGUAGE_SERVER") or shutil.which("yaml-language-server")
    return [named, "--stdio"] if named else None


def _send(stream: IO[bytes], message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    stream.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    stream.flush()


def _receive(stream: IO[bytes]) -> dict[str, Any] | None:
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if not line.strip():
            break
        name, _, value = line.decode("ascii").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None
    message: dict[str, Any] = json.loads(stream.read(length))
    return message


def diagnostics(server: list[str], text: str, uri: str) -> list[dict[str, Any]]:
    """The first diagnostics yaml-language-server publishes for `text` opened at `uri`, spoken to
    over LSP on stdio as an editor would (initialize, configuration, didOpen)."""
    settings = {"validate": True, "schemaStore": {"enable": False}, "format": {"enable": False}}
    proc = subprocess.Popen(
        server, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    guard = threading.Timer(120, proc.kill)  # a server that never answers fails the test
    guard.start()
    try:
        _send(
            proc.stdin,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "processId": os.getpid(),
                    "rootUri": None,
                    "capabilities": {"workspace": {"configuration": True}},
                },
            },
        )
        while (message := _receive(proc.stdout)) is not None:
            method = message.get("method")
            if message.get("id") == 1 and "result" in message:
                for method_name, params in (
                    ("initialized", {}),
                    ("workspace/didChangeConfiguration", {"settings": {"yaml": settings}}),
                    (
                        "textDocument/didOpen",
                        {
                            "textDocument": {
                                "uri": uri,
                                "languageId": "yaml",
                                "version": 1,
                                "text": text,
                            }
                        },
                    ),
                ):
                    _send(proc.stdin, {"jsonrpc": "2.0", "method": method_name, "params": params})
            elif method is not None and "id" in message:  # a request of the server's
                items = message.get("params", {}).get("items", [])
                answer = [settings] * len(items) if method == "workspace/configuration" else None
                _send(proc.stdin, {"jsonrpc": "2.0", "id": message["id"], "result": answer})
            elif method == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri:
                found: list[dict[str, Any]] = message["params"]["diagnostics"]
                return found
        raise AssertionError("yaml-language-server ended without publishing diagnostics")
    finally:
        guard.cancel()
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


@pytest.mark.skipif(_server() is None, reason="yaml-language-server is not installed (npm)")
def test_yaml_language_server_shows_plc109s_text(tmp_path: Path) -> None:
    server = _server()
    assert server is not None
    modeline = f"# yaml-language-server: $schema={SCHEMA_FILE.as_uri()}\n"
    body = SPEC.split("\n", 1)[1]  # the example without its own relative modeline
    assert "  preset: llama3-8b\n" in body
    broken = modeline + body.replace("  preset: llama3-8b\n", "  hidden: 4096\n")
    uri = (tmp_path / "spec.yaml").as_uri()
    found = diagnostics(server, broken, uri)
    model_line = broken.splitlines().index("model:")
    assert [(d["message"], d["range"]["start"]["line"]) for d in found] == [
        (MODEL_REQUIREMENT_MESSAGE, model_line)
    ]
    assert diagnostics(server, modeline + body, uri) == []  # the example itself is clean
