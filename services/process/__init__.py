"""What operates a groupcoord process, whatever it serves: metrics, telemetry, logs, health,
TLS and the internal gRPC channels (serving RPCs is :mod:`services.rpc`)."""
