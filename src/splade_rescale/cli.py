"""One command-line entry point, ``splade-rescale <stage>``, that every Snakemake rule calls.

Rules pass configuration fragments as JSON strings (so Snakemake reruns a job when its
fragment changes) and paths as arguments. Errors print one line and exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("splade_rescale")

COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], None], Callable[[argparse.ArgumentParser], None]]] = {}


def command(name: str, arguments: Callable[[argparse.ArgumentParser], None]):
    def register(func: Callable[[argparse.Namespace], None]):
        COMMANDS[name] = (func, arguments)
        return func
    return register


def json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}): {text[:80]}") from None


# --- backbones, norms, rescaling -------------------------------------------------------------

@command("fetch-backbone", lambda p: (
    p.add_argument("--name", required=True),
    p.add_argument("--spec", type=json_arg, required=True, help="the backbone's config entry, as JSON"),
    p.add_argument("--out", required=True, type=Path, help="results/backbones/{name}"),
))
def fetch_backbone_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.backbones import fetch_backbone
    fetch_backbone(args.name, args.spec, args.out)


@command("measure-norms", lambda p: (
    p.add_argument("--model", required=True, type=Path),
    p.add_argument("--probe", type=json_arg, required=True, help="the config's probe section, as JSON"),
    p.add_argument("--out", required=True, type=Path),
    p.add_argument("--label", action="append", default=[], help="key=value stored in the output"),
))
def measure_norms_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.norms import measure_model_dir
    labels = dict(item.split("=", 1) for item in args.label)
    rescale = args.model / "rescale.json"
    if rescale.is_file():
        labels["factor"] = json.loads(rescale.read_text())["factor"]
    measure_model_dir(args.model, args.probe, args.out, labels)


@command("norms-table", lambda p: (
    p.add_argument("--inputs", nargs="+", required=True, type=Path),
    p.add_argument("--md", required=True, type=Path),
    p.add_argument("--csv", required=True, type=Path),
))
def norms_table_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.norms import write_norms_table
    write_norms_table(args.inputs, args.md, args.csv,
                      caption="MLM-head norms of each backbone and of each variant's initial model; "
                              "probe statistics are measured at initialisation on the fixed probe set.")


@command("rescale", lambda p: (
    p.add_argument("--backbone-dir", required=True, type=Path),
    p.add_argument("--variant", required=True),
    p.add_argument("--spec", type=json_arg, required=True, help="the variant's config entry, as JSON"),
    p.add_argument("--backbone-norms", type=Path),
    p.add_argument("--reference-norms", type=Path),
    p.add_argument("--out", required=True, type=Path),
))
def rescale_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.rescale import rescale_backbone
    rescale_backbone(args.backbone_dir, args.out, args.variant, args.spec, args.backbone_norms,
                     args.reference_norms)


@command("validate-config", lambda p: p.add_argument("configfiles", nargs="+", type=Path))
def validate_config_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.config import load_config
    load_config(*args.configfiles)
    print("config ok")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splade-rescale", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (func, arguments) in COMMANDS.items():
        p = sub.add_parser(name, help=(func.__doc__ or "").strip().split("\n")[0] or None)
        arguments(p)
        p.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args.func(args)
    except Exception as exc:  # one line for the user; the traceback only with --verbose
        if args.verbose:
            log.exception("failed")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"splade-rescale {args.command}: error: {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
