"""Arithmetic chains: multi-step problems whose every step needs a calculator call (see README.md)."""
