"""PyTorch's three elementwise code paths: the lowering picks the one an eager op launches from its operands'
layouts, and the strided (legacy) kernel costs its offset arithmetic and narrow accesses, the vectorized one not."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torchsim.graph import DType  # noqa: E402
from torchsim.hwmodels import get_profile  # noqa: E402
from torchsim.lowering.lowerings import pytorch_path  # noqa: E402
from torchsim.lowering.opgraph import OpNode, TensorSpec  # noqa: E402
from torchsim.lowering.templates.elementwise import PATHS, elementwise, index_ops  # noqa: E402
from torchsim.prediction.repeats import simulate_kernel  # noqa: E402

aten = torch.ops.aten
BF, F32 = DType.BF16, DType.FP32


def node(ins: list[TensorSpec], out: TensorSpec) -> OpNode:
    return OpNode("n", aten.mul.Tensor, tuple(f"i{k}" for k in range(len(ins))), tuple(ins), (out,), (), "m", "M",
                  "x.py:1")


def test_paths_follow_the_operands_layouts() -> None:
    q = TensorSpec((1, 32, 2048, 128), BF)
    assert pytorch_path(node([q, q], q)) == {}  # contiguous, one dtype: vectorized
    cos = TensorSpec((1, 1, 2048, 128), BF)  # broadcast over heads
    assert pytorch_path(node([q, cos], q)) == {"path": "strided", "dims": 3, "operands": 3}
    t = TensorSpec((1, 32, 2048, 128), BF, contiguous=False)  # a transposed view
    assert pytorch_path(node([t], q))["path"] == "strided"
    assert pytorch_path(node([TensorSpec((2048, 4096), BF)], TensorSpec((2048, 4096), F32))) == {"path": "cast"}
    scalar = TensorSpec((1,), F32)  # a 0-d/1-element operand is a scalar, not a layout
    assert pytorch_path(node([q, scalar], q)) == {}


def test_the_strided_kernel_pays_for_its_offsets() -> None:
    hw = get_profile("h100-sxm")
    n = 64 << 20
    vec = simulate_kernel(elementwise(n, 1, 1, "mul", BF, hw), hw)
    strided = simulate_kernel(elementwise(n, 1, 1, "mul", BF, hw, "strided", 4, 3), hw)
    fewer_dims = simulate_kernel(elementwise(n, 1, 1, "mul", BF, hw, "strided", 1, 3), hw)
    assert strided.dram_bytes == pytest.approx(vec.dram_bytes, rel=0.01)  # the same bytes move
    assert strided.time_s > 1.5 * vec.time_s and fewer_dims.time_s < strided.time_s
    assert vec.bound.startswith("DRAM")
    assert index_ops(4, 3) == 4 * 7 + 6 + 2 and index_ops(1, 2) == 12 and index_ops(1, 2, convert=True) == 14
    k = elementwise(n, 1, 1, "mul", BF, hw, "strided", 4, 3)
    assert k.attrs["template"] == "elementwise/pytorch-strided" and k.attrs["dims"] == 4
    assert "path" not in elementwise(n, 1, 1, "mul", BF, hw).attrs  # the vectorized kernel as before


@pytest.mark.parametrize("bad", [{"path": "tiled"}, {"path": "strided", "dims": 0}, {"path": "strided", "dims": 99}])
def test_bad_paths_are_errors(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="path|dims"):
        elementwise(1024, 1, 1, "mul", BF, get_profile("h100-sxm"), **bad)  # type: ignore[arg-type]
    assert set(PATHS) == {"vectorized", "cast", "strided"}
