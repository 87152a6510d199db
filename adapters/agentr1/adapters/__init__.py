"""agentr1.adapters."""
