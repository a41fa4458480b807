"""``python -m vllmdiag`` and the ``vllmdiag`` command (pyproject's entry point): the first code that
runs. On a node whose every core is busy, what runs before the tool raises its own priority runs
at the mercy of the spinning threads, so it is only this: the priority (vllmdiag/priority.py says
why it cannot hurt the target), then the CLI."""

import sys

from vllmdiag.priority import boost_first


def main() -> None:
    boost_first(sys.argv[1:])
    from vllmdiag.cli.app import main as run

    run()


if __name__ == "__main__":
    main()
