"""Deterministic simulation of the group coordinator (issue 40); see docs/simulation.md."""
