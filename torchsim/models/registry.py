"""Named model configurations and the loader for HF `config.json` files: what `torchsim predict NAME` resolves.

Sits before capture: a name (or a config path) becomes a config, and the config builds a model on the meta
device. Other model families add themselves with `register_model` / `register_family` (e.g. Mixtral).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchsim import MissingExtraError
from torchsim.models import DEFAULT_MODEL as DEFAULT_MODEL  # re-exported: the registry's default name
from torchsim.models.jsonfile import FieldError, loads_fields, shown
from torchsim.models.llama import LlamaConfig, LlamaForCausalLM
from torchsim.models.presets import LLAMA_MODELS

_MODELS: dict[str, Callable[[], Any]] = {}
_FAMILIES: dict[str, Callable[..., Any]] = {}
# Modules that register more names when imported (absent ones are skipped).
_PLUGIN_MODULES = ("torchsim.models.mixtral", "torchsim.models.hf_family")
_BUILDERS: dict[type, Callable[[Any], Any]] = {}
_OTHER: list[Callable[..., Any]] = []  # at most one: the family of every other model_type


def register_model(name: str, make_config: Callable[[], Any]) -> None:
    """Make `name` resolvable by `get_config`; a name registered twice is an error."""
    key = name.lower()
    if key in _MODELS:
        raise ValueError(f"model name {name!r} is already registered")
    _MODELS[key] = make_config


def register_family(model_type: str, from_dict: Callable[..., Any]) -> None:
    """Map an HF `config.json` `model_type` to a config constructor `from_dict(data, name, *, approximate)`."""
    if model_type in _FAMILIES:
        raise ValueError(f"model family {model_type!r} is already registered")
    _FAMILIES[model_type] = from_dict


def register_other_families(from_dict: Callable[..., Any]) -> None:
    """The constructor for a `config.json` whose `model_type` no registered family has (models.hf_family)."""
    _OTHER[:] = [from_dict]


def register_builder(config_type: type, build: Callable[[Any], Any]) -> None:
    """`build(config)` returns the model for configs of `config_type`, on the current default device."""
    _BUILDERS[config_type] = build


def build_model(config: Any, device: str = "meta") -> Any:
    """The nn.Module for a config (or a registered name), built on `device` (meta: no weights allocated)."""
    import torch

    cfg = get_config(config) if isinstance(config, (str, Path)) else config
    _load_plugins()
    build = _BUILDERS.get(type(cfg))
    if build is None:
        known = ", ".join(t.__name__ for t in _BUILDERS)
        raise TypeError(f"no model builder for config type {type(cfg).__name__}; known: {known}")
    with torch.device(device):
        return build(cfg)


def _load_plugins() -> None:
    for mod in _PLUGIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # the module exists but something it needs is missing: say so
                raise


def model_names() -> list[str]:
    _load_plugins()
    return sorted(_MODELS)


def get_config(name_or_path: str | Path, *, approximate: bool = False) -> Any:
    """A model config from a registered name (`llama3-8b`) or a path to an HF `config.json` (`approximate`:
    accept fields torchsim cannot model, each kept in the config's `approximations`).

    >>> get_config("llama3-8b").num_hidden_layers
    32
    """
    text = str(name_or_path)
    if not text.strip():  # Path("") is ".", which would be read as ./config.json
        raise ValueError(f"the model argument is empty ({text!r}); give a model name (e.g. llama3-8b; "
                         "`torchsim predict --help` lists them) or a path to an HF config.json")
    if text.lower() in _MODELS:
        return _MODELS[text.lower()]()
    path = Path(text)
    try:
        is_path = path.suffix == ".json" or path.is_file() or path.is_dir()
    except OSError:  # a name too long for a path: not a file, so a model name (unknown, below)
        is_path = False
    if is_path:
        return load_config_file(path, approximate=approximate)
    _load_plugins()
    if text.lower() in _MODELS:
        return _MODELS[text.lower()]()
    raise KeyError(f"unknown model {shown(text)}; known: {', '.join(model_names())} (or a path to an HF config.json)")


def load_config_file(path: str | Path, *, approximate: bool = False) -> Any:
    """Read an HF-style `config.json` (or a directory holding one) into the matching family's config; fields
    torchsim cannot model are an error naming them, unless `approximate` (models.config_fields)."""
    if not str(path).strip():
        raise ValueError(f"the model config path is empty ({str(path)!r}); give a path to an HF config.json")
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise FileNotFoundError(f"model config file {str(p)!r} does not exist")
    try:
        data = loads_fields(p.read_text(encoding="utf-8"))
    except FieldError as exc:
        raise ValueError(f"model config file {str(p)!r}: {exc}") from None
    except UnicodeDecodeError as exc:  # a binary file (a pickle, a safetensors shard) given as the config
        raise ValueError(f"model config file {str(p)!r} is not a text file (byte {exc.start} is not UTF-8); an HF "
                         "config is JSON") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"model config file {str(p)!r} is not valid JSON: {exc}") from None
    except RecursionError:  # [[[[...]]]] thousands deep: json's recursive decoder gives up
        raise ValueError(f"model config file {str(p)!r}: JSON nested too deeply to be a model config (an HF "
                         "config is an object of fields)") from None
    if not isinstance(data, dict):
        raise ValueError(f"model config file {str(p)!r} must hold a JSON object")
    _load_plugins()
    model_type = str(data.get("model_type", "llama"))
    name = (p.parent.name or p.stem) if p.name == "config.json" else p.stem  # .../qwen2/config.json: qwen2
    try:
        if model_type in _FAMILIES:
            return _FAMILIES[model_type](data, name, approximate=approximate)
        if _OTHER:  # any other causal LM: built by transformers itself (models.hf_family, the hf extra)
            cfg = _OTHER[0](data, name, approximate=approximate)
            from torchsim.lowering.capture import note_config_file

            note_config_file(cfg, str(p))
            return cfg
        raise ValueError(f"model_type {shown(model_type)} has no family")
    except ImportError as exc:
        raise MissingExtraError(f"model config file {str(p)!r} has model_type {shown(model_type)}: torchsim's own "
                                f"families are {', '.join(sorted(_FAMILIES))}; any other is built by HF transformers "
                                f"({exc})") from None
    except ValueError as exc:
        raise ValueError(f"model config file {str(p)!r}: {exc}; torchsim's own families are "
                         f"{', '.join(sorted(_FAMILIES))}, any other model_type is built by HF transformers"
                         if "model_type" in str(exc) else f"model config file {str(p)!r}: {exc}") from None


def _llama(name: str, **kw: Any) -> Callable[[], LlamaConfig]:
    return lambda: LlamaConfig(name=name, **kw)


for _name, _fields in LLAMA_MODELS.items():  # models.presets: the shapes, as plain data
    register_model(_name, _llama(_name, **_fields))
register_builder(LlamaConfig, LlamaForCausalLM)
for _t in ("llama", "mistral"):
    register_family(_t, LlamaConfig.from_dict)

