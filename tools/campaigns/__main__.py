"""`python -m tools.campaigns run|commit|status`, from the repository's root."""

from tools.campaigns.cli import main

main()
