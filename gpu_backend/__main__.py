"""``python -m gpu_backend``: run the server (see ``cli`` for the flags)."""

from .cli import main

main()
