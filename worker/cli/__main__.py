"""``python -m worker.cli``: the ``evalq`` command."""

from worker.cli import main

main()
