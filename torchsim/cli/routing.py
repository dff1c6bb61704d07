"""`torchsim routing record|show`: record MoE routing counts into a file, or print a file or a pattern.

Front end of models.routing_hook (record), models.routing_io (files) and models.routing_synthetic (patterns);
the file written here is what `torchsim predict --routing FILE` reads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, int_in


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("routing", help=COMMAND_HELP["routing"])
    sub = parser.add_subparsers(dest="routing_command", required=True)
    rec = sub.add_parser("record", help="run an MoE model's routers on token inputs and save the counts")
    src = rec.add_mutually_exclusive_group()
    src.add_argument("--model", default="mixtral-tiny",
                     help="torchsim MoE config run on CPU with random-init weights (default: mixtral-tiny)")
    src.add_argument("--checkpoint", type=Path, help="local HF MoE checkpoint directory (from_pretrained, no download)")
    rec.add_argument("--text", type=Path, help="text file to tokenize with the checkpoint's tokenizer")
    # bounds: the routers run on CPU over batch x seq tokens (and the model's activations for them), so a typo
    # (--seq 1000000000) is a clear error rather than a 32 GB allocation
    rec.add_argument("--batch", type=int_in(1, 4096), default=4, help="sequences of random token ids (default 4)")
    rec.add_argument("--seq", type=int_in(1, 1 << 17), default=64, help="tokens per sequence (default 64)")
    rec.add_argument("--seed", type=int_in(0, MAX_SEED), default=0, help="seed for weights and token ids (default 0)")
    rec.add_argument("-o", "--output", type=Path, required=True, help="routing file to write (.json or .parquet)")
    rec.set_defaults(func=_record)
    show = sub.add_parser("show", help="print a routing file or a synthetic pattern")
    show.add_argument("source", help="a .json/.parquet routing file, or balanced|skewed|zipf[:s]|dirichlet[:alpha]")
    show.add_argument("--model", default=None,
                      help="model whose layers/experts a pattern is sized for (default mixtral-8x7b; a file has its "
                      "own)")
    show.add_argument("--tokens", type=int_in(1, 1 << 40), default=None,
                      help="tokens to route (default: the file's own count; 2048 for patterns)")
    show.add_argument("--seed", type=int_in(0, MAX_SEED), default=None,
                      help="seed of the sampled patterns, zipf and dirichlet (default 0)")
    show.set_defaults(func=_show)


MAX_TOKENS = 1 << 20  # tokens one `routing record` routes: activations for them are held on CPU at once
MAX_SEED = (1 << 63) - 1  # numpy's and torch's generators take seeds in [0, 2**63)
# the random-init weights `routing record` builds on CPU in float32: above this the model would not fit in the
# memory of a workstation (mixtral-8x7b is 187 GB in float32), so the recording is refused before allocating
MAX_RECORD_WEIGHT_BYTES = 8 << 30


def _check_tokens(args: argparse.Namespace) -> None:
    if args.batch <= 0 or args.seq <= 0:
        raise UsageError(f"--batch and --seq must be > 0, got {args.batch} and {args.seq}")
    if args.batch * args.seq > MAX_TOKENS:
        raise UsageError(f"--batch {args.batch} x --seq {args.seq} = {args.batch * args.seq:,} tokens is above the "
                         f"{MAX_TOKENS:,} a recording runs at once on CPU; record fewer tokens")


def _token_ids(args: argparse.Namespace, vocab_size: int) -> Any:
    import torch

    _check_tokens(args)
    return torch.randint(0, vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(args.seed))


def _record(args: argparse.Namespace) -> int:
    from torchsim.exports.atomic import write_bytes_atomic
    from torchsim.models.routing_hook import record_routing, record_routing_from_checkpoint
    from torchsim.models.routing_io import save_routing

    if args.checkpoint is not None:
        if not args.checkpoint.is_dir():
            raise UsageError(f"--checkpoint {args.checkpoint}: no such directory (a local HF checkpoint directory "
                             f"with config.json; torchsim never downloads)")
        if not (args.checkpoint / "config.json").is_file():
            raise UsageError(f"--checkpoint {args.checkpoint}: the directory has no config.json, so it is not an HF "
                             f"checkpoint")
        if args.text is not None and not args.text.is_file():
            raise UsageError(f"--text {args.text}: no such file")
        from torchsim.models.hf import require_transformers

        transformers = require_transformers()
        if args.text is not None:
            try:
                tok = transformers.AutoTokenizer.from_pretrained(str(args.checkpoint), local_files_only=True)
            except (OSError, ValueError, KeyError, TypeError) as exc:  # no or damaged tokenizer files
                first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
                raise UsageError(f"--text needs the tokenizer of --checkpoint {args.checkpoint}, which transformers "
                                 f"cannot load ({first}); record without --text (random token ids)") from None
            try:
                text = args.text.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"--text {args.text}: not UTF-8 text (byte {exc.start})") from None
            ids = tok(text, return_tensors="pt")["input_ids"]
        else:
            cfg = transformers.AutoConfig.from_pretrained(str(args.checkpoint), local_files_only=True)
            ids = _token_ids(args, int(cfg.vocab_size))
        counts = record_routing_from_checkpoint(args.checkpoint, ids)
        model_name = args.checkpoint.name
    else:
        if args.text is not None:
            raise UsageError("--text needs --checkpoint (a tokenizer); torchsim's own models take random token ids")
        from torchsim.models.mixtral import MixtralConfig, build_mixtral
        from torchsim.models.registry import get_config

        cfg = get_config(args.model)
        if not isinstance(cfg, MixtralConfig):
            raise UsageError(f"model {args.model!r} has no MoE layers; give a Mixtral-family config")
        _check_recordable(args, cfg)
        import torch

        model = build_mixtral(cfg, device="cpu", dtype=torch.float32, seed=args.seed)
        counts = record_routing(model, [_token_ids(args, cfg.vocab_size)], source=f"hook:{args.model}")
        model_name = args.model
    path = save_routing(counts, args.output, model=model_name, write=write_bytes_atomic)
    print(counts.describe())
    print(f"wrote {path}")
    return 0


def _check_recordable(args: argparse.Namespace, cfg: Any) -> None:
    """Refuse, before building, a recording that would not fit on CPU or runs past the model's context."""
    _check_tokens(args)
    weights = 4 * cfg.param_count()
    if weights > MAX_RECORD_WEIGHT_BYTES:
        raise UsageError(f"--model {args.model}: recording builds its {cfg.param_count() / 1e9:.1f}B parameters on CPU "
                         f"in float32 ({weights / 2**30:.0f} GiB, above the {MAX_RECORD_WEIGHT_BYTES >> 30} GiB "
                         f"torchsim allows); record a small config (mixtral-tiny) or a real checkpoint's router "
                         f"(--checkpoint), or use a pattern (`--routing skewed`)")
    context = int(getattr(cfg, "max_position_embeddings", 0) or 0)
    if context and args.seq > context:
        raise UsageError(f"--seq {args.seq} is longer than {args.model}'s context of {context} tokens "
                         f"(max_position_embeddings); give --seq 1..{context}")


def _show(args: argparse.Namespace) -> int:
    from torchsim.models.mixtral import MixtralConfig
    from torchsim.models.registry import get_config
    from torchsim.models.routing import resolve_routing
    from torchsim.models.routing_io import load_routing

    if Path(args.source).suffix.lower() in (".json", ".parquet"):
        if args.model is not None:
            raise UsageError(f"--model sizes a pattern; the routing file {args.source} has its own layers and experts "
                             f"(drop --model)")
        if args.seed is not None:
            raise UsageError(f"--seed draws a sampled pattern; the routing file {args.source} holds its counts "
                             f"(drop --seed)")
        counts = load_routing(args.source)
        print((counts.scaled(args.tokens) if args.tokens else counts).describe())
        return 0
    if args.seed is not None and args.source.split(":")[0].strip().lower() in ("balanced", "skewed"):
        raise UsageError(f"--seed draws a sampled pattern (zipf, dirichlet); {args.source} is computed, not sampled "
                         f"(drop --seed)")
    args.model = args.model or "mixtral-8x7b"
    cfg = get_config(args.model)
    if not isinstance(cfg, MixtralConfig):
        raise UsageError(f"model {args.model!r} has no MoE layers; give a Mixtral-family config")
    counts = resolve_routing(args.source, num_layers=cfg.num_hidden_layers, num_experts=cfg.num_local_experts,
                             top_k=cfg.num_experts_per_tok, tokens=args.tokens or 2048, seed=args.seed or 0)
    print(counts.describe())
    return 0
