"""Command-line interface: one small module per subcommand (`add_parser` + `run`)."""
