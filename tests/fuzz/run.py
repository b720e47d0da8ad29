"""Run the differential fuzzer against PyTorch and print a table of difference classes.

    python tests/fuzz/run.py --seconds 900            # a long run (seed 0)
    python tests/fuzz/run.py --programs 2000 --seed 7 # a fixed number of programs
    python tests/fuzz/run.py --seconds 60 --known     # leave out the known-issue classes
    python tests/fuzz/run.py --replay 7:123           # print program 123 of seed 7 and its verdict

Every failing program is shrunk and classified (``ops | stage what: detail``); for each class
the table gives its count and the smallest repro found, as a runnable Python snippet that prints
both libraries' results. Refusals (autodiag's NotImplementedError naming the op) are counted by op.
Exit status: 0 when no (unknown) difference was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz.campaign import Campaign  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=None, help="time budget")
    ap.add_argument("--programs", type=int, default=None, help="number of programs")
    ap.add_argument("--seed", type=int, default=0, help="base seed (program i uses (seed, i))")
    ap.add_argument("--max-steps", type=int, default=8, help="steps per program, at most")
    ap.add_argument(
        "--known",
        action="store_true",
        help="count the classes listed in known_issues.py apart (as CI does)",
    )
    ap.add_argument("--ops", default=None, help="comma-separated op names to draw from")
    ap.add_argument(
        "--extended",
        action="store_true",
        help="also draw the ops whose classes are open (fuzz/ops.py EXTENDED)",
    )
    ap.add_argument("--repros", type=int, default=40, help="classes printed with a repro")
    ap.add_argument("--markdown", default=None, help="also write the table to this file")
    ap.add_argument("--replay", default=None, metavar="SEED:I", help="one program, verbosely")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    import autodiag

    ops = set(args.ops.split(",")) if args.ops else None
    if args.extended and ops is None:
        from fuzz.ops import OPS

        ops = set(OPS)
    camp = Campaign(
        torch,
        autodiag,
        seed=args.seed,
        max_steps=args.max_steps,
        op_names=ops,
        use_known=args.known,
    )
    if args.replay:
        seed, i = (int(x) for x in args.replay.split(":"))
        camp.seed = seed
        print(camp.replay(i))
        return 0
    if args.seconds is None and args.programs is None:
        args.seconds = 60.0
    deadline = None if args.seconds is None else time.monotonic() + args.seconds
    last = time.monotonic()

    def write_markdown():
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(camp.report(max_repros=args.repros, markdown=True))

    try:
        while (args.programs is None or camp.programs < args.programs) and (
            deadline is None or time.monotonic() < deadline
        ):
            camp.step()
            if time.monotonic() - last > 30:
                last = time.monotonic()
                print(
                    f"... {camp.programs} programs, {camp.failing} with a difference, "
                    f"{len(camp.classes)} classes",
                    file=sys.stderr,
                    flush=True,
                )
                write_markdown()  # a long run that dies still leaves its table
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    except Exception:
        # a bug of the fuzzer itself: the table so far, then the traceback
        print(f"fuzzer error in program {camp.seed}:{camp.programs - 1}", file=sys.stderr)
        write_markdown()
        raise
    print(camp.report(max_repros=args.repros))
    write_markdown()
    return 1 if camp.unknown_failing else 0


if __name__ == "__main__":
    sys.exit(main())
