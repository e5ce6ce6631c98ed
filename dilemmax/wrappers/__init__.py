"""Wrappers around the JAX environments: logging, batching, PettingZoo, text."""
