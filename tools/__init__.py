"""The maintainers' tools, run from the repository's checkout; not part of the installed package."""
