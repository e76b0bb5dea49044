"""`dew`, the one console command: a subcommand per entry point, one module each, each a
thin front that hands its arguments to the entry point's own `main` (dew.commands.main)."""
