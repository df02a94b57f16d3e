"""What the commands that plan share: the analysed job of a spec or the findings that stop it,
and the hosts a compile writes."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from typing import Any, ClassVar, Protocol, TypeVar

    from planc.analysis import Analysis
    from planc.findings import Finding
    from planc.spec.job import Cluster

    class _Clustered(Protocol):
        """A job or plannable job: a dataclass with a cluster (`with_hosts`)."""

        __dataclass_fields__: ClassVar[dict[str, Any]]

        @property
        def cluster(self) -> Cluster: ...

    _Job = TypeVar("_Job", bound=_Clustered)


def about_the_run(rule_id: str) -> bool:
    """Whether a rule's finding is about the run a spec describes (a run rule or a
    precondition), not about a file planc cannot use as a spec (an input rule)."""
    from planc.rules import REGISTRY, RuleKind

    rule = REGISTRY.get(rule_id)
    return rule is not None and rule.kind is not RuleKind.INPUT


def plan_or_exit(
    path: str,
    output_format: str = "text",
    tolerate: frozenset[str] = frozenset(),
    force: bool = False,
) -> tuple[Analysis, tuple[Finding, ...]]:
    """The analysed, plannable job of a spec, and the error findings a forced run went past.

    Error findings stop the command (exit 1; 2 for unusable input), except rules in `tolerate`
    (a memory report is most useful when PLC007 fails) and, with `force`, every rule about the
    run itself. A job with no layout at all (a precondition rule ignored or re-levelled) stops
    every command with the refusal, located, whatever the flags.
    """
    from planc.analysis import analyse
    from planc.check import check_file, with_refusals
    from planc.cli.reporters import REPORTERS
    from planc.findings import FileResult, Severity, exit_code
    from planc.plannable import plannable
    from planc.spec.load import load_path

    def stop(result: FileResult) -> NoReturn:
        reporter = REPORTERS["json" if output_format == "json" else "text"]
        click.echo(reporter((result,), False), nl=False, err=True)
        sys.exit(max(exit_code((result,)), 1))

    loaded = load_path(path)
    result, context = check_file(loaded)
    errors = tuple(f for f in result.findings if f.severity.rank >= Severity.ERROR.rank)
    blocking = [
        f for f in errors if f.rule not in tolerate and not (force and about_the_run(f.rule))
    ]
    if loaded.job is None or blocking:
        stop(result)
    plan = plannable(loaded.job)
    if isinstance(plan, tuple):
        stop(with_refusals(result, plan, loaded.locator))
    # check analysed the job already when a rule needed it; never twice.
    analysis = context.analysis if context is not None and context.analysis is not None else None
    return analysis or analyse(plan), tuple(f for f in errors if f.rule not in tolerate)


def with_hosts(job: _Job, spec: str, hosts_file: str | None) -> _Job:
    """`planc compile --hosts FILE`: the file's names replace the job's hosts after the host
    rule's checks (PLC014; findings on stderr, exit 1, or 2 for a file that cannot be read).
    Without hosts anywhere, warn that the launcher files name placeholders."""
    import dataclasses

    from planc.spec.job import NodeNames

    hosts = job.cluster.hosts
    if hosts_file is None:
        if isinstance(hosts, NodeNames):
            click.echo(
                f"{spec}: warning: no hardware.hosts: the launcher files name node-0 ... "
                f"node-{len(hosts) - 1}, which torchrun cannot resolve; set hardware.hosts or "
                "pass --hosts FILE",
                err=True,
            )
        return job
    from planc.cli.reporters import REPORTERS
    from planc.findings import exit_code
    from planc.spec.hostfile import check_hosts

    result, names = check_hosts(hosts_file, job.cluster.nodes, job.cluster.gpus_per_node)
    if result.findings:
        click.echo(REPORTERS["text"]((result,), False), nl=False, err=True)
        sys.exit(max(exit_code((result,)), 1))
    topology = job.cluster.topology
    if topology is None:
        return dataclasses.replace(job, cluster=dataclasses.replace(job.cluster, hosts=names))
    from planc.spec.topology import TopologyError, placed_cluster

    try:
        # The hosts take their places on hardware.topology, as the spec's own would.
        cluster, skipped = placed_cluster(job.cluster, topology, names)
    except TopologyError as error:
        click.echo(f"planc: error: --hosts {hosts_file}: {topology.path}: {error}", err=True)
        sys.exit(2)
    for level in skipped:
        click.echo(f"{spec}: warning: hardware.topology: level {level}; it is not a tier", err=True)
    return dataclasses.replace(job, cluster=cluster)
