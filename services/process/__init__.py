"""Plumbing shared by every groupcoord process: gRPC serving, telemetry, logging, config."""
