"""What-if profiles: TOML overrides with units and provenance, `--hw file.toml` everywhere, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchsim.cli import main
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.registry import builtin_profile
from torchsim.hwmodels.whatif import WhatIfError, derive_profile, load_whatif
from torchsim.lowering.templates import gemm
from torchsim.sim import simulate

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100_fast_hbm.toml"


def write(tmp_path: Path, body: str, name: str = "hw.toml") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def test_overrides_carry_units_and_assumed_provenance(tmp_path: Path) -> None:
    p = write(tmp_path, 'base = "h100-sxm"\ndram_bytes_per_s = "4.0 TB/s"\n'
              'l2_bytes = {value = 60, unit = "MiB", note = "bigger L2"}\nclock_hz = "1.5 GHz"\n')
    hw = get_profile(str(p))
    base = get_profile("h100-sxm")
    assert hw.dram_bytes_per_s.value == pytest.approx(4.0e12)
    assert hw.l2_bytes.value == 60 * 2**20 and hw.l2_bytes.note == "bigger L2"
    assert hw.clock_hz.value == pytest.approx(1.5e9)
    for f in ("dram_bytes_per_s", "l2_bytes", "clock_hz"):
        q = getattr(hw, f)
        assert q.kind == "assumed" and str(p) in q.source and q.unit == getattr(base, f).unit
    # untouched fields keep their provenance; the peak rose with the sustained bandwidth
    assert hw.sm_count == base.sm_count
    assert hw.dram_peak_bytes_per_s.value >= hw.dram_bytes_per_s.value > base.dram_peak_bytes_per_s.value
    assert hw.numbers_hash() != base.numbers_hash()
    assert hw.name == "h100-sxm+hw"


def test_example_file_is_faster_on_a_memory_bound_gemm() -> None:
    fast = get_profile(str(EXAMPLE))
    base = get_profile("h100-sxm")
    assert fast.name == "h100-fast-hbm"
    assert fast.dram_bytes_per_s.value == pytest.approx(1.5 * base.dram_bytes_per_s.value, rel=1e-3)
    r_base = simulate(gemm(1, 4096, 4096, DType.BF16, base), base)
    r_fast = simulate(gemm(1, 4096, 4096, DType.BF16, fast), fast)
    assert r_fast.cycles < r_base.cycles  # GEMV is bandwidth bound: more HBM bandwidth helps
    assert r_base.cycles / r_fast.cycles < 1.5 + 1e-9  # ...never by more than the bandwidth ratio


def test_cli_accepts_a_toml_wherever_a_hardware_name_goes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hw", "show", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "h100-fast-hbm" in out and "assumed" in out
    assert main(["kernel", "gemm", "--m", "64", "--n", "256", "--k", "256", "--hw", str(EXAMPLE), "--json"]) == 0
    assert '"hw": "h100-fast-hbm"' in capsys.readouterr().out


@pytest.mark.parametrize("body, words", [
    ('base = "h100-sxm"\nhbm_bogus = "1 B/s"\n', ["hbm_bogus", "unknown"]),
    ('base = "h100-sxm"\ndram_bytes_per_s = "5 GHz"\n', ["dram_bytes_per_s", "'GHz'", "'B/s'"]),
    ('base = "h100-sxm"\ndram_bytes_per_s = "-2e12 B/s"\n', ["dram_bytes_per_s", "negative"]),
    ('base = "h100-sxm"\nsm_count = "0 SMs"\n', ["sm_count", ">= 1"]),
    ('base = "h100-sxm"\nsm_count = "66.5 SMs"\n', ["sm_count", "whole"]),
    ('base = "h100-sxm"\ndram_bytes_per_s = 5e12\n', ["dram_bytes_per_s", "unit"]),
    ('base = "h100-sxm"\ndram_bytes_per_s = "fast B/s"\n', ["dram_bytes_per_s", "not a number"]),
    ('base = "h100-sxm"\nclock_hz = "0 Hz"\n', ["clock_hz", "> 0"]),
    ('base = "nope"\nsm_count = "1 SMs"\n', ["base", "nope", "h100-sxm"]),
    ('sm_count = "1 SMs"\n', ["base ="]),
    ('base = "h100-sxm"\n', ["overrides no field"]),
    ('base = "h100-sxm"\ndram_bytes_per_s = "1e12 B/s"\ndram_peak_bytes_per_s = "5e11 B/s"\n', ["peak"]),
])
def test_bad_overrides_name_the_field_and_the_file(tmp_path: Path, body: str, words: list[str]) -> None:
    p = write(tmp_path, body)
    with pytest.raises(WhatIfError) as err:
        load_whatif(p, builtin_profile)
    msg = str(err.value)
    assert str(p) in msg
    for w in words:
        assert w in msg, msg


def test_cli_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, 'base = "h100-sxm"\nsm_count = "0 SMs"\n')
    assert main(["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--hw", str(p)]) == 2
    err = capsys.readouterr().err
    assert "sm_count" in err and str(p) in err and "Traceback" not in err
    assert main(["hw", "show", str(tmp_path / "missing.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_sweep_style_numbers_and_aliases() -> None:
    base = get_profile("a100-sxm")
    hw = derive_profile(base, {"hbm_bandwidth": 2.5e12, "sm_count": 54}, where="sweep point 3")
    assert hw.dram_bytes_per_s.value == 2.5e12 and hw.sms == 54
    assert hw.sm_count.source.startswith("what-if sweep point 3")
    with pytest.raises(WhatIfError, match="sweep point 3.*tensor_inflight_subops"):
        derive_profile(base, {"tensor_inflight_subops": 0}, where="sweep point 3")


@pytest.mark.parametrize(("body", "words"), [
    ('base = "h100-sxm"\ndram_bytes_per_s = "1e-300 B/s"\n', ["dram_bytes_per_s", "10000x"]),
    ('base = "h100-sxm"\nsm_count = "lots"\n', ["'lots' is not a number", '"132 SMs"']),
    ('base = "h100-sxm"\nsm_count = true\n', ["sm_count", "True"]),
    ('base = "h100-sxm"\ntma_bytes_per_clk_per_sm = "0 B/clk/SM"\n', ["tma_bytes_per_clk_per_sm", "> 0"]),
    ('base = "h100-sxm"\nx = ' + "{a = " * 600 + "1" + "}" * 600 + "\n", ["nested too deeply"]),
])
def test_hostile_files_get_one_clear_error(tmp_path: Path, body: str, words: list[str]) -> None:
    p = write(tmp_path, body)
    with pytest.raises(WhatIfError) as err:
        load_whatif(p, builtin_profile)
    for w in words:
        assert w in str(err.value)


def test_binary_file_is_named(tmp_path: Path) -> None:
    p = tmp_path / "bin.toml"
    p.write_bytes(b"\x80\x81\x00 base")
    with pytest.raises(WhatIfError, match="bin.toml: not a text file"):
        load_whatif(p, builtin_profile)


def test_a_bare_count_is_read_in_its_unit(tmp_path: Path) -> None:
    hw = load_whatif(write(tmp_path, 'base = "h100-sxm"\nsm_count = 66\n'), builtin_profile)
    assert hw.sms == 66
    with pytest.raises(WhatIfError, match="give a unit"):
        load_whatif(write(tmp_path, 'base = "h100-sxm"\ndram_bytes_per_s = 4e12\n'), builtin_profile)
