"""One module per ``posenc`` subcommand; each defines ``register(subparsers)``."""
