"""Property-based fuzzing of torchsim's input boundaries: generated malformed model configs, what-if overrides,
kernel-graph JSON and command lines. Each either works or raises torchsim's own error type with a message naming
the input; never a bare KeyError/IndexError/TypeError/ZeroDivisionError, never a hang (a deadline per case)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchsim.graph import GraphError, KernelGraph
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.whatif import WhatIfError, derive_profile, override_fields
from torchsim.models.llama import LlamaConfig

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048}
WILD = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                                        st.integers(), max_size=2))
H100 = get_profile("h100-sxm")
FIELDS = sorted(override_fields(H100))


@FUZZ
@given(st.dictionaries(st.sampled_from([*BASE, "rope_theta", "rms_norm_eps", "head_dim", "tie_word_embeddings"]),
                       WILD, min_size=1, max_size=4))
def test_model_configs(changes: dict[str, Any]) -> None:
    try:
        cfg = LlamaConfig.from_dict({**BASE, **changes}, "fuzz-cfg")
    except ValueError as exc:
        assert "fuzz-cfg" in str(exc) and any(k in str(exc) for k in changes), str(exc)
    else:
        assert cfg.param_count() > 0 and cfg.head_dim_value > 0


RAW = st.one_of(WILD, st.builds(lambda v, u: f"{v} {u}", st.floats(allow_nan=True, allow_infinity=True),
                                st.sampled_from(["B/s", "TB/s", "Hz", "GHz", "SMs", "cycles", "W", "x", ""])))


@FUZZ
@given(st.sampled_from(FIELDS), RAW)
def test_what_if_overrides(field: str, raw: Any) -> None:
    try:
        hw = derive_profile(H100, {field: raw}, where="fuzz.toml", bare_numbers=False)
    except WhatIfError as exc:
        assert "fuzz.toml" in str(exc), str(exc)
    else:
        assert getattr(hw, field).value >= 0


def _graph_json() -> dict[str, Any]:
    from torchsim.graph import DType
    from torchsim.lowering.templates.norms import rmsnorm

    return json.loads(rmsnorm(4, 256, DType.BF16, H100).dumps())


GOOD = _graph_json()
PATHS = [("classes", 0, "graph", "nodes", 0, "op"), ("classes", 0, "graph", "nodes", 0, "unit"),
         ("classes", 0, "graph", "nodes", 0, "group"), ("classes", 0, "graph", "nodes", 0, "tile"),
         ("classes", 0, "graph", "nodes", 0, "barrier"), ("classes", 0, "graph", "nodes", 0, "work"),
         ("classes", 0, "graph", "edges", 0), ("classes", 0, "graph", "dtype"), ("classes", 0, "params"),
         ("classes", 0, "param_names"), ("classes", 0, "threads"), ("classes", 0, "graph", "tiles", 0, "space"),
         ("classes", 0, "graph", "nodes"), ("classes",), ("name",)]


@FUZZ
@given(st.sampled_from(PATHS), WILD)
def test_kernel_graph_json(path: tuple[Any, ...], value: Any) -> None:
    doc = json.loads(json.dumps(GOOD))
    target = doc
    try:
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
    except (IndexError, KeyError, TypeError):
        return  # the path does not exist in this graph (e.g. no edges): nothing to mutate
    try:
        KernelGraph.loads(json.dumps(doc))
    except GraphError as exc:
        assert str(exc), "empty message"
    except ValueError as exc:  # a builder's own check (TileDesc, ExecGroup): still a ValueError naming the thing
        assert str(exc)


ROUTING = {"format": "torchsim.routing", "version": 1, "num_experts": 4, "top_k": 2, "tokens": 8,
           "tokens_per_expert": [[4, 4, 4, 4], [8, 0, 6, 2]]}
ROUTING_PATHS = [("format",), ("version",), ("num_experts",), ("top_k",), ("tokens",), ("tokens_per_expert",),
                 ("tokens_per_expert", 0), ("tokens_per_expert", 1, 2), ("model",)]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(ROUTING_PATHS), WILD), min_size=1, max_size=3))
def test_routing_files(changes: list[tuple[tuple[Any, ...], Any]]) -> None:
    """A routing JSON file with damaged fields loads as checked counts or raises ValueError naming the file."""
    import tempfile
    from pathlib import Path

    from torchsim.models.routing_io import load_routing

    doc = json.loads(json.dumps(ROUTING))
    for path, value in changes:
        target: Any = doc
        try:
            for k in path[:-1]:
                target = target[k]
            target[path[-1]] = value
        except (IndexError, KeyError, TypeError):
            continue
    with tempfile.TemporaryDirectory() as d:
        file = Path(d) / "fuzz_routing.json"
        file.write_text(json.dumps(doc, allow_nan=True))
        try:
            counts = load_routing(file)
        except ValueError as exc:
            assert str(file) in str(exc), str(exc)
        else:
            assert counts.num_experts > 0 and counts.top_k >= 1
            assert all(c >= 0 for row in counts.counts for c in row)


TOML_LINE = st.one_of(
    st.builds(lambda k, v: f"{k} = {json.dumps(v)}", st.sampled_from([*FIELDS[:40], "base", "name", "bogus_field"]),
              st.one_of(st.text(max_size=10), st.integers(-10**6, 10**6), st.booleans(),
                        st.floats(allow_nan=False, allow_infinity=False), st.builds(
                            lambda v, u: f"{v} {u}", st.floats(allow_nan=True, allow_infinity=True),
                            st.sampled_from(["B/s", "Hz", "SMs", "cycles", "W", ""])))),
    st.text(max_size=30))


@FUZZ
@given(st.lists(TOML_LINE, max_size=5))
def test_what_if_files(lines: list[str]) -> None:
    """A what-if TOML file, well-formed or not, is a profile or one WhatIfError naming the file."""
    import tempfile
    from pathlib import Path

    from torchsim.hwmodels.registry import builtin_profile
    from torchsim.hwmodels.whatif import load_whatif

    with tempfile.TemporaryDirectory() as d:
        file = Path(d) / "fuzz_profile.toml"
        file.write_text('base = "h100-sxm"\n' + "\n".join(lines) + "\n")
        try:
            hw = load_whatif(file, builtin_profile)
        except WhatIfError as exc:
            assert str(file) in str(exc), str(exc)
        else:
            assert hw.sm_count.value >= 1 and hw.clock_hz.value > 0


@FUZZ
@given(st.sampled_from([["predict", "--batch"], ["predict", "--decode"], ["predict", "--workers"],
                        ["kernel", "gemm", "--m", "64", "--n", "64", "--k"], ["compare", "--hw"], ["sweep", "--jobs"],
                        ["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--stages"]]),
       st.one_of(st.integers(-10**10, -1), st.integers(10**9, 10**12).map(str),
                 st.text(max_size=6).filter(lambda t: not t.strip().lstrip("+-").isdigit())))
def test_command_lines_fail_fast(prefix: list[str], value: Any) -> None:
    from torchsim import cli

    text = str(value)  # every generated value is out of range or not a number: each must fail before any work
    assert cli.main([*prefix, text]) == 2


@pytest.mark.parametrize(("change", "words"), [
    (lambda g: g["classes"][0]["graph"]["nodes"][0].__setitem__("op", "FROBNICATE"), ["FROBNICATE"]),
    (lambda g: g["classes"][0]["graph"]["nodes"][0].__setitem__("group", 99), ["execution group 99"]),
    (lambda g: g["classes"][0]["graph"]["nodes"][0].__setitem__("tile", 10**6), ["tile 1000000"]),
    (lambda g: g["classes"][0]["graph"]["nodes"][0].__setitem__("work", 1e300), ["invalid work"]),
    (lambda g: g["classes"][0]["graph"]["nodes"].clear(), ["no nodes"]),
    (lambda g: g["classes"][0].__setitem__("params", "lots"), ["params must be a list of rows"]),
    (lambda g: g["classes"][0].__setitem__("params", [[0, 1]]), ["params row 0", "param_names"]),
])
def test_kernel_graph_regressions(change: Any, words: list[str]) -> None:
    doc = json.loads(json.dumps(GOOD))
    change(doc)
    with pytest.raises((GraphError, ValueError)) as err:
        KernelGraph.loads(json.dumps(doc))
    assert all(w in str(err.value) for w in words), str(err.value)


def test_graph_json_that_does_not_parse() -> None:
    with pytest.raises(GraphError, match="does not parse"):
        KernelGraph.loads("{not json")
