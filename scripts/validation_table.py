"""Print planc's step time against the published-runs corpus (validation/runs.json) as Markdown.

    python scripts/validation_table.py                           # the table on stdout
    python scripts/validation_table.py -o docs/validation.md     # write it (and accuracy.json)
    python scripts/validation_table.py --check docs/validation.md  # exit 1 when it is stale

One row per run (its planc layout, the measured and predicted seconds per step, the signed error
predicted/measured − 1, the role), then mean |error|, the worst and the mean signed error by
role, by GPU generation, category, source and model preset (validation runs only),
leave-one-source-out, and the ranking: how planc orders the pairs of validation runs a layout
search could have chosen between. Fixed formatting, so the same model gives the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from planc.perf.validation import CELL, MODEL, TIE, UNPRICED, Aggregate, Comparison
from planc.presets.accuracy import ACCURACY, Group, Ordering, accuracy_json
from planc.scoring import Corpus, score_corpus

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "validation" / "runs.json"

HEADER = """\
# Step time on published runs

Written by `python scripts/validation_table.py -o docs/validation.md`; the tests fail when it is
stale (`--check`). Each row is a published training run (`validation/runs.json`, the specs in
`validation/runs/`, sources in the index and `validation/README.md`) priced by planc's step model
(`planc explain`'s estimate). The error is predicted/measured − 1: positive when planc is too slow.
`fit` runs may inform a parameter of the model; `validation` runs must not. Layout: t tensor, p
pipeline, v virtual stages, d data, c context, ep and etp expert and expert-tensor parallel, b
micro-batch, B global batch, s sequence, rc recompute, sp sequence parallel, tp-overlap, z ZeRO
stage (or fsdp2).
"""


def percent(value: float) -> str:
    """A signed percentage with one decimal, e.g. +3.1 %."""
    return f"{value * 100:+.1f} %"


def run_rows(corpus: Corpus) -> list[str]:
    rows = [
        "| run | gpu | layout | measured s | predicted s | error | role |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for scored, layout in zip(corpus.scored, corpus.layouts, strict=True):
        run = scored.run
        rows.append(
            f"| {run.id} | {run.gpu} | {layout} | {run.measured_s:.3f} | "
            f"{scored.predicted_s:.3f} | {percent(scored.error)} | {run.role} |"
        )
    return rows


def aggregate_rows(aggregates: tuple[Aggregate, ...]) -> list[str]:
    rows = [
        "| by | group | runs | mean abs error | worst error | worst run | mean error |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for a in aggregates:
        mean = f"{a.mean_abs_error * 100:.1f} %"
        rows.append(
            f"| {a.axis} | {a.group} | {a.runs} | {mean} | {percent(a.worst_error)} | "
            f"{a.worst_id} | {percent(a.mean_error)} |"
        )
    return rows


def ranking_rows(pairs: tuple[Comparison, ...]) -> list[str]:
    rows = [
        "| first run | second run | measured ratio | planc's ratio | order |",
        "|---|---|---:|---:|---|",
    ]
    for pair in pairs:
        order = "right" if pair.concordant else "**wrong**"
        rows.append(
            f"| {pair.first} | {pair.second} | {pair.measured_ratio:.3f} | "
            f"{pair.predicted_ratio:.3f} | {order} |"
        )
    return rows


def ordering(corpus: Corpus) -> Ordering:
    """How many pairs planc orders as measured, how far its ratios are from the measured ones
    (the mean and the largest |predicted ratio / measured ratio − 1|), and the categories of
    the paired runs."""
    pairs = corpus.comparisons
    off = [abs(pair.predicted_ratio / pair.measured_ratio - 1) for pair in pairs]
    category = {s.run.id: str(s.run.category) for s in corpus.scored}
    return Ordering(
        pairs=len(pairs),
        right=sum(pair.concordant for pair in pairs),
        mean_ratio_error=sum(off) / len(off) if off else 0.0,
        worst_ratio_error=max(off, default=0.0),
        categories=tuple(
            sorted({category[p.first] for p in pairs} | {category[p.second] for p in pairs})
        ),
    )


def ranking(corpus: Corpus) -> str:
    """The ranking section's summary line."""
    if not corpus.comparisons:
        return "No pairs."
    o = ordering(corpus)
    return (
        f"planc orders {o.right} of {o.pairs} pairs as they measured; its ratio is "
        f"{o.mean_ratio_error * 100:.1f} % from the measured one on average (worst "
        f"{o.worst_ratio_error * 100:.1f} %). The paired runs' categories: "
        f"{', '.join(o.categories)}."
    )


def repeated(corpus: Corpus) -> str:
    """The ranking section's paragraph on runs measured twice: how far apart they are, and how
    planc orders the pairs measured further apart than the widest of them."""
    if not corpus.repeats:
        return "No configuration is measured twice."
    spreads = sorted(abs(pair.measured_ratio - 1) for pair in corpus.repeats)
    widest = spreads[-1]
    beyond = [p for p in corpus.comparisons if abs(p.measured_ratio - 1) > widest]
    listed = "; ".join(
        f"{pair.first} and {pair.second}, {abs(pair.measured_ratio - 1) * 100:.1f} %"
        for pair in corpus.repeats
    )
    return (
        f"{len(corpus.repeats)} pairs of runs are one configuration measured twice: the same "
        "spec on the same software release, published twice "
        "(`planc.perf.validation.repeats`). Their throughputs differ by "
        f"{spreads[0] * 100:.1f} to {widest * 100:.1f} % ({listed}), which planc, pricing "
        "both alike, cannot follow. Two layouts measured closer than that have no order a model "
        f"can be held to. Of the {len(beyond)} pairs below measured further apart than the "
        f"widest repeat, planc orders {sum(p.concordant for p in beyond)} as they measured."
    )


def table(corpus: Corpus) -> str:
    """The whole Markdown page."""
    parts = [
        HEADER,
        "## Runs\n",
        "\n".join(run_rows(corpus)) + "\n",
        "## Aggregates\n",
        "Role over every run; generation, category, source, model preset and each cost planc "
        "does not price (`planc.perf.unpriced`; a run counts under each it has) over the "
        "validation runs only. The mean error is signed: negative where planc is too fast on the "
        "group as a whole.\n",
        "\n".join(aggregate_rows(corpus.aggregates)) + "\n",
        "## Leave one source out\n",
        "Each source group's runs (its fit runs included) priced with the GEMM curves refitted "
        "to the fit runs of the other groups only (`planc.fitting`: the A100's e_max and d½, the "
        "H100's, GB200's and GB300's e_max, the GPUs derived from them scaled alike; the 500 W "
        "H100's clock against the H100's, at the datasheets' 0.8962 where its fit run is held "
        "out; a GPU whose fold has no fit run "
        "starts from its measured matmul ceiling; the H100 curve's d½ is measured on a GEMM table, "
        "validation/gemm_tables.json, in every fold). A group that holds a GPU's whole fit set "
        "shows what planc would say without that source.\n",
        "\n".join(aggregate_rows(corpus.held_out)) + "\n",
        "## Ranking\n",
        "`planc search` ranks layouts by this step time, so what it needs most is the order of "
        "two layouts, not the seconds. Each row is a pair of validation runs that a search could "
        "have chosen between: the same model on the same GPU in the same number format "
        "(precision and FP8/FP4 recipe), measured in one publication (one software stack). The "
        "ratio is the first run's tokens per second per GPU over the second's, measured and as "
        f"planc predicts it; pairs measured within {TIE * 100:g} % of each other are ties and left "
        "out (`planc.perf.validation.comparisons`).\n",
        ranking(corpus) + "\n",
        repeated(corpus) + "\n",
        "\n".join(ranking_rows(corpus.comparisons)) + "\n",
    ]
    return "\n".join(parts)


def accuracy(corpus: Corpus) -> str:
    """accuracy.json: the validation runs' error per GPU generation, per category, per the
    two together, per model preset and per unpriced mechanism (the aggregates' rows)."""

    def rows(axis: str) -> dict[str, Group]:
        return {
            a.group: Group(a.runs, a.mean_abs_error, a.worst_error, a.mean_error)
            for a in corpus.aggregates
            if a.axis == axis
        }

    # A cell's group is `cell_name`'s "GENERATION CATEGORY".
    cells = {tuple(name.split(" ", 1)): row for name, row in rows(CELL).items()}
    return accuracy_json(
        rows("generation"),
        rows("category"),
        cells,
        rows(MODEL),
        rows(UNPRICED),
        ordering(corpus),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default=str(INDEX), help="the corpus index (runs.json)")
    parser.add_argument("-o", "--output", help="write the table to this file")
    parser.add_argument("--check", metavar="FILE", help="exit 1 when FILE is not the current table")
    args = parser.parse_args(argv)
    corpus = score_corpus(args.index)
    text, bars = table(corpus), accuracy(corpus)
    if args.check:
        current = Path(args.check).read_text(encoding="utf-8")
        if current != text or Path(ACCURACY).read_text(encoding="utf-8") != bars:
            print(
                f"{args.check} or {ACCURACY} is stale: run "
                f"python scripts/validation_table.py -o {args.check}"
            )
            return 1
        return 0
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        Path(ACCURACY).write_text(bars, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
