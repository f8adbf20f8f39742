"""Command-line interface: argument parsing only; each subcommand in its own module."""
