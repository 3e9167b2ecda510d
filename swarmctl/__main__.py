"""`python -m swarmctl` runs the CLI."""

from swarmctl.cli import main

if __name__ == "__main__":
    main()
