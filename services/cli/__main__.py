"""``python -m services.cli``: the ``groupcoord`` command."""

from services.cli import main

main()
