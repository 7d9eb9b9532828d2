"""``python -m gpuportal`` runs the command line."""

from .cli import main

main()
