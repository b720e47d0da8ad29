"""``python -m autodiag`` runs the same CLI as the ``autodiag`` command."""

from autodiag.cli import main

if __name__ == "__main__":
    main()
