"""agentr1.gateway."""
