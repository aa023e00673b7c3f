"""Experiment configuration: schema validation with one-line errors, and derived values.

The Snakefile calls :func:`validate_config` before any job runs, so a typo in a key, an
unknown backbone name or an impossible factor stops the workflow with a message that names
the key, the value and what is expected, and nothing is written.
"""

from __future__ import annotations

import math
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

import yaml

from splade_rescale.errors import ConfigError  # also importable from here, as before
from splade_rescale.runs import PUBLISHED_RUN, check_seeds

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    with open(path) as f:
        return yaml.safe_load(f)


def _key_path(error: Any) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def _describe(error: Any) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        return (f"unknown key(s) {', '.join(map(repr, extra))} under {_key_path(error)}; "
                f"expected one of: {', '.join(allowed)}")
    if error.validator == "required":
        return f"{_key_path(error)}: {error.message}"
    return f"{_key_path(error)} = {error.instance!r}: {error.message}"


def parse_factor(value: float | int | str, key: str = "factor") -> float:
    """A head scale factor from a number or a fraction string such as ``1/16``; must be > 0."""
    try:
        factor = float(Fraction(str(value).strip()))
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{key} = {value!r}: expected a positive number or fraction such as 1/16") from None
    if not factor > 0:
        raise ConfigError(f"{key} = {value!r}: the head scale factor must be > 0 (1/16 rescales by k = 16)")
    return factor


# Query length for BEIR sets unless a dataset sets its own: naver/splade's BEIR evaluation
# (splade/beir_eval.py, max_length of conf/train/config/splade.yaml) and Pyserini's BEIR
# SPLADE++ ED 2CR runs (SpladeQueryEncoder, max_length=256) both cut queries at 256 tokens.
BEIR_QUERY_MAX_LENGTH = 256


def query_max_length(encoding: dict[str, Any], dataset: dict[str, Any]) -> int:
    """A dataset's query length: its ``query_max_length``, else ``encoding.beir_query_max_length``
    for BEIR sets (long ArguAna-style queries), else ``encoding.query_max_length``."""
    if dataset.get("query_max_length") is not None:
        return int(dataset["query_max_length"])
    if dataset.get("metrics") == "beir":
        return int(encoding.get("beir_query_max_length", BEIR_QUERY_MAX_LENGTH))
    return int(encoding.get("query_max_length", 32))


# The folders an experiment's outputs are made of (results/{experiment}/backbones, ...). Before outputs
# went under results/{experiment}/, they lay at the top of results/: such a folder there is an old run.
RESULT_FOLDERS = ("backbones", "norms", "models", "training", "data", "settings", "encoded", "indexes", "runs",
                  "metrics", "summary", "tables", "figures", "logs", "benchmarks")


def check_results_layout(results: Path) -> None:
    """Refuse a ``results/`` that holds a run of the old layout (one experiment at its top): its files
    would be neither reused nor updated, and silently left to pass for current ones."""
    old = [name for name in RESULT_FOLDERS if (results / name).is_dir()]
    if old:
        raise ConfigError(
            f"{results}/{old[0]}/ is a run of the old layout (outputs at the top of {results}/, now under "
            f"{results}/<experiment>/); move it into its experiment's folder (mkdir {results}/demo && mv "
            f"{' '.join(f'{results}/{n}' for n in old)} {results}/demo/) or delete it; nothing was run")


def validate_config(config: dict[str, Any], schema: dict[str, Any] | None = None) -> None:
    """Raise :class:`ConfigError` with one line for the first problem found."""
    import jsonschema  # only workflow-config validation needs it (GPU images may lack it)

    check_shifts(config)
    schema = schema or load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if errors:
        error = jsonschema.exceptions.best_match(errors) or errors[0]
        raise ConfigError(_describe(error))

    backbones = config["backbones"]
    variants = config["variants"]
    if config["experiment"] in RESULT_FOLDERS:
        raise ConfigError(f"experiment = {config['experiment']!r}: the name is one of the folders inside "
                          f"results/<experiment>/ ({', '.join(RESULT_FOLDERS)}); choose another")
    if config["training"].get("seeds") is not None:
        check_seeds(config["training"]["seeds"], "training.seeds")
    if "bm25" in backbones:
        raise ConfigError("backbones.bm25: the name 'bm25' is reserved for the BM25 rows; rename it")
    reference = config["reference_backbone"]
    if reference not in backbones:
        raise ConfigError(f"reference_backbone = {reference!r} is not a backbone; "
                          f"expected one of: {', '.join(backbones)}")
    for name, variant in variants.items():
        if variant["policy"] == "constant":
            parse_factor(variant["factor"], key=f"variants.{name}.factor")
        elif variant["policy"] == "vocab_transfer":
            check_vocab_transfer(name, variant)
        elif variant["policy"] == "logit_shift":
            if "factor" in variant:
                parse_factor(variant["factor"], key=f"variants.{name}.factor")
        elif variant["reference"] not in backbones:
            raise ConfigError(f"variants.{name}.reference = {variant['reference']!r} is not a backbone; "
                              f"expected one of: {', '.join(backbones)}")
    published_models = config.get("published_models") or {}
    for name in published_models:
        if name in backbones or name == "bm25":
            raise ConfigError(f"published_models.{name}: the name is taken by a backbone (or BM25); rename it")
    if PUBLISHED_RUN in variants:
        raise ConfigError(f"variants.{PUBLISHED_RUN}: the name is reserved for the runs of published_models "
                          f"(results/<experiment>/models/<name>/{PUBLISHED_RUN}/); rename it")
    published = {f"published_models.{n}": (s.get("published") or {}) for n, s in published_models.items()}
    published["bm25"] = (config.get("bm25") or {}).get("published") or {}
    for where, figures in published.items():
        for dataset in figures:
            if dataset != "source" and dataset not in config["datasets"]:
                raise ConfigError(f"{where}.published.{dataset}: not a dataset of this config; "
                                  f"remove it or add the dataset (datasets: {', '.join(config['datasets'])})")
    recipes = config.get("recipes", {})
    recipe = config["training"]["recipe"]
    if recipes and recipe not in recipes:
        raise ConfigError(f"training.recipe = {recipe!r} is not a recipe in config/recipes.yaml; "
                          f"expected one of: {', '.join(recipes)}")
    for backbone, per_backbone in config["training"].get("overrides", {}).items():
        if backbone not in backbones:
            raise ConfigError(f"training.overrides.{backbone}: unknown backbone; expected one of: "
                              f"{', '.join(backbones)}")
        if not isinstance(per_backbone, dict):
            raise ConfigError(f"training.overrides.{backbone} = {per_backbone!r}: expected a mapping")
        seed_lists = {f"training.overrides.{backbone}.seeds": per_backbone.get("seeds")}
        seed_lists.update({f"training.overrides.{backbone}.{v}.seeds": (per_backbone.get(v) or {}).get("seeds")
                           for v in variants if isinstance(per_backbone.get(v), dict)})
        for key, seeds in seed_lists.items():
            if seeds is not None:
                check_seeds(seeds, key)
    lengths = {f"encoding.{key}": config["encoding"].get(key)
               for key in ("query_max_length", "beir_query_max_length", "doc_max_length")}
    lengths.update({f"datasets.{name}.query_max_length": spec.get("query_max_length")
                    for name, spec in config["datasets"].items()})
    for key, length in lengths.items():
        for name, spec in backbones.items():
            limit = spec.get("max_length")
            if length is not None and limit is not None and length > limit:
                raise ConfigError(f"{key} = {length} exceeds backbones.{name}.max_length = {limit}")


def check_shifts(config: dict[str, Any]) -> None:
    """Each variant's ``shift`` and ``target_nnz``, in one line naming the key, before the schema's less
    direct messages: only ``logit_shift`` takes a shift and only ``vocab_transfer`` a target_nnz; a shift
    is finite, and ``reference`` needs a reference backbone."""
    variants = config.get("variants")
    for name, variant in (variants.items() if isinstance(variants, dict) else ()):
        if not isinstance(variant, dict):
            continue
        if "target_nnz" in variant and variant.get("policy") != "vocab_transfer":
            raise ConfigError(f"variants.{name}.target_nnz: policy {variant.get('policy')!r} takes no target_nnz; "
                              "remove it, or set policy: vocab_transfer")
        if "shift" not in variant:
            continue
        shift, key = variant["shift"], f"variants.{name}.shift"
        if variant.get("policy") != "logit_shift":
            raise ConfigError(f"{key}: policy {variant.get('policy')!r} takes no shift; remove it, or set "
                              f"policy: logit_shift")
        if shift == "reference":
            if not config.get("reference_backbone"):
                raise ConfigError(f"{key} = reference needs reference_backbone (the backbone whose active "
                                  "terms on the probe passages the shift matches); set it, or give a number")
        elif isinstance(shift, bool) or not isinstance(shift, (int, float)) or not math.isfinite(shift):
            raise ConfigError(f"{key} = {shift!r}: expected a finite number (15 = SPARSEUP's) or reference")


def check_vocab_transfer(name: str, variant: dict[str, Any]) -> None:
    """A ``vocab_transfer`` variant's tokenizer exists and its ``target_nnz`` fits its vocabulary.

    A Hub tokenizer not yet in the local cache is checked when the variant's init job downloads it.
    """
    from splade_rescale.tokenizers import tokenizer_folder

    if "factor" in variant:
        parse_factor(variant["factor"], key=f"variants.{name}.factor")
    folder = tokenizer_folder(variant["tokenizer"], f"variants.{name}.tokenizer", offline=True)
    target = variant.get("target_nnz")
    if folder is None or not isinstance(target, (int, float)):
        return
    from transformers import AutoTokenizer

    size = len(AutoTokenizer.from_pretrained(str(folder)))
    if target > size:
        raise ConfigError(f"variants.{name}.target_nnz = {target} exceeds the vocabulary of "
                          f"variants.{name}.tokenizer ({size} tokens); fix: a number of active terms <= {size}")


def load_config(*paths: str | Path) -> dict[str, Any]:
    """A config as the workflow sees it (workflow/rules/common.smk): the files merged left to right as
    Snakemake merges --configfile (nested keys too), config/recipes.yaml's recipes under the config's,
    validated, the schema's defaults filled."""
    from snakemake.utils import update_config, validate

    config: dict[str, Any] = {}
    for path in paths:
        with open(path) as f:
            update_config(config, yaml.safe_load(f) or {})
    with open(SCHEMA_PATH.parents[2] / "config" / "recipes.yaml") as f:
        config["recipes"] = {**yaml.safe_load(f)["recipes"], **config.get("recipes", {})}
    validate_config(config)
    validate(config, str(SCHEMA_PATH))
    return config


def gpus_per_job(config: Mapping[str, Any]) -> int:
    """GPUs a model job (train, encode) asks the scheduler for.

    The scheduler cannot see what `device: auto` will find inside the job, so the request
    follows `gpus_per_job` (0 or 1): by default 1, or 0 when `device: cpu`. A cluster
    without GPUs sets `gpus_per_job: 0` (a GPU request fails there at sbatch); `device: auto`
    then runs on the CPU. A contradiction with `device` is a ConfigError.
    """
    device = str(config.get("device", "auto"))
    gpus = config.get("gpus_per_job")
    if gpus is None:
        return 0 if device == "cpu" else 1
    if device == "cpu" and gpus > 0:
        raise ConfigError(f"gpus_per_job: {gpus} contradicts device: cpu (set gpus_per_job: 0, or device: auto)")
    if device.startswith("cuda") and gpus == 0:
        raise ConfigError(f"gpus_per_job: 0 contradicts device: {device} (a CUDA job needs a GPU)")
    return int(gpus)


def local_threads(config: dict[str, Any], cores: int, gpus: int) -> dict[str, int]:
    """Threads of the train, encode and Lucene jobs of a run on one machine of ``cores`` cores
    running up to ``gpus`` GPU jobs at once (0: the model jobs run on the CPU).

    Snakemake starts a job only when its threads (capped at ``--cores``) are free: a Lucene job
    declared with every core (12 threads on 8 cores) holds them for hours while the GPU waits. And
    the paper's indexes and searches need about six core-hours per GPU-hour (``plan``), so a GPU
    job that keeps four of eight cores leaves Lucene too few and the GPU waits all the same. So a
    GPU job gets its configured threads up to a quarter of the cores per GPU (at least one; its
    host threads only feed the device), and each index or search job the cores the GPU jobs leave.
    Without GPU jobs the configured threads stand. Threads change how fast a job runs, not what
    it writes: no job reruns.
    """
    train, encode = int(config["training"]["threads"]), int(config["encoding"]["threads"])
    lucene = int(config["retrieval"]["threads"])
    if gpus <= 0:
        return {"train": train, "encode": encode, "lucene": lucene}
    per_gpu_job = max(1, min(max(train, encode), cores // (4 * gpus)))
    return {"train": min(train, per_gpu_job), "encode": min(encode, per_gpu_job),
            "lucene": max(1, min(lucene, cores - per_gpu_job * gpus))}


def gpus_fed(config: dict[str, Any], cores: int, gpus: int, core_h_per_gpu_h: float) -> dict[str, int]:
    """What ``cores`` give ``gpus`` GPUs on one machine: GPU jobs that can hold their threads at once
    (``at_once``), GPUs the cores keep busy (``busy``) and the fewest ``--cores`` that keep all busy
    (``cores_for_all``).

    Why: each GPU job holds its threads (:func:`local_threads`), and every GPU-hour leaves the index
    and search jobs ``core_h_per_gpu_h`` core-hours (the bill's ratio, ``make plan``). Cores short of
    a GPU's thread plus its share of that idle the GPUs, which a run would otherwise not say.
    """
    def per_job(c: int) -> int:  # threads a GPU job holds at --cores c
        threads = local_threads(config, c, gpus)
        return min(threads["train"], threads["encode"])

    held = per_job(cores)
    top = gpus * (int(config["training"]["threads"]) + int(config["encoding"]["threads"]) + math.ceil(core_h_per_gpu_h))
    cores_for_all = next(c for c in range(max(1, cores), max(cores, top) + 1)
                         if gpus * (per_job(c) + core_h_per_gpu_h) <= c)
    busy = max(1, min(gpus, int(cores / (held + core_h_per_gpu_h))))
    return {"at_once": min(gpus, cores // held), "busy": busy, "cores_for_all": cores_for_all}


def host_memory_mb(root: Path = Path("/")) -> int:
    """The memory (MB) this process and its jobs may use together: the machine's, or less where a cgroup
    caps it (a container's limit, a Kubernetes pod's, a SLURM job's; v2 ``memory.max``, v1
    ``memory.limit_in_bytes``, on this process's cgroup and those above it)."""
    meminfo = (root / "proc/meminfo").read_text()
    limits = [int(re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M).group(1)) * 1024]
    cgroups = root / "sys/fs/cgroup"
    for line in (root / "proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and not controllers:
            folder, name = cgroups, "memory.max"
        elif "memory" in controllers.split(","):
            folder, name = cgroups / "memory", "memory.limit_in_bytes"
        else:
            continue
        for part in [Path(path.lstrip("/")), *Path(path.lstrip("/")).parents]:
            value = (folder / part / name).read_text().strip() if (folder / part / name).is_file() else ""
            if value.isdigit():
                limits.append(int(value))
    return min(limits) // 10**6


WSL_DRIVER = Path("/usr/lib/wsl/lib/libcuda.so")  # NVIDIA's CUDA driver as WSL2 mounts it


def visible_device_ids(environ: Mapping[str, str] = os.environ, dev: Path = Path("/dev"),
                       wsl_driver: Path = WSL_DRIVER) -> list[str]:
    """The NVIDIA GPUs this process may use, as ids CUDA accepts in CUDA_VISIBLE_DEVICES, each once,
    without importing torch: the variable's entries where set (ordinals or UUIDs, up to a "-1", which
    hides the rest, as CUDA reads it); else CUDA's ordinals 0..n-1 of the n /dev/nvidiaN files this
    process can open, or the container runtime's NVIDIA_VISIBLE_DEVICES where more files show than it lists.

    Why the count and not the N: a container (``docker run --gpus '"device=2,5"'``, Kubernetes) keeps
    the host's numbers, /dev/nvidia2 and /dev/nvidia5, while CUDA calls those GPUs 0 and 1. The device
    files are what the container runtime hands over, so their count is what CUDA enumerates; reading
    them needs no torch import (seconds), no NVML and no ``nvidia-smi`` (absent from many images).
    A privileged pod, or ``-v /dev:/dev``, shows every GPU of the host, those allocated to others too:
    there the runtime's list (host ids, PCI order: what CUDA_DEVICE_ORDER=PCI_BUS_ID numbers) says
    which are this one's, and a file the device cgroup or its mode forbids is not counted.
    WSL2 shows no /dev/nvidiaN: its GPUs come through /dev/dxg, with NVIDIA's driver in
    /usr/lib/wsl/lib; CUDA's first GPU (ordinal 0) is then the pool, unless CUDA_VISIBLE_DEVICES names more."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        ids = [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",")]
        # "0,0" is one GPU: a pool naming it twice would have a two-GPU job wait for a second claim on it
        return list(dict.fromkeys(d for d in (ids[:ids.index("-1")] if "-1" in ids else ids) if d))
    count = sum(1 for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name) and _can_open(p))
    allocated = runtime_devices(environ)
    if allocated is not None and count > len(allocated):
        return allocated
    if not count and wsl_gpu(dev, wsl_driver):
        count = 1
    return [str(i) for i in range(count)]


def runtime_devices(environ: Mapping[str, str] = os.environ) -> list[str] | None:
    """The GPUs NVIDIA's container runtime allocated (NVIDIA_VISIBLE_DEVICES as a list, each once; "none":
    []), or None where it names no list ("all", "void", empty or unset: the device files say)."""
    value = environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if value == "none":
        return []
    if value in ("", "all", "void"):
        return None
    return list(dict.fromkeys(d.strip() for d in value.split(",") if d.strip()))


def _can_open(device: Path) -> bool:
    try:
        os.close(os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def wsl_gpu(dev: Path = Path("/dev"), driver: Path = WSL_DRIVER) -> bool:
    """Whether this is WSL2 with NVIDIA's driver: GPUs behind /dev/dxg, no /dev/nvidiaN to count."""
    return (dev / "dxg").exists() and driver.exists()
