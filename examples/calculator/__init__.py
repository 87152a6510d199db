"""Calculator arithmetic: the small, quick task the README's main command trains on."""
