"""Recipes: the calculator tool task with each registered advantage estimator (see README.md)."""
