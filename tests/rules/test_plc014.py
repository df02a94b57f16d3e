"""PLC014 topology: NVLink domains tile the nodes; the host list names every node once.

Base: llama3-8b on one 8-GPU node, hosts [gpu-a01]; llama3-70b-8x8 on 8 nodes, hosts
"gpu-{000..007}".
"""

from __future__ import annotations

import pytest

from planc.findings import FileResult, Finding, Severity

from conftest import check_overlay, check_text, rules_fired, spec_text, value_position


def findings_of(result: FileResult, rule: str = "PLC014") -> list[Finding]:
    return [f for f in result.findings if f.rule == rule]


def test_domain_that_neither_divides_nor_spans_nodes() -> None:
    # 8 % 6 = 2 and 6 % 8 = 6.
    text = spec_text({"hardware": {"nvlink_domain": 6}})
    result = check_text(text)
    assert rules_fired(result) == {"PLC014"}
    (finding,) = findings_of(result)
    assert finding.field == "hardware.nvlink_domain"
    assert finding.severity is Severity.ERROR
    assert "6 GPUs" in finding.message and "8 GPUs per node" in finding.message
    assert finding.fix
    assert (finding.line, finding.column) == value_position(text, "  nvlink_domain: 6")


@pytest.mark.parametrize(
    ("domain", "nodes"),
    [
        (8, 1),  # one domain per node (HGX)
        (4, 1),  # two domains per node
        (16, 2),  # a domain across two nodes
    ],
)
def test_domains_that_tile_pass(domain: int, nodes: int) -> None:
    hosts = [f"gpu-a0{i}" for i in range(1, nodes + 1)]
    overlay = {"hardware": {"nvlink_domain": domain, "nodes": nodes, "hosts": hosts}}
    assert "PLC014" not in rules_fired(check_overlay(overlay))


def test_gb200_rack_of_eighteen_trays_passes() -> None:
    # 72 = 18 × 4.
    assert "PLC014" not in rules_fired(check_overlay(None, "gpt3-175b-gb200-nvl72.yaml"))


def test_more_host_names_than_nodes() -> None:
    text = spec_text({"hardware": {"hosts": ["gpu-a01", "gpu-a02"]}})
    (finding,) = findings_of(check_text(text))
    assert finding.field == "hardware.hosts"
    assert "2 host names for 1 nodes" in finding.message
    assert finding.fix
    lines = text.splitlines()
    first_item = lines.index("  hosts:") + 1
    assert (finding.line, finding.column) == (first_item + 1, lines[first_item].index("-") + 1)


def test_repeated_host_names() -> None:
    overlay = {"hardware": {"nodes": 2, "hosts": ["gpu-a01", "gpu-a01"]}}
    (finding,) = findings_of(check_overlay(overlay))
    assert "repeat" in finding.message and "gpu-a01" in finding.message


def test_host_pattern_expands_to_one_name_per_node() -> None:
    # gpu-{000..007} names 8 nodes; gpu-{000..006} only 7.
    assert "PLC014" not in rules_fired(check_overlay(None, "llama3-70b-8x8.yaml"))
    text = spec_text({"hardware": {"hosts": "gpu-{000..006}"}}, "llama3-70b-8x8.yaml")
    (finding,) = findings_of(check_text(text))
    assert "7 host names for 8 nodes" in finding.message
    assert (finding.line, finding.column) == value_position(text, "  hosts: gpu-{000..006}")


def test_no_host_list_is_fine() -> None:
    # Without hosts, planc names the nodes node-0 ... node-N−1 itself.
    assert "PLC014" not in rules_fired(check_overlay({"hardware": {"hosts": []}}))
