"""``qjournal bench gen-edits``: generate a NameNode edit history as JournalNode segments.

Why: the pipeline's tests, its benchmark and demos need journals of any size
with known damage; :mod:`qjournal.pipeline.generate` builds them
deterministically from a seed by driving the real Namespace.
"""

from __future__ import annotations

import json
import sys

from qjournal.pipeline.generate import DAMAGE_KINDS, GenOptions, generate


def _parse_txids(text: str) -> tuple[int, ...]:
    try:
        return tuple(sorted({int(t) for t in text.split(",") if t.strip()}))
    except ValueError:
        raise SystemExit(f"qjournal bench gen-edits: --image-txids {text!r}: expected integers "
                         "separated by commas") from None


def register(subparsers) -> None:
    """Add the ``bench`` subcommand (``gen-edits``)."""

    p = subparsers.add_parser("bench")
    sub = p.add_subparsers(dest="bench_command", metavar="COMMAND")
    g = sub.add_parser("gen-edits", help="generate a deterministic edit history as JournalNode segments")
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("--txns", type=int, required=True, help="total txids (segment markers included)")
    g.add_argument("--out", required=True, metavar="DIR")
    g.add_argument("--nodes", type=int, default=3)
    g.add_argument("--jid", default="qjournal")
    g.add_argument("--roll-every-txns", type=int, default=1000, help="txids per segment")
    g.add_argument("--users", type=int, default=24)
    g.add_argument("--lagging-node", action="store_true",
                   help="the last node misses the newest segments")
    g.add_argument("--corrupt", action="append", default=[], choices=[k for k in DAMAGE_KINDS
                                                                      if k != "lagging"],
                   help="damage to inject (repeatable): bitflip, divergent, gap")
    g.add_argument("--image-txids", default="", metavar="T1,T2",
                   help="save the NameNode's own image at these txids (0 = empty namespace)")
    g.set_defaults(func=_gen_edits)
    p.set_defaults(func=lambda _a: (p.print_help(), 2)[1])


def _gen_edits(args) -> int:
    damage = (("lagging",) if args.lagging_node else ()) + tuple(args.corrupt)
    try:
        res = generate(GenOptions(seed=args.seed, txns=args.txns, out=args.out, nodes=args.nodes,
                                  jid=args.jid, roll_every_txns=args.roll_every_txns, users=args.users,
                                  damage=damage, image_txids=_parse_txids(args.image_txids)))
    except ValueError as e:
        print(f"qjournal bench gen-edits: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"journal_dirs": res.journal_dirs, "name_dir": res.name_dir,
                      "last_txid": res.last_txid, "segments": len(res.segments),
                      "damage": res.damage, "images": res.images}))
    return 0
