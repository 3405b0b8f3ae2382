"""`specsparse profile`: measure, check and show the cost profile that searches price configurations with."""

from __future__ import annotations

import argparse

from specsparse.cli.common import add_forward_path_option, fail, forward_path_problem, missing_model, set_threads
from specsparse.decoding.models import ModelLoadError
from specsparse.util import first_line


def add_profile_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure (or show) the model's cost profile that searches price configurations with",
        description="Times target forwards over kept layers and chunk lengths (the fastest of interleaved "
                    "repeats), fits the cost model with non-negative coefficients, checks it, and stores it beside "
                    "the model cache; prints each check and what identifies the profile. A stored profile that fails "
                    "a check is measured again. See specsparse/measuring/profile_fit.py.",
    )
    p.add_argument("--model", default="smollm2-135m", help="any model source run.py accepts (default: smollm2-135m)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    add_forward_path_option(p)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    p.add_argument("--force", action="store_true", help="measure again even when a profile is stored")
    p.add_argument("--allow-busy", action="store_true",
                   help="measure even when this process does not get the CPU it asks for (other busy processes); "
                        "the profile records it. Without it, a busy machine is refused with one line")
    p.set_defaults(func=run_profile)


def run_profile(args: argparse.Namespace) -> int:
    from specsparse.decoding.models import device_problem, load_model  # noqa: PLC0415
    from specsparse.measuring.profile import (  # noqa: PLC0415
        ProfileError,
        measure_checked_profile,
        profile_for,
        profile_record,
        save_profile,
    )
    from specsparse.measuring.profile_fit import profile_checks  # noqa: PLC0415

    if (code := set_threads(args.threads)) is not None:
        return code
    if message := missing_model(args.model) or forward_path_problem(args.forward_path, args.device, args.dtype):
        return fail(message)
    if problem := device_problem(args.device):
        return fail(f"--device {args.device}: {problem}")
    try:
        loaded = load_model(args.model, dtype=args.dtype, device=args.device, forward_path=args.forward_path)
    except (ModelLoadError, ValueError) as err:
        return fail(first_line(err))
    try:
        if args.force:
            save_profile(measure_checked_profile(loaded.model, progress=True, allow_busy=args.allow_busy))
        profile = profile_for(loaded.model, progress=True, allow_busy=args.allow_busy)
    except ProfileError as err:
        return fail(first_line(err))
    record = profile_record(profile)
    print(f"cost profile: {record['path']}")
    print(f"sha256:       {record['sha256']}")
    share = record["cpu_share"]
    print(f"measured at:  {record['measured_at']} (UTC), load average {record['load_average']}, CPU share "
          f"{'unknown' if share is None else ' / '.join(f'{v:.0%}' for v in share)} (before / after)"
          f"{', measured busy (--allow-busy)' if record['allowed_busy'] else ''}")
    print(f"coefficients: one token (a1, b1) = {', '.join(f'{1000 * v:.4g}' for v in profile.single)} ms; "
          f"more (a, b, c, d) = {', '.join(f'{1000 * v:.4g}' for v in profile.verify)} ms")
    print("checks:")
    for check in profile_checks(profile):
        print(f"  {'pass' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
    print(f"{'kept layers':>12}{'chunk':>7}{'fastest ms':>12}{'modeled ms':>12}")
    for kept, chunk, seconds in profile.samples:
        print(f"{kept:>12}{chunk:>7}{1000 * seconds:>12.2f}{1000 * profile.verify_time(kept, chunk):>12.2f}")
    return 0
