"""Argument types, help formatting and the top-level error handling of the `jitmarlin` command
(jitmarlin.cli): every value is checked by argparse with a message naming the option, and no
failure ends in a raw traceback."""

from __future__ import annotations

import argparse
import os
import sys


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where the help already says it or there is none
    (None / False defaults say nothing useful)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "(default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (sizes: M, N, K)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def jobs(text: str) -> int:
    """argparse type for --jobs: an integer >= 1, or 'auto' (also 0): one process per CPU,
    returned as 0."""
    if text.strip().lower() in ("auto", "0"):
        return 0
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 or 'auto' (one per CPU), got {text!r}") from None


def group_size(text: str) -> int:
    """argparse type for a single --group: -1 (per channel) or a positive group size."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer (-1: per channel), got {text!r}") from None
    if v == 0 or v < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (per channel) or a positive group size, got {v}")
    return v


def arch_notes() -> dict[str, str]:
    """arch -> what jitmarlin does with it, for every arch this NVRTC can build: the profile it
    plans for ('h100'), or why it is compile-only (no profile: inspect and prewarm refuse it)."""
    from jitmarlin.jit import nvrtc
    from jitmarlin.jit.profiles import ARCH_DEFAULT_PROFILE

    return {
        a: ARCH_DEFAULT_PROFILE.get(a) or "compile only: no profile, not plannable" for a in nvrtc.supported_archs()
    }


def run_main(func, args) -> int:
    """Run a subcommand: JitMarlinError -> 'jitmarlin: error: ...' and 2; any other exception ->
    one such line and 1 (the traceback only with JITMARLIN_LOG=debug); Ctrl-C -> 130; a closed
    stdout (`jitmarlin cache ls | head`) -> quiet exit 141, as SIGPIPE would."""
    from jitmarlin.errors import JitMarlinError

    try:
        rc = func(args)
        sys.stdout.flush()  # a broken pipe surfaces here, not at interpreter exit
        return rc
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except KeyboardInterrupt:
        print("jitmarlin: interrupted", file=sys.stderr)
        return 130
    except JitMarlinError as e:
        _error(str(e))
        return 2
    except Exception as e:
        if os.environ.get("JITMARLIN_LOG", "").strip().lower() == "debug":
            raise
        _error(f"{type(e).__name__}: {e} (JITMARLIN_LOG=debug shows the traceback)")
        return 1


def _error(text: str) -> None:
    first, _, rest = text.partition("\n")
    try:
        print(f"jitmarlin: error: {first}" + (f"\n{rest}" if rest else ""), file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
