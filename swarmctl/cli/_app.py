"""The Typer application every command module registers with."""

import typer

app = typer.Typer(
    name="swarmctl",
    help="SWARM mappings: set-equivariant recurrent layers, baselines, and the paper's experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

