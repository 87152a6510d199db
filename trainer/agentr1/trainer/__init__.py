"""agentr1.trainer."""
