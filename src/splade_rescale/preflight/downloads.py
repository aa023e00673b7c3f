"""The preflight's check of what a run downloads or reads from outside results/: every Hub model in the
Hugging Face cache or the Hub answering, every ir_datasets id's files under its home or its hosts
answering, every local path there; what a compute node without internet runs on."""

from __future__ import annotations

import importlib.util
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

from splade_rescale.config import SCHEMA_PATH
from splade_rescale.preflight.findings import Finding

REPO = SCHEMA_PATH.parents[2]


def _sources(config: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(config key, kind, value) of everything the run downloads or reads from outside results/."""
    def tokenizer(where: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
        if "repo_id" in spec:
            yield where, "hub", (spec["repo_id"], spec.get("revision", "main"), "tokenizer")
        elif "path" in spec or "package" in spec:
            yield where, "path" if "path" in spec else "package", spec.get("path") or spec.get("package")

    for group in ("backbones", "published_models"):
        for name, spec in (config.get(group) or {}).items():
            where, source = f"{group}.{name}", spec["source"]
            if source == "hf":
                yield where, "hub", (spec["repo_id"], spec.get("revision", "main"), "model")
            elif source in ("local", "sentence_transformers"):
                yield where, "path", spec["path"]
            elif source == "package":
                yield where, "package", spec["package"]
            elif spec.get("tokenizer"):
                yield from tokenizer(f"{where}.tokenizer", spec["tokenizer"])
    for name, spec in config["variants"].items():
        if spec.get("tokenizer"):
            yield from tokenizer(f"variants.{name}.tokenizer", spec["tokenizer"])
    for key in ("queries", "passages"):
        yield f"probe.{key}", "path", config["probe"][key]
    for where, spec in [("training.data", config["training"]["data"]),
                        *((f"datasets.{n}", s) for n, s in config["datasets"].items())]:
        if spec["source"] == "ir_datasets":
            yield where, "ir_datasets", spec["id"]
        for key in ("path", "corpus", "queries", "qrels", "examples"):
            if key in spec:
                yield f"{where}.{key}", "path", spec[key]


def hf_cache(environ: Mapping[str, str]) -> Path:
    """The Hugging Face cache the jobs read (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"]).expanduser()
    home = environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def in_hf_cache(repo_id: str, revision: str, kind: str, cache: Path) -> bool:
    """Whether a model's config and weights (a tokenizer's files) are in the cache, as an offline job needs them."""
    from huggingface_hub import try_to_load_from_cache

    names = ["config.json"] if kind == "model" else ["tokenizer_config.json", "tokenizer.json", "vocab.txt"]
    for name in names:
        found = try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=revision)
        if isinstance(found, str):
            folder = Path(found).parent
            return kind != "model" or any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin"))
    return False


def ir_datasets_local(dataset_id: str, home: Path) -> tuple[bool, set[str]]:
    """Whether every file an ir_datasets id's handlers read (docs store, caches or raw downloads) is under
    ``home``, and the URLs of those that are not."""
    import ir_datasets
    from ir_datasets.util import Cache, Download

    default, urls = str(ir_datasets.util.home_path()), set()

    def here(path: Any) -> bool:
        text = str(path)
        return Path(str(home) + text[len(default):] if text.startswith(default) else text).exists()

    def local(obj: Any, seen: set[int]) -> bool:
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)) or obj is None:
            return True
        seen.add(id(obj))
        if isinstance(obj, Cache) and here(obj._path):
            return True
        if isinstance(obj, Download):
            found = obj._cache_path is not None and here(obj._cache_path)
            urls.update(m.url for m in obj.mirrors if not found and getattr(m, "url", None))
            return found
        children = list(obj) if isinstance(obj, (list, tuple)) else list(getattr(obj, "__dict__", {}).values())
        return all([local(c, seen) for c in children])  # a list: every child's URLs collected

    dataset = ir_datasets.load(dataset_id)
    done = []
    for part in ("docs", "queries", "qrels", "docpairs"):
        if getattr(dataset, f"has_{part}")():
            store = dataset.docs_store() if part == "docs" else None
            done.append(bool(store and here(getattr(store, "path", "")))
                        or local(getattr(dataset, f"{part}_handler")(), set()))
    return all(done), urls


def reachable(urls: set[str], timeout_s: float = 5.0) -> dict[str, bool]:
    """Which hosts of ``urls`` answer HTTPS (any HTTP status counts; proxies from the environment honoured), all
    probed at once within ``timeout_s``: a compute node without internet fails here in seconds, not mid-run."""
    hosts = {urlsplit(u).netloc: u for u in urls}
    answers = dict.fromkeys(hosts, False)

    def probe(host: str, url: str) -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s).close()
            answers[host] = True
        except urllib.error.HTTPError:
            answers[host] = True
        except (OSError, ValueError):
            pass

    threads = [threading.Thread(target=probe, args=item, daemon=True) for item in hosts.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)  # a name lookup ignores the socket timeout: a thread still waiting counts as unreachable
    return answers


def check_sources(config: Mapping[str, Any], environ: Mapping[str, str] = os.environ,
                  timeout_s: float = 5.0) -> list[Finding]:
    """Every model, dataset and local file the run needs: in the caches (what a compute node without internet
    runs on), or its hosts reachable; the Hub asked once, not per model, and not at all with HF_HUB_OFFLINE."""
    cache = hf_cache(environ)
    home = Path(environ.get("IR_DATASETS_HOME") or "~/.ir_datasets").expanduser()
    offline = environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    endpoint = environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    out, hub, remote, cached, present, fetched = [], [], {}, [], [], []
    for where, kind, value in _sources(config):
        if kind == "hub":
            if in_hf_cache(*value, cache):
                cached.append(where)
            else:
                hub.append((where, value[0], value[1]))
        elif kind == "ir_datasets":
            try:
                done, urls = ir_datasets_local(value, home)
            except KeyError:
                out.append(Finding("downloads", False, f"{where}.id = {value!r} is not an ir_datasets id: fix the id"))
                continue
            if done:
                cached.append(where)
            else:
                remote[(where, value)] = urls
        elif kind == "package":
            if importlib.util.find_spec(value) is None:
                out.append(Finding("downloads", False, f"{where}: Python package {value} is not installed: fix: "
                                                       "`make install` (or pip install it)"))
            else:
                present.append(where)
        else:
            path = Path(value).expanduser()
            if (path if path.is_absolute() else REPO / path).exists():
                present.append(where)
            else:
                out.append(Finding("downloads", False, f"{where}: {value} is missing: fix: the path (relative to "
                                                       f"{REPO}), or `make install` for the demo's files"))
    urls = {u for found in remote.values() for u in found} | ({f"{endpoint}/api/models"} if hub and not offline
                                                             else set())
    answers = reachable(urls, timeout_s) if urls else {}
    hub_up = answers.get(urlsplit(endpoint).netloc, False)
    for where, repo_id, revision in hub:
        if hub_up:
            fetched.append(where)
        else:
            why = "HF_HUB_OFFLINE=1" if offline else f"{endpoint} does not answer"
            out.append(Finding("downloads", False, f"{where}: {repo_id}@{revision} is not in the HF cache {cache} and "
                               f"{why}: fix: `huggingface-cli download {repo_id}` on a machine with internet into this "
                               "cache (HF_HOME on a disk the jobs see), then HF_HUB_OFFLINE=1 for the jobs"))
    for (where, dataset_id), found in remote.items():
        down = sorted({urlsplit(u).netloc for u in found if not answers.get(urlsplit(u).netloc)})
        if found and not down:
            fetched.append(where)
        else:
            out.append(Finding("downloads", False, f"{where}: {dataset_id} is not in the ir_datasets cache {home} and "
                               f"{', '.join(down) or 'no host'} did not answer: fix: `snakemake data` (make its "
                               "inputs local) on a node with internet, IR_DATASETS_HOME on a disk the jobs see"))
    for names, what in ((cached, f"in the caches (HF {cache}, ir_datasets {home})"), (present, "there"),
                        (fetched, "not cached, their hosts answer: the run downloads them")):
        if names:
            out.append(Finding("downloads", True, f"{len(names)} of the config's sources {what}: {', '.join(names)}"))
    return out
