"""The estimator, planner and replay as Python calls over the ``vram`` command's code."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import pickle
import re
import tempfile
from typing import Any, Iterator, Mapping, Sequence

from ._vramkit import VramError, run

__all__ = [
    "Estimate", "Plan", "Replay", "Capacity", "estimate", "plan", "replay", "capacity",
    "fit_batch_size", "models", "gpus", "cli", "plan_outcome", "SCHEMA_VERSION",
]

log = logging.getLogger("vramkit")

_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def _flags(options: Mapping[str, Any]) -> list[str]:
    """``micro_batch=4`` -> ``--micro-batch 4``; ``True`` -> a bare flag; ``False``/``None``
    are left out; a list or tuple -> one comma-separated value (``precision=["bf16-amp",
    "bf16"]``)."""
    out: list[str] = []
    for key, value in options.items():
        if not _KEY.match(key):
            raise VramError(f"`{key}` is not a setup keyword (lower-case letters, digits, _)")
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def _call(args: list[str]) -> str:
    """Runs one command in-process; what it says on stderr goes to the ``vramkit`` logger
    (its notes about the input as warnings, progress lines as info)."""
    out, err = run(args)
    for line in err.splitlines():
        if line.strip():
            text = line.removeprefix("vram: ")
            level = logging.WARNING if text.startswith(("note:", "warning:")) else logging.INFO
            log.log(level, "%s", text)
    return out


def _config_dict(model: Any) -> dict | None:
    """The config of a dict, a transformers ``PretrainedConfig`` or a model (``.config``)."""
    if isinstance(model, Mapping):
        return dict(model)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict") and not hasattr(model, "to_dict"):
        model = config
    if hasattr(model, "to_dict") and hasattr(model, "model_type"):
        d = model.to_dict()
        d.setdefault("model_type", model.model_type)
        return d
    return None


@contextlib.contextmanager
def _model_arg(model: Any) -> Iterator[str]:
    """The ``vram`` command's model argument for ``model``: a path, catalog id or Hub id as it is; a
    config (dict, ``PretrainedConfig``, or a model's ``.config``; no weights are touched) as a
    config.json in a temporary folder named after the model, removed afterwards."""
    if isinstance(model, (str, os.PathLike)):
        yield os.fspath(model)
        return
    config = _config_dict(model)
    if config is None:
        raise VramError(
            "model must be a catalog id, a path, a config dict, or a transformers config or "
            f"model; got {type(model).__name__}"
        )
    name = str(config.get("_name_or_path") or config.get("model_type") or "model")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name.rstrip("/").split("/")[-1]) or "model"
    try:
        text = json.dumps(config, default=str)
    except (TypeError, ValueError) as e:
        raise VramError(f"model config is not JSON: {e}") from None
    with tempfile.TemporaryDirectory(prefix="vramkit-") as tmp:
        folder = os.path.join(tmp, name)
        os.mkdir(folder)
        with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
            f.write(text)
        yield folder


def _fmt_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return repr(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


class _Result:
    """A JSON object from the ``vram`` command, its fields readable as attributes."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._data == self._data  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._data))

    def keys(self) -> list[str]:
        """The field names."""
        return list(self._data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (a deep copy), as ``vram ... --json`` prints it."""
        return copy.deepcopy(self._data)


class Estimate(_Result):
    """``vram estimate --json`` as an object: every JSON field is an attribute.

    ``schema_version`` and ``kind`` (``estimate``; ``finetune`` for a LoRA/QLoRA step, ``weights``
    for a checkpoint without a config), ``params``, ``peak_bytes`` (as
    ``torch.cuda.max_memory_allocated()`` would report it),
    ``reserved_bytes``, ``total_bytes`` (what nvidia-smi shows), ``breakdown`` (category ->
    bytes at the peak), ``peak_phase``, ``fits``, ``max_micro_batch`` (training; inference has
    ``max_batch`` and ``max_context``, the latter stopped at ``max_context_limit``),
    ``suggestions`` (when it does not fit), ``headroom_bytes``, ``setup``, ``gpu``, ...
    Fields the estimate does not have (a checkpoint with no config has only parameters)
    read as ``None`` for the names above.
    """

    __slots__ = ()

    params = property(lambda self: self._data.get("params"), doc="Parameters of the model.")
    peak_bytes = property(lambda self: self._data.get("peak_bytes"), doc="Peak allocated bytes.")
    reserved_bytes = property(lambda self: self._data.get("reserved_bytes"), doc="Peak reserved bytes.")
    total_bytes = property(lambda self: self._data.get("total_bytes"), doc="Device total (nvidia-smi).")
    breakdown = property(lambda self: self._data.get("breakdown"), doc="Category -> bytes at the peak.")
    peak_phase = property(lambda self: self._data.get("peak_phase"), doc="Where the peak is.")
    fits = property(lambda self: self._data.get("fits"), doc="Whether the step fits the GPU.")
    max_micro_batch = property(
        lambda self: self._data.get("max_micro_batch"),
        doc="Largest micro-batch that fits (None: none fits, or an inference estimate).",
    )

    def __repr__(self) -> str:
        d = self._data
        if "peak_bytes" not in d:
            return f"Estimate(model={d.get('model')!r}, params={d.get('params')})"
        gpu = d.get("gpu", {}).get("id") if isinstance(d.get("gpu"), dict) else d.get("gpu")
        parts = [
            f"model={d.get('model')!r}",
            f"params={d.get('params'):,}",
            f"peak={_fmt_bytes(d.get('peak_bytes'))} at {d.get('peak_phase')}",
            f"reserved={_fmt_bytes(d.get('reserved_bytes'))}",
            f"needed={_fmt_bytes(d.get('needed_bytes'))}",
            f"total={_fmt_bytes(d.get('total_bytes'))}",
            f"fits={d.get('fits')} on {gpu}",
        ]
        if "max_micro_batch" in d:
            parts.append(f"max_micro_batch={d['max_micro_batch']}")
        if "max_batch" in d:
            parts.append(f"max_batch={d['max_batch']}, max_context={d.get('max_context')}")
        return "Estimate(" + ", ".join(parts) + ")"


_ENGINES = ("deepspeed", "megatron", "accelerate", "torchrun")


class Plan(_Result):
    """One configuration of ``vram plan --json`` (``tp``, ``pp``, ``dp``, ``micro_batch``,
    ``grad_accum``, ``zero_stage``, ``offload``, ``recompute``, ``recompute_layers``,
    ``sequence_parallel``, ``schedule``, ``precision``, ``step_time_s``, ``tokens_per_s``,
    ``mfu``, ``tflops_per_gpu``, ``peak_bytes_per_gpu``, ``bound``, ``time``, ...)."""

    __slots__ = ("_request",)

    def __init__(self, data: Mapping[str, Any], request: tuple[Any, dict[str, Any]]) -> None:
        super().__init__(data)
        object.__setattr__(self, "_request", request)

    def pins(self) -> dict[str, Any]:
        """The ``vram plan`` pins that select exactly this configuration."""
        d = self._data
        recompute = d["recompute"]
        if recompute == "full" and d.get("recompute_layers") is not None:
            recompute = "optimal"  # the fewest layers that fit, as the search chose them
        pins = {
            "tp": d["tp"], "pp": d["pp"], "dp": d["dp"], "micro_batch": d["micro_batch"],
            "zero": d["zero_stage"], "offload": d["offload"], "recompute": recompute,
            "schedule": d["schedule"], "precision": d["precision"],
        }
        if d["sequence_parallel"]:
            pins["sequence_parallel"] = True
        else:
            pins["no_sequence_parallel"] = True
        return pins

    def emit(self, engine: str) -> str:
        """The launch config of this plan for ``engine`` (``"deepspeed"``: JSON config,
        ``"megatron"``: arguments, ``"accelerate"``: YAML, ``"torchrun"``: command and FSDP2
        setup), as ``vram plan ... --emit ENGINE`` writes it."""
        if engine not in _ENGINES:
            raise VramError(f"engine {engine!r} is not one of {', '.join(_ENGINES)}")
        model, options = self._request
        options = {k: v for k, v in options.items() if k not in ("top", "json", "emit")}
        options.update(self.pins())
        with _model_arg(model) as arg:
            return _call(["plan", arg, *_flags(options), "--top", "1", "--emit", engine])

    def __repr__(self) -> str:
        d = self._data
        rc = d.get("recompute")
        if rc == "full" and d.get("recompute_layers") is not None:
            rc = f"full:{d['recompute_layers']}"
        return (
            f"Plan(tp={d.get('tp')}, pp={d.get('pp')}, dp={d.get('dp')}, "
            f"micro_batch={d.get('micro_batch')}, grad_accum={d.get('grad_accum')}, "
            f"zero={d.get('zero_stage')}, sp={d.get('sequence_parallel')}, recompute={rc}, "
            f"schedule={d.get('schedule')}, "
            f"step_time_s={d.get('step_time_s', 0):.3f}, mfu={d.get('mfu', 0):.3f}, "
            f"mem/GPU={_fmt_bytes(d.get('peak_bytes_per_gpu'))})"
        )


class Replay(_Result):
    """``vram replay --json`` as an object: ``events``, ``allocations``, ``capacity_bytes``,
    ``recorded`` and ``policies`` (one dict per allocator policy: peaks, fragmentation,
    would-OOM)."""

    __slots__ = ()

    def __repr__(self) -> str:
        pols = ", ".join(
            f"{p.get('name')}: reserved {_fmt_bytes(p.get('peak_reserved_bytes'))}"
            for p in self._data.get("policies", [])
            if isinstance(p, dict)
        )
        return f"Replay(events={self._data.get('events')}, {pols})"


class Capacity(_Result):
    """``vram capacity --json`` as an object: what vLLM or SGLang would log at start-up.

    ``weights_bytes`` (per GPU), ``non_torch_bytes``, ``activation_peak_bytes``,
    ``cuda_graph_bytes``, ``kv_cache_bytes``, ``kv_cache_tokens``, ``kv_cache_blocks``,
    ``max_concurrency`` (requests of ``max_model_len`` at once), ``starts``,
    ``max_model_len_that_fits``, ``cheapest_change`` (``None`` or ``{"flags": ...}``), ``changes_tried``, ``log``
    (the lines the engine would print), ``assumes``, ``notes`` (what reading the model found),
    ``engine``, ``engine_version``, ``gpu``,
    ``description`` (the text's setup line), ``kv_cache_dtype``. ``vram report`` renders the
    JSON (``to_dict()``) as an HTML page.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        d = self._data
        gpu = d.get("gpu", {}).get("id") if isinstance(d.get("gpu"), dict) else d.get("gpu")
        return (
            f"Capacity(model={d.get('model')!r}, engine={d.get('engine')} {d.get('engine_version')}, "
            f"gpu={gpu}, weights={_fmt_bytes(d.get('weights_bytes'))}, "
            f"kv_cache={_fmt_bytes(d.get('kv_cache_bytes'))} ({d.get('kv_cache_tokens'):,} tokens), "
            f"max_concurrency={d.get('max_concurrency', 0):.2f} at {d.get('max_model_len')}, "
            f"starts={d.get('starts')})"
        )


SCHEMA_VERSION = 2
"""The version of the reports `vram estimate`, `capacity` and `plan` print with ``--json``
(their ``schema_version``; the fields are documented on the report types of the Rust crate
``vram-report``). The objects here read that JSON as it is: every field is an attribute."""


def _json(out: str) -> Any:
    try:
        data = json.loads(out)
    except ValueError as e:  # the command printed something else: a bug, not bad input
        raise RuntimeError(f"vram printed no JSON ({e}): {out[:200]!r}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version is not None and version != SCHEMA_VERSION:
        raise RuntimeError(f"vram printed schema_version {version}; this vramkit reads {SCHEMA_VERSION}")
    return data


def estimate(model: Any, **setup: Any) -> Estimate:
    """Estimates one training or inference step of ``model``.

    ``model``: a path (config.json, a folder holding one, a .safetensors file or index), a
    catalog id (``vramkit.models()``), a Hub id (``"Qwen/Qwen3-8B"``, read through the Hugging
    Face cache: ``revision="v1.0"``, ``hub="modelscope"``), a config dict, or a transformers
    ``PretrainedConfig`` or model (its config only; weights are never touched). ``setup``: the flags of
    ``vram estimate`` as keywords, e.g. ``gpu="a100-80g", micro_batch=4, seq=4096,
    precision="bf16-amp", optimizer="adam8bit", recompute="full", attention="sdpa", zero=3,
    dp=8, tp=2, pp=2, inference=True, batch=16, context=8192``. Defaults are the command's.
    """
    setup.pop("json", None)
    with _model_arg(model) as arg:
        return Estimate(_json(_call(["estimate", arg, "--json", *_flags(setup)])))


def capacity(model: Any, **knobs: Any) -> Capacity:
    """What ``engine`` (``"vllm"``, the default, or ``"sglang"``) would log at start-up for
    ``model`` on ``gpu``: ``vram capacity MODEL --json`` with the engine's knobs as keywords,
    e.g. ``engine="vllm", gpu="a100-80g", gpu_memory_utilization=0.9, max_model_len=8192,
    tensor_parallel_size=2, kv_cache_dtype="fp8"``; SGLang's ``mem_fraction_static=0.85``,
    ``context_length=8192`` (each engine's own flag: SGLang refuses ``max_model_len``, vLLM
    ``context_length``, as the command does).
    ``model`` as in :func:`estimate`."""
    knobs.pop("json", None)
    with _model_arg(model) as arg:
        return Capacity(_json(_call(["capacity", arg, "--json", *_flags(knobs)])))


def fit_batch_size(model: Any, **setup: Any) -> int:
    """The largest micro-batch whose step the estimate fits on ``gpu`` (for ``inference=True``:
    the largest batch at ``context``); 0 when not even 1 fits. Keywords as :func:`estimate`."""
    e = estimate(model, **setup)
    key = "max_batch" if setup.get("inference") else "max_micro_batch"
    return int(e._data.get(key) or 0)


def plan(model: Any, **options: Any) -> list[Plan]:
    """The fastest parallel configurations that fit, best first (``vram plan --json``).

    Required: ``gpu=`` (or ``cluster=``), ``gpus=``, ``global_batch=``, ``seq=``. Pins and
    options are the command's flags as keywords: ``tp``, ``pp``, ``dp``, ``micro_batch``,
    ``recompute``, ``zero``, ``offload``, ``sequence_parallel``, ``schedule``,
    ``precision`` (a list searches several), ``attention``, ``top`` (default 10), ...
    An empty list means nothing fits; :func:`plan_outcome` has the closest configuration
    and the suggestions then.
    """
    data = plan_outcome(model, **options)
    return list(data["plans"])


def plan_outcome(model: Any, **options: Any) -> dict[str, Any]:
    """The whole ``vram plan --json`` object: ``plans`` (a list of :class:`Plan`, best
    first), ``closest`` (when nothing fits: the :class:`Plan` that came closest, else None),
    ``suggestions`` (what would make it fit), ``candidates``, ``estimates``, ..."""
    options.pop("json", None)
    if options.get("emit"):
        raise VramError("use Plan.emit(engine) to write a launch config")
    with _model_arg(model) as arg:
        data = _json(_call(["plan", arg, "--json", *_flags(options)]))
    request = (model, dict(options))
    data["plans"] = [Plan(p, request) for p in data.get("plans", [])]
    closest = data.get("closest")
    data["closest"] = Plan(closest, request) if isinstance(closest, Mapping) else None
    return data


def replay(snapshot: Any, **options: Any) -> Replay:
    """Replays a memory snapshot's alloc/free history through the allocator policies
    (``vram replay --json``). ``snapshot``: a path to a pickle from
    ``torch.cuda.memory._dump_snapshot()``, or the dict ``torch.cuda.memory._snapshot()``
    returns. Options as the command's flags, e.g. ``capacity="8GiB"``."""
    options.pop("json", None)
    if isinstance(snapshot, (str, os.PathLike)):
        return Replay(_json(_call(["replay", os.fspath(snapshot), "--json", *_flags(options)])))
    if not isinstance(snapshot, Mapping):
        raise VramError(
            f"snapshot must be a path or the dict torch.cuda.memory._snapshot() returns; "
            f"got {type(snapshot).__name__}"
        )
    with tempfile.TemporaryDirectory(prefix="vramkit-") as tmp:
        path = os.path.join(tmp, "snapshot.pickle")
        with open(path, "wb") as f:
            pickle.dump(dict(snapshot), f, protocol=4)
        return Replay(_json(_call(["replay", path, "--json", *_flags(options)])))


def models() -> list[dict[str, Any]]:
    """The built-in model catalog (``vram models --json``)."""
    return _json(_call(["models", "--json"]))


def gpus() -> list[dict[str, Any]]:
    """The GPU catalog (``vram gpus --json``)."""
    return _json(_call(["gpus", "--json"]))


def cli(args: Sequence[str]) -> str:
    """Runs any ``vram`` command in-process and returns what it printed, e.g.
    ``vramkit.cli(["estimate", "gpt2", "--micro-batch", "8"])``; raises :class:`VramError`
    with its one-line message when it fails."""
    if isinstance(args, str):
        raise VramError("cli() takes a list of arguments, e.g. ['estimate', 'gpt2']")
    return _call([str(a) for a in args])
