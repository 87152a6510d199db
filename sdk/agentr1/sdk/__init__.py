"""agentr1.sdk."""
