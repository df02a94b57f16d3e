"""`planc search SPEC`: load, set up the space, search, report, write the winner."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Any

from planc.findings import Severity
from planc.outputs.emit import STDOUT, check_output, write_text_atomic
from planc.outputs.escape import line
from planc.outputs.progress import logged
from planc.presets.accuracy import bar_json, model_json
from planc.record import record
from planc.rules import REGISTRY
from planc.search import advice
from planc.search.evaluate import OBJECTIVES, Setup
from planc.search.fallback import DEFAULT_TOLERANCE, FallbackPlan, fallbacks
from planc.search.output import (
    describe,
    fallback_json,
    render_fallbacks,
    render_text,
    spec_yaml,
    to_csv,
    to_json,
    winner_spec,
)
from planc.search.rank import SearchResult
from planc.search.run import search
from planc.search.space import SearchError, build_space, parse_allowed
from planc.search.workers import available_cores, capped
from planc.spec.job import matching_preset, resolved_order
from planc.spec.load import Loaded, load_path

EXIT_FOUND, EXIT_NONE, EXIT_UNUSABLE = 0, 1, 2


@record
class Request:
    spec: str
    top: int = 10
    output_format: str = "text"
    write: str | None = None
    jobs: int | None = None  # --jobs N; None: the cores available
    allow: Sequence[str] = ()
    # Rule options given on the command line (--max-bubble, ...), by name; None: not given.
    limits: Mapping[str, float | None] = field(default_factory=dict)
    strict: bool = False
    report: str | None = None  # --report FILE.html: the explorer page (planc.report.explorer)
    objective: str = "step"  # --objective: step | time-to-train | cost
    lost_nodes: int = 0  # --lost-nodes K: fallback plans for the world less 1 … K nodes
    batch_tolerance: float = DEFAULT_TOLERANCE  # --batch-tolerance: how far B may move
    framework_warnings: bool = False  # --allow-framework-warnings


@record
class Report:
    """What the command prints (stdout), says on stderr, and its exit code."""

    text: str
    notes: str
    code: int


def setup_of(loaded: Loaded, request: Request) -> Setup:
    """The search of a loaded spec under the request's narrowing; SearchError if unusable."""
    if loaded.job is None or loaded.spec is None:
        raise SearchError("the spec did not load")
    space = build_space(
        loaded.job,
        loaded.spec,
        lambda path: loaded.locator.present(path),
        parse_allowed(request.allow),
        request.limits,
    )
    # hardware.calibration's tables as loading read them (plain JSON under a read-only top
    # level): a dict, so that a worker process receives them.
    calibration = loaded.job.cluster.calibration
    tables = None if calibration is None else dict(calibration)
    # hardware.topology's tiers as loading placed the hosts on them (resolving the spec alone
    # gives the two-tier default).
    cluster = loaded.job.cluster
    placed = cluster.fabric if cluster.topology is not None else None
    objective = next(o for o in OBJECTIVES if o == request.objective)
    return Setup(
        loaded.spec, space, request.strict, tables, placed, objective, request.framework_warnings
    )


def _unusable(loaded: Loaded) -> str | None:
    """The input findings of a spec that cannot be searched, as check prints them."""
    blocking = [f for f in loaded.findings if f.severity.rank >= Severity.ERROR.rank]
    if loaded.job is not None and not blocking:
        return None
    from planc.check import check_loaded  # start-up: only for a broken spec
    from planc.cli.reporters import REPORTERS  # start-up: as above

    return REPORTERS["text"]((check_loaded(loaded),), False)


# Writes the explorer page (`planc.report.explorer.write_explorer`), given by the command line:
# the page builds on the search, not the search on the page. Returns the note for stderr.
ExplorerWriter = Callable[[str, str, str, Setup, SearchResult], str]


def run(request: Request, write_explorer: ExplorerWriter | None = None) -> Report:
    """Run one search as the command line asks; `write_explorer` writes `request.report`."""
    from planc.rules.config import ConfigError, Resolver  # start-up: as check reads it

    try:  # the project's rule defaults, as planc check applies them to this file
        defaults = Resolver().for_path(request.spec).rule_defaults()
    except ConfigError as error:
        return Report("", line(f"planc: error: {error}") + "\n", EXIT_UNUSABLE)
    refused = _refused_output(request)
    if refused is not None:
        return Report("", refused, EXIT_UNUSABLE)
    loaded = load_path(request.spec, defaults or None)
    broken = _unusable(loaded)
    if broken is not None:
        return Report("", broken, EXIT_UNUSABLE)
    try:
        setup = setup_of(loaded, request)
    except SearchError as error:
        return Report("", line(f"planc: error: {request.spec}: {error}") + "\n", EXIT_UNUSABLE)
    jobs, capping = capped(request.jobs) if request.jobs else (available_cores(), "")
    result = search(setup, request.top, jobs, logged)
    heading = describe(loaded.job) if loaded.job is not None else ""
    plans: tuple[FallbackPlan, ...] = ()
    if request.lost_nodes and loaded.job is not None:
        plans = fallbacks(
            setup, loaded.job, request.lost_nodes, request.batch_tolerance, jobs, logged
        )
    job = loaded.job
    bars: dict[str, Any] = {"model_error": None, "model_error_preset": None}
    if job is not None:
        cal = job.cluster.calibration
        bars["model_error"] = bar_json(job.cluster.gpu.name, cal)
        bars["model_error_preset"] = model_json(matching_preset(job.model, job.training.s), cal)
    own = None
    if loaded.locator.present(("parallelism",)):  # the spec states a layout of its own
        own = advice.own_layout(setup, result, request.top)
    near = advice.nearest(setup, result)
    order = resolved_order(setup.spec["parallelism"])
    text = _rendered(result, request, order, heading, plans, bars, (own, near))
    text += _advised(request.output_format, own, near, request.top)
    notes = capping
    code = EXIT_FOUND if result.results else EXIT_NONE
    if request.write is not None:
        try:
            notes = _write(request.spec, request.write, setup, result)
        except OSError as error:
            notes, code = f"{request.spec}: error: cannot write {request.write}: {error}\n", 2
    if request.report is not None and write_explorer is not None:
        try:
            notes += write_explorer(request.spec, request.report, heading, setup, result)
        except OSError as error:
            notes += f"{request.spec}: error: cannot write {request.report}: {error}\n"
            code = 2
    return Report(text, notes, code)


def _refused_output(request: Request) -> str | None:
    """Why `--write` or `--report` cannot be written, said before the search runs: standard
    output (it carries the ranking) or an output the writer refuses (the spec itself, ...)."""
    for option, path in (("--write", request.write), ("--report", request.report)):
        if path is None:
            continue
        if path == STDOUT:
            return (
                f"{request.spec}: error: {option} -: standard output carries the ranked "
                "layouts; give a file name\n"
            )
        try:
            check_output(path, (request.spec,))
        except OSError as error:
            return f"{request.spec}: error: cannot write {path}: {error.strerror}\n"
    return None


def _advised(
    output_format: str,
    own: advice.OwnLayout | None,
    near: tuple[advice.Nearest, ...],
    top: int,
) -> str:
    """The text report's lines on the spec's own layout and the nearest rejected ones (the
    JSON report carries them in `_rendered`'s object; CSV has one row per result only)."""
    if output_format != "text":
        return ""
    lines = advice.render_own(own, top) if own is not None else []
    lines += advice.render_nearest(near)
    return "\n".join(lines) + "\n" if lines else ""


def _rendered(
    result: SearchResult,
    request: Request,
    order: str,
    heading: str,
    plans: tuple[FallbackPlan, ...] = (),
    bars: dict[str, Any] | None = None,
    advised: tuple[advice.OwnLayout | None, tuple[advice.Nearest, ...]] = (None, ()),
) -> str:
    if request.output_format == "json":
        import json

        data = to_json(result, order)
        # The step times' error on published runs: the GPU generation's and the model preset's.
        data.update(bars or {"model_error": None, "model_error_preset": None})
        own, near = advised
        data["your_layout"] = None if own is None else advice.own_json(own)
        data["nearest_rejected"] = advice.nearest_json(near)
        if request.lost_nodes:
            data["fallbacks"] = [fallback_json(plan) for plan in plans]
        return json.dumps(data, indent=2) + "\n"
    if request.output_format == "csv":
        return to_csv(result, order)
    titles = {rule_id: rule.title for rule_id, rule in REGISTRY.items()}
    text = render_text(result, titles, request.top, heading)
    if request.objective != "step":
        text += (
            f"ranked by {request.objective}: the step time over the goodput its checkpoint "
            "leaves (planc.run; the step alone without a checkpoint section)\n"
        )
    if request.lost_nodes:
        text += render_fallbacks(plans, request.batch_tolerance)
    return text


def _write(spec: str, path: str, setup: Setup, result: SearchResult) -> str:
    """Write the best layout as a spec; the note for stderr."""
    if not result.results:
        return f"{spec}: nothing written to {path}: no candidate is feasible\n"
    winner = result.results[0]
    header = (
        f"Written by planc search from {spec}: the fastest of {result.feasible:,} "
        f"feasible layouts\n(estimated step {winner.metrics.step_time_s:.3f} s, "
        f"{winner.metrics.mfu:.1%} MFU). Check it with: planc check <this file>"
    )
    text = spec_yaml(winner_spec(setup.spec, result, winner), header)
    write_text_atomic(path, text, (spec,))
    return f"{spec}: wrote the best layout to {path}\n"
