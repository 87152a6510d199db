"""Every advantage estimator on the arithmetic chains: one recipe each, identical but for algorithm.* (README.md)."""
