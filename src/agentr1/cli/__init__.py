"""The `agentr1` command line."""
