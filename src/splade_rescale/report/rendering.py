"""Every output format of a table, rendered from the one :class:`~splade_rescale.report.results.Table`:
Markdown, CSV (raw numbers, marks and seed spreads in their own columns), LaTeX and HTML."""

from __future__ import annotations

import csv
import html
import io

from tabulate import tabulate

from splade_rescale.report.results import Table
from splade_rescale.report.seed_spread import SeedSpread

FORMATS = ("md", "csv", "tex", "html")


def cell(table: Table, r: int, c: int) -> str:
    """Displayed text of a cell, with its significance marks."""
    return table.text(r, c) + table.marks.get((r, c), "")


def render_md(table: Table, footer: str) -> str:
    body = tabulate([[cell(table, r, c) for c in range(len(table.columns))] for r in range(len(table.rows))],
                    headers=[col.label for col in table.columns], tablefmt="pipe", disable_numparse=True)
    return f"**Table: {table.name}.** {table.caption}\n\n{body}\n\n_{footer}_\n"


def render_csv(table: Table, footer: str) -> str:
    """Raw numbers (full precision); marks in a ``<column> marks`` column after each tested column."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    buffer.write(f"# {table.caption}\n# {footer}\n")
    spread = {c for c in range(len(table.columns)) if any(isinstance(row[c], SeedSpread) for row in table.rows)}
    header = []
    for c, col in enumerate(table.columns):
        header += [col.label] + ([f"{col.label} marks"] if c in table.tested_columns else [])
        header += [f"{col.label} {stat}" for stat in ("min", "max", "sd", "n")] if c in spread else []
    writer.writerow(header)
    for r, row in enumerate(table.rows):
        out = []
        for c, value in enumerate(row):
            out.append("" if value is None else value.mean if isinstance(value, SeedSpread) else value)
            if c in table.tested_columns:
                out.append(table.marks.get((r, c), ""))
            if c in spread:
                out += ([value.low, value.high, "" if value.sd is None else value.sd, len(value.values)]
                        if isinstance(value, SeedSpread) else ["", "", "", ""])
        writer.writerow(out)
    return buffer.getvalue()


LATEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                 "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
                 "‖": r"$\|$", "–": "--", "†": r"$^\dagger$", "‡": r"$^\ddagger$", "≥": r"$\geq$"}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)


def render_tex(table: Table, footer: str) -> str:
    align = "".join("r" if any(isinstance(row[c], (int, float, SeedSpread)) and not isinstance(row[c], bool)
                               for row in table.rows) else "l" for c in range(len(table.columns)))
    lines = [r"% needs \usepackage{booktabs}", r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{latex_escape(table.caption)}}}",
             rf"\label{{tab:{table.name.replace('_', '-')}}}", r"\resizebox{\textwidth}{!}{%",
             rf"\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(latex_escape(col.label) for col in table.columns) + r" \\", r"\midrule"]
    for r in range(len(table.rows)):
        lines.append(" & ".join(latex_escape(cell(table, r, c)) for c in range(len(table.columns))) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", r"\par\footnotesize " + latex_escape(footer), r"\end{table}"]
    return "\n".join(lines) + "\n"


def render_html(table: Table, footer: str) -> str:
    """A self-contained page: the Snakemake report shows HTML results inline."""
    def esc(text: str) -> str:
        return html.escape(text, quote=False)

    head = "".join(f"<th>{esc(col.label)}</th>" for col in table.columns)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(cell(table, r, c))}</td>" for c in range(len(table.columns)))
                     + "</tr>" for r in range(len(table.rows)))
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{table.name}</title>"
            "<style>table{border-collapse:collapse;font:13px sans-serif}td,th{border:1px solid #ccc;"
            "padding:2px 6px;text-align:right}caption{text-align:left;padding:4px}</style></head><body>\n"
            f"<table><caption>{esc(table.caption)}<br><small>{esc(footer)}</small></caption>\n"
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>\n</body></html>\n")


RENDERERS = {"md": render_md, "csv": render_csv, "tex": render_tex, "html": render_html}
