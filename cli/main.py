"""The `mars` command. It drives the flows, so it lives above them.

    mars train --config configs/smoke.yaml [--overlay configs/scales/smoke.yaml] [--runs-dir runs]
        [--run-name NAME] [--set k=v ...]
    mars check CONFIG [--overlay configs/scales/smoke.yaml] [--set k=v ...] [--run-name NAME]
        (the preset validated, its models checked, its plan printed; nothing written)
    mars compare [--presets A.yaml,B.yaml] [--overlay configs/scales/smoke.yaml] [--set k=v ...]
        [--eval-preset configs/eval/...yaml] [--games G1,G2] [--n N] [--name ablations]
    mars compare --seeds 0,1,2 [--bases B1.yaml,B2.yaml] [--variants V1.yaml,...] [--n N]
        (every variant over every base once per seed; intervals over seeds: `make ablate`)
    mars eval games --policy SPEC [--preset configs/eval/...yaml] [--games G1,G2]
        [--opponents O1,O2] [--n N] [--seed S] [--out results.json] [--tracking-uri URI]
    mars eval mas --model SPEC [--baseline SPEC] [--systems single,mad,autogen]
        [--benchmarks B1,B2] [--limit N] [--max-new-tokens N] [--out mas_results.json]
        [--data-dir DIR|hf://] [--gpqa-path FILE] [--tracking-uri URI]
    mars eval harness --model SPEC [--benchmarks B1,B2] [--limit N] [--max-new-tokens N] [--out F]
        (lm-evaluation-harness, the `eval` extra; same benchmark files and graders)
    mars arena [--preset configs/arena/...yaml] [--agents A,LABEL=SPEC,...] [--run RUN_DIR]
        [--games G1,G2] [--schedule round_robin|sampled] [--n N] [--matches M] [--seed S]
        [--reference POOL.yaml] [--save-pool POOL.yaml] [--out arena.json] [--tracking-uri URI]
        (TrueSkill leaderboard; --reference scores newcomers against a frozen pool)
    mars replay RUN [--episode ID] [--iteration K] [--out FILE] [--tracking-uri URI]
        (one episode as an HTML page; RUN: a run/iteration/episodes folder or runs:/ID/PATH)
    mars services [--host H] [--prefect-port 4200] [--mlflow-port 5000] [--runs-dir runs]
        [--mlflow-auth]
        (the Prefect and MLflow servers in the foreground until Ctrl-C; the work pool)

Running the same `train` command again (same run name) resumes the run where it stopped.
Everything that can be refused (bad config, unknown game or opponent, an opponent that does
not fit a game, a missing model) is refused in one line before a flow starts, and refusing
writes nothing (the flows create the run folders). SIGTERM and SIGHUP stop a command as
Ctrl-C does (cli/signals.py): exit code 130, nothing left running.

The subcommands are one table (`cli/commands.py`), one module each (`cli/train.py`, ...);
shared checks in `cli/checks.py`, what is reported as one line in `cli/errors.py`.
"""
from __future__ import annotations

import mars_core.run.threads  # noqa: F401  (first, before anything loads torch or Prefect)

import sys

from cli import signals
from cli.commands import COMMANDS, parser
from cli.errors import check_prefect_api, one_line_errors, prefect_outage, prefect_start_timeout
from mars_core.run import offline
from mars_core.privacy.redact import redact_urls


def main(argv: list[str] | None = None) -> int:
    signals.handle_like_ctrl_c()  # SIGTERM, SIGHUP: as Ctrl-C
    # Offline unless told otherwise; `hf://` (benchmarks from their publishers) asks for the hub.
    offline.apply(hub=any("hf://" in a for a in (sys.argv[1:] if argv is None else argv)))
    args = parser().parse_args(argv)
    command = COMMANDS[args.command]
    errors = one_line_errors()
    try:
        temporary = command.prefect and not check_prefect_api()
        command.module.check(args)
        if temporary:  # no Prefect server configured: Prefect's temporary one
            signals.start_temporary_server()
        if command.prefect:  # its SIGTERM handler, while a flow runs: not inside an import
            signals.guard_prefect()
        result = command.module.run(args)
    except KeyboardInterrupt:
        return _interrupted(command)
    except errors as e:
        print(f"mars: error: {redact_urls(str(e))}", file=sys.stderr)  # a URL's password too
        return 2
    except Exception as e:
        lost = prefect_start_timeout(e) or prefect_outage(e)
        if lost is None:
            raise
        print(f"mars: error: {lost}", file=sys.stderr)
        return 2
    try:  # an interrupt that lands after the work (one delivered again: cli/signals.py)
        _say(command.module.done(args, result))
    except KeyboardInterrupt:
        return _interrupted(command)
    return 0


def _interrupted(command) -> int:
    signals.settle()  # stopped: a swallowed copy of the interrupt is not delivered again
    hint = "; run the same command again to resume" if command.resumable else ""
    _say(f"mars: interrupted{hint}", sys.stderr)
    return 130


def _say(line: str, stream=None) -> None:
    """A closing line; a terminal that was closed (SIGHUP) cannot take it, which is no error."""
    try:
        print(line, file=stream or sys.stdout, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
