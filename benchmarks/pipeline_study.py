"""The GPU-Tile-Sim software-pipelining study, printed beside the paper's tensor-pipe utilisations.

    python benchmarks/pipeline_study.py

Persistent GEMM + SiLU epilogue, one H100 SM (shared memory idealised as in the paper), K = 1024, ten waves of
one output tile each, for naive 2-stage / WS cooperative / WS ping-pong / WS 3-stage at two tile sizes.
"""

from __future__ import annotations

from torchsim.studies.pipelines import ORGANISATIONS, PAPER_TENSOR_UTIL, TILES, run, stages_for


def main() -> None:
    print(f"{'tile (BM,BN,BK)':<17} {'organisation':<15} {'stages':>6} {'cycles':>8} {'rel. perf':>9} "
          f"{'tensor util':>11} {'paper':>6}  bound / main waits")
    for tile in TILES:
        results = {p: run(tile, p) for p in ORGANISATIONS}
        base = results[ORGANISATIONS[0]].cycles
        for pipe, res in results.items():
            paper = PAPER_TENSOR_UTIL.get((tile, pipe))
            waits = sorted(res.stalls.items(), key=lambda kv: -kv[1])[:2]
            total = sum(res.stalls.values()) or 1.0
            print(f"{str(tile):<17} {pipe.value:<15} {stages_for(pipe):>6} {res.cycles:>8} {base / res.cycles:>9.2f} "
                  f"{100 * res.unit_busy['tensor']:>10.1f}% {f'{100 * paper:.1f}%' if paper else '—':>6}  "
                  f"{res.bound}; " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in waits))


if __name__ == "__main__":
    main()
